"""deploy/k8s: valid Kubernetes resources, the Procfile's processes, one scheduler, a sandbox."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.files import (
    IMAGE,
    containers,
    kubernetes,
    kustomization,
    procfile,
    resource_name,
)

# The oldest Kubernetes whose pods get user namespaces and an unmasked /proc by default,
# and the newest whose schemas kubernetes-validate ships.
VERSIONS = ["1.33.0", kubernetes_validate.utils.latest_version()]
RESOURCES = kubernetes()
RUNNING = [resource for resource in RESOURCES if containers(resource)]


def by_name(name: str) -> dict[str, Any]:
    return next(resource for resource in RESOURCES if resource["metadata"]["name"] == name)


def test_the_kustomization_only_lists_resources() -> None:
    # Anything else would change what kubectl renders from what these tests read.
    assert set(kustomization()) == {"apiVersion", "kind", "resources"}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("resource", RESOURCES, ids=resource_name)
def test_each_resource_matches_the_kubernetes_schema(resource: dict, version: str) -> None:
    # Strict: a misspelt or misplaced field is an error, not silently ignored.
    kubernetes_validate.validate(resource, version, strict=True)


def test_no_resource_names_a_namespace() -> None:
    assert [r for r in RESOURCES if "namespace" in r["metadata"]] == []


@pytest.mark.parametrize("resource", RUNNING, ids=resource_name)
def test_each_process_is_the_procfiles_in_gaffers_image(resource: dict) -> None:
    (container,) = containers(resource)
    name = resource["metadata"]["name"].removeprefix("gaffer-")
    assert container["image"] == IMAGE
    assert container["command"] == procfile()[name]


def test_every_procfile_process_runs_on_kubernetes() -> None:
    assert {r["metadata"]["name"].removeprefix("gaffer-") for r in RUNNING} == set(procfile())


def test_exactly_one_scheduler_even_during_a_rollout() -> None:
    beats = [r for r in RUNNING if "--beat" in containers(r)[0]["command"]]
    assert [resource_name(r) for r in beats] == ["Deployment/gaffer-scheduler"]
    assert beats[0]["spec"]["replicas"] == 1
    assert beats[0]["spec"]["strategy"] == {"type": "Recreate"}


def test_the_web_is_ready_on_readyz_and_alive_on_healthz() -> None:
    (web,) = containers(by_name("gaffer-web"))
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert web["ports"] == [{"name": "http", "containerPort": 8000}]
    assert [r["kind"] for r in RESOURCES if r["metadata"]["name"] == "gaffer-web"] == [
        "Deployment",
        "Service",
    ]


@pytest.mark.parametrize("resource", RUNNING, ids=resource_name)
def test_every_process_runs_as_gaffers_unprivileged_user(resource: dict) -> None:
    pod = resource["spec"]["template"]["spec"]["securityContext"]
    assert (pod["runAsNonRoot"], pod["runAsUser"]) == (True, 10001)
    assert containers(resource)[0]["securityContext"]["allowPrivilegeEscalation"] is False


def test_agent_workers_allow_what_the_sandbox_needs() -> None:
    """deploy/README.md's table: no seccomp filter, no AppArmor, a /proc it may mount anew."""
    pod = by_name("gaffer-agent")["spec"]["template"]["spec"]
    (agent,) = containers(by_name("gaffer-agent"))
    assert pod["hostUsers"] is False  # procMount Unmasked is granted only in a user namespace
    assert agent["securityContext"]["seccompProfile"] == {"type": "Unconfined"}
    assert agent["securityContext"]["appArmorProfile"] == {"type": "Unconfined"}
    assert agent["securityContext"]["procMount"] == "Unmasked"


@pytest.mark.parametrize("resource", RUNNING, ids=resource_name)
def test_only_agent_workers_leave_the_default_seccomp_profile(resource: dict) -> None:
    pod = resource["spec"]["template"]["spec"]["securityContext"]
    container = containers(resource)[0]["securityContext"]
    profile = container.get("seccompProfile", pod["seccompProfile"])["type"]
    agent = resource["metadata"]["name"] == "gaffer-agent"
    assert profile == ("Unconfined" if agent else "RuntimeDefault")


def test_the_secret_holds_every_setting_gaffer_needs_as_a_placeholder() -> None:
    settings = by_name("gaffer")["stringData"]
    assert set(settings) == {"APP_ID", "WEBHOOK_SECRET", "DATABASE_URL", "BROKER_URL"}
    assert "private-key.pem" in by_name("gaffer-key")["stringData"]
    values = [*settings.values(), *by_name("gaffer-key")["stringData"].values()]
    assert all("<" in value for value in values), "a real secret in the template"
