"""`gaffer setup` as a child process, and a browser's part in the manifest flow."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest
import requests

from double.driver import wait_for

ROOT = Path(__file__).resolve().parents[2]
WEBHOOK_URL = "https://gaffer.example.com/webhooks/github"


class FormReader(HTMLParser):
    """The first form of a page: its action and its inputs' values."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "form" and self.action is None:
            self.action = found.get("action")
        elif tag == "input" and found.get("name"):
            self.fields[found["name"] or ""] = found.get("value") or ""


def read_form(page: str) -> FormReader:
    reader = FormReader()
    reader.feed(page)
    return reader


@dataclass
class SetupProcess:
    """`gaffer setup` running in its own folder, its page on a loopback port."""

    process: subprocess.Popen[bytes]
    folder: Path
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def env_path(self) -> Path:
        return self.folder / ".env"

    def listening(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"gaffer setup exited:\n{self.log()}")
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", self.port)) == 0

    def finish(self) -> int:
        return self.process.wait(timeout=30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def create_app(self, github_web: str) -> requests.Response:
        """Do what the person's browser does: open the page, post its form to GitHub, and
        follow GitHub's redirect back; return the redirect (not yet followed)."""
        page = requests.get(self.url, timeout=10)
        assert page.status_code == 200, page.text
        form = read_form(page.text)
        assert form.action and form.action.startswith(f"{github_web}/"), form.action
        return requests.post(form.action, data=form.fields, allow_redirects=False, timeout=10)


@pytest.fixture
def setup_env(github_server: str, tmp_path: Path) -> dict[str, str]:
    """A shell with no App settings, GitHub being the double served over HTTP."""
    unset = {"APP_ID", "PRIVATE_KEY", "PRIVATE_KEY_PATH", "WEBHOOK_SECRET"}
    env = {name: value for name, value in os.environ.items() if name not in unset}
    return env | {
        "PYTHONPATH": str(ROOT),
        "GAFFER_HOME": str(tmp_path / "home"),
        "GITHUB_API_URL": github_server,
        "GITHUB_WEB_URL": github_server,
    }


@pytest.fixture
def operator_folder(tmp_path: Path) -> Path:
    """Where the operator runs `gaffer setup`, and later `gaffer run`."""
    folder = tmp_path / "operator"
    folder.mkdir()
    return folder


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def start_setup(setup_env: dict[str, str], operator_folder: Path, tmp_path: Path):
    """Start `gaffer setup` in the operator's folder; stop what is left afterwards."""
    started: list[SetupProcess] = []

    def start(*options: str) -> SetupProcess:
        port = free_port()
        log_path = tmp_path / f"setup-{len(started)}.log"
        argv = ["setup", "--webhook-url", WEBHOOK_URL, "--port", str(port), *options]
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "bot.cli", *argv],
                cwd=operator_folder,
                env=setup_env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        setup = SetupProcess(process, operator_folder, port, log_path)
        started.append(setup)
        wait_for(setup.listening, timeout=30, what=f"gaffer setup's page (log: {log_path})")
        return setup

    yield start
    for setup in started:
        if setup.process.poll() is None:
            setup.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            setup.process.wait(timeout=10)
