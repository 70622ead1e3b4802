"""deploy/Dockerfile: one image, gaffer's code and the sandbox's programs, run unprivileged."""

from __future__ import annotations

import re

import pytest

from tests.deploy.files import DEPLOY

DOCKERFILE = (DEPLOY / "Dockerfile").read_text()
# The programs the worker runs, and the Debian package that brings each.
PROGRAMS = {
    "git": "git",
    "bwrap": "bubblewrap",  # the sandbox
    "socat": "socat",  # the sandbox's egress relay
    "setpriv": "util-linux",  # dropping to the run's uid
    "unshare": "util-linux",  # the network namespace
    "ip": "iproute2",
}


def instructions(keyword: str) -> list[str]:
    """The arguments of each instruction with this keyword, continuation lines joined."""
    joined = DOCKERFILE.replace("\\\n", " ")
    return re.findall(rf"^{keyword} +(.*)$", joined, flags=re.MULTILINE)


def test_the_processes_run_as_the_unprivileged_user_gaffer() -> None:
    assert instructions("USER")[-1] == "gaffer"
    # uid 10001, as the Kubernetes manifests' runAsUser says.
    assert re.search(r"useradd [^&]*--uid 10001 [^&]*\bgaffer\s", DOCKERFILE)


@pytest.mark.parametrize(("program", "package"), PROGRAMS.items())
def test_the_image_installs_what_the_worker_runs(program: str, package: str) -> None:
    (apt,) = [run for run in instructions("RUN") if "apt-get install" in run]
    assert package in apt.split(), f"{program} comes with {package}"


def test_the_image_holds_gaffers_code_and_not_its_test_tooling() -> None:
    copied = {line.split()[0] for line in instructions("COPY")}
    assert {"bot", "tasks", "config"} <= copied
    assert "double" not in copied and "tests" not in copied


def test_the_image_serves_on_the_port_gaffer_uses_by_default() -> None:
    assert instructions("EXPOSE") == ["8000"]
    assert instructions("CMD") == ['["gaffer", "run"]']
