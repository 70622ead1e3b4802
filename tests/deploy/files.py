"""What deploy/ declares, read as data: the Procfile, compose.yml, the Kubernetes resources."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPOSE = DEPLOY / "compose.yml"
KUSTOMIZATION = DEPLOY / "k8s" / "kustomization.yaml"
IMAGE = "gaffer:local"
# compose.yml and the Kubernetes Job call the Procfile's `release` step `migrate`.
STEP_NAMES = {"release": "migrate"}


def procfile() -> dict[str, list[str]]:
    """Each Procfile process's command, without the variables set before it."""
    lines = (DEPLOY / "Procfile").read_text().splitlines()
    entries = dict(line.split(": ", 1) for line in lines if line and not line.startswith("#"))
    return {STEP_NAMES.get(name, name): _without_assignments(cmd) for name, cmd in entries.items()}


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def gaffer_services(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """compose.yml's services that run gaffer: `gaffer ...` or `python -m tasks.worker ...`."""
    services = document["services"].items()
    return {name: s for name, s in services if s.get("command", [""])[0] in ("gaffer", "python")}


def kubernetes() -> list[dict[str, Any]]:
    """The resources `kubectl kustomize deploy/k8s` renders.

    Read directly, so that nothing but Python is needed: kustomization.yaml may therefore
    only list resources; a transformer (patches, labels, images) would be left unapplied,
    and the first test says so.
    """
    resources: list[dict[str, Any]] = []
    for name in kustomization()["resources"]:
        text = (KUSTOMIZATION.parent / name).read_text()
        resources += [document for document in yaml.safe_load_all(text) if document]
    return resources


def kustomization() -> dict[str, Any]:
    return yaml.safe_load(KUSTOMIZATION.read_text())


def containers(resource: dict[str, Any]) -> list[dict[str, Any]]:
    """The containers of a Deployment's or a Job's pods; none for other kinds."""
    if resource["kind"] not in ("Deployment", "Job"):
        return []
    return resource["spec"]["template"]["spec"]["containers"]


def resource_name(resource: dict[str, Any]) -> str:
    return f"{resource['kind']}/{resource['metadata']['name']}"


def _without_assignments(command: str) -> list[str]:
    words = shlex.split(command)
    while words and "=" in words[0]:
        words.pop(0)
    return words
