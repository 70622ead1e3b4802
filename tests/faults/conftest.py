"""Fixtures for fault tests: workers started when the test says, and the reconciler in-process."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import yaml

from bot.queue import make_celery
from bot.settings import Settings
from double.driver import IssueFlow
from double.origin import commit_to_origin
from tasks.context import WorkerContext
from tests.conftest import INSTALLATION_ID, REPO
from tests.support import WEBHOOK_SECRET, Backend, WorkerProcess, wait_for

CONFIG = """\
checks:
  - name: tests
    run: "grep -q good widgets.py"
    timeout: 30
max_retries: 0
"""

StartWorker = Callable[..., WorkerProcess]
BuildContext = Callable[..., WorkerContext]


@pytest.fixture
def flow(app, client, github, origin: Path) -> IssueFlow:
    """An issue on the double whose repository checks that widgets.py says good."""
    commit_to_origin(origin, {".github/gaffer.yml": CONFIG}, "configure gaffer")
    return IssueFlow(app, client, github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET)


@pytest.fixture
def worker_context(
    settings: Settings, github_server: str, server_config: Path
) -> Iterator[BuildContext]:
    """Build the context a worker's reconciler runs with, here in the test's process."""
    made: list[WorkerContext] = []

    def build(*, broker_url: str | None = None) -> WorkerContext:
        config = yaml.safe_load(server_config.read_text())
        here = dataclasses.replace(
            settings,
            github_api_url=github_server,
            server_config=config,
            broker_url=broker_url or settings.broker_url,
        )
        made.append(WorkerContext.build(here, make_celery(here)))
        return made[-1]

    yield build
    for context in made:
        context.db.dispose()
        context.celery.close()


@dataclass
class BrokerOutage:
    """A broker of the test's own that it can take away and bring back."""

    url: str
    stop: Callable[[], None]
    start: Callable[[], None]


@pytest.fixture
def broker_outage(backend: Backend, tmp_path: Path) -> Iterator[BrokerOutage]:
    """A private redis-server (services) or SQL-broker file (embedded) to stop and start."""
    if backend.name == "embedded":
        path = tmp_path / "outage" / "broker.sqlite"
        path.parent.mkdir()
        # SQLite cannot open a folder as its database: the broker is down while one is there.
        yield BrokerOutage(f"sqla+sqlite:///{path}", path.mkdir, path.rmdir)
        return
    with private_redis(tmp_path / "redis") as redis_server:
        yield BrokerOutage(redis_server.url, redis_server.stop, redis_server.start)


@dataclass
class RedisServer:
    """A redis-server on a free loopback port, never the machine's shared one."""

    port: int
    folder: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--dir", str(self.folder), "--save", "", "--appendonly", "no"]
        with (self.folder / "redis.log").open("ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        wait_for(self._answers, timeout=10, what=f"redis-server on port {self.port}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None

    def kill(self) -> None:
        """SIGKILL the server: what it held in memory (queued tasks) is gone."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def _answers(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port, socket_timeout=0.5).ping())
        except redis.ConnectionError:
            return False


@contextmanager
def private_redis(folder: Path) -> Iterator[RedisServer]:
    """Run a RedisServer for the test and stop it afterwards."""
    folder.mkdir(parents=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = RedisServer(port, folder)
    server.start()
    try:
        yield server
    finally:
        server.stop()
