"""compose.yml's processes started as a container would start them, behind its TLS front.

Each gaffer service runs with its command and environment from compose.yml; only what a
machine supplies is rewritten: the hosts become this test's PostgreSQL and Redis, the
secrets and volume become files in tmp_path, `python` and `gaffer` the ones installed here,
and GitHub is the double. The web gets its port from PORT, as a runtime would give it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import APP_ID, BACKENDS, BROKER_PREFIX
from tests.deploy.files import DEPLOY, compose, gaffer_services
from tests.support import WEBHOOK_SECRET, Backend, wait_for

BIN = Path(sys.executable).parent
WORKERS = ("scheduler", "github", "agent")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Processes:
    """Started children, each with its log in tmp_path; all stopped at the end."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.children: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> Path:
        log = self.folder / f"{name}.log"
        with log.open("wb") as out:
            self.children.append(
                subprocess.Popen(
                    argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            )
        self.logs.append(log)
        return log

    def alive(self) -> bool:
        """True while every child runs; otherwise fail, showing the log of one that exited."""
        for child, log in zip(self.children, self.logs, strict=True):
            assert child.poll() is None, f"{log.name} exited:\n{log.read_text()[-3000:]}"
        return True

    def stop(self) -> None:
        for child in self.children:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGTERM)
        for child in self.children:
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    yield started
    started.stop()


def as_here(argv: list[str]) -> list[str]:
    """The image's `python` and `gaffer` are this machine's."""
    return [str(BIN / "gaffer") if argv[0] == "gaffer" else sys.executable, *argv[1:]]


def environment(service: dict, backend: Backend, tmp_path: Path, **machine: str) -> dict[str, str]:
    """compose.yml's environment for a service, with the machine's parts rewritten."""
    declared = dict(service["environment"])
    assert declared["DATABASE_URL"].startswith("postgresql+psycopg://gaffer:gaffer@db/")
    assert declared["BROKER_URL"].startswith("redis://redis:6379/")
    assert declared["PRIVATE_KEY_PATH"] == "/run/secrets/gaffer-key"
    declared |= {
        "APP_ID": str(APP_ID),
        "WEBHOOK_SECRET": WEBHOOK_SECRET,
        "PRIVATE_KEY_PATH": str(tmp_path / "gaffer-key"),
        "DATABASE_URL": backend.database_url,
        "BROKER_URL": backend.broker_url,
    }
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("GAFFER_", "PORT"))}
    # The image sets GAFFER_HOME to its volume; the rest is what the test adds around it.
    return {**inherited, **declared, "GAFFER_HOME": str(tmp_path / "home"), **machine}


@pytest.mark.services
@pytest.mark.parametrize("backend", ["services"], indirect=True)
def test_compose_services_serve_readyz_through_the_tls_front(
    backend: Backend,
    tmp_path: Path,
    private_key: str,
    github_server: str,
    processes: Processes,
) -> None:
    if "services" not in BACKENDS:
        pytest.skip("compose runs PostgreSQL and Redis: GAFFER_TEST_BACKENDS leaves them out")
    services = gaffer_services(compose())
    (tmp_path / "gaffer-key").write_text(private_key)
    config = tmp_path / "gaffer-server.yml"
    # The reconciler passes every second, so that /readyz can say 200 within the test.
    config.write_text("reconcile_every_s: 1\n")
    machine = {
        "GITHUB_API_URL": github_server,
        "GAFFER_CONFIG": str(config),
        "GAFFER_BROKER_PREFIX": BROKER_PREFIX,
    }

    def env(name: str, **extra: str) -> dict[str, str]:
        return environment(services[name], backend, tmp_path, **machine, **extra)

    migrate = subprocess.run(
        as_here(services["migrate"]["command"]), env=env("migrate"), capture_output=True
    )
    assert migrate.returncode == 0, migrate.stderr.decode()
    logs = [
        processes.start(name, as_here(services[name]["command"]), env(name)) for name in WORKERS
    ]
    for log in logs:
        wait_for(
            lambda log=log: processes.alive() and b"ready." in log.read_bytes(),
            timeout=60,
            what=f"a worker to be ready (log: {log})",
        )
    web_port, https_port = free_port(), free_port()
    processes.start("web", as_here(services["web"]["command"]), env("web", PORT=str(web_port)))
    front = tmp_path / "front"
    processes.start(
        "front",
        [str(BIN / "caddy"), "run", "--config", str(DEPLOY / "Caddyfile")],
        {
            "PATH": os.environ["PATH"],
            "HOME": str(front),
            "XDG_DATA_HOME": str(front),
            "XDG_CONFIG_HOME": str(front),
            "GAFFER_HOST": "127.0.0.1",
            "GAFFER_HTTP_PORT": str(free_port()),
            "GAFFER_HTTPS_PORT": str(https_port),
            "GAFFER_WEB": f"127.0.0.1:{web_port}",
        },
    )
    authority = front / "caddy" / "pki" / "authorities" / "local" / "root.crt"

    def ready() -> bool:
        processes.alive()
        try:
            answer = requests.get(
                f"https://127.0.0.1:{https_port}/readyz", verify=str(authority), timeout=5
            )
        except (requests.ConnectionError, requests.Timeout, OSError):
            return False  # not listening yet, or its certificate not made yet
        return answer.status_code == 200

    wait_for(ready, timeout=90, what="/readyz to answer 200 through the front")
