"""Small helpers the tests share: signing, GitHub-shaped payloads, backends, waiting."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import requests
import yaml
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from bot.models import Base, Plan, PlanState, Repository
from double import webhooks
from double.driver import wait_for
from double.webhooks import commented, issue, labeled, repository, user

__all__ = ["commented", "issue", "labeled", "repository", "user", "wait_for"]

WEBHOOK_SECRET = "It's a Secret to Everybody"


@dataclass(frozen=True)
class Backend:
    name: str
    database_url: str
    broker_url: str

    @staticmethod
    def reset_services(database_url: str, broker_url: str, prefix: str) -> None:
        """Empty every table and this run's broker keys before a test."""
        engine = create_engine(database_url)
        tables = ", ".join(table.name for table in Base.metadata.sorted_tables)
        with engine.begin() as conn:
            conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
        engine.dispose()
        # Only this run's keys: other runs may share the Redis server.
        client = redis.Redis.from_url(broker_url)
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()


def write_server_config(path: Path, agents: dict[str, Any], read_only: list[Path]) -> Path:
    """Write a GAFFER_CONFIG with fake agents, whose files (in the source tree or the test's
    folder, outside the sandbox's toolchain) the sandbox is to show read-only."""
    config = {
        "agent_timeout_s": 60,
        "agent_idle_timeout_s": 30,
        "github_seconds_between_requests": 0,
        "github_seconds_between_writes": 0,
        "agents": agents,
        "sandbox": {"read_only": [str(folder) for folder in read_only]},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def sign(body: bytes, secret: str = WEBHOOK_SECRET) -> str:
    """Return the X-Hub-Signature-256 header GitHub sends for body."""
    return webhooks.sign(body, secret)


def deliver(
    client: Any,
    event: str,
    payload: dict[str, Any],
    *,
    secret: str = WEBHOOK_SECRET,
    **options: Any,
) -> Any:
    """POST a delivery signed with the tests' secret, the way GitHub does."""
    return webhooks.deliver(client, event, payload, secret=secret, **options)


@dataclass
class WorkerProcess:
    """A `python -m tasks.worker` child process and its log."""

    process: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(
        cls,
        env: dict[str, str],
        log_path: Path,
        queues: str,
        concurrency: int = 2,
        *,
        beat: bool = False,
        wait: bool = True,
    ) -> WorkerProcess:
        """Start a worker; with wait, return once it is ready to take tasks."""
        argv = [
            sys.executable,
            "-m",
            "tasks.worker",
            queues,
            "--concurrency",
            str(concurrency),
            "--name",
            f"{queues}-{os.getpid()}@%h",
            *(["--beat"] if beat else []),
        ]
        with log_path.open("wb") as log:  # the child keeps its own descriptor
            process = subprocess.Popen(
                argv,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = cls(process, log_path)
        if wait:
            worker.wait_ready()
        return worker

    def wait_ready(self) -> None:
        wait_for(self.ready, timeout=60, what=f"the worker to start (log: {self.log_path})")

    def ready(self) -> bool:
        if b"ready." in self.log_path.read_bytes():
            return True  # it may have stopped since, which the test then reads
        if self.process.poll() is not None:
            raise AssertionError(f"worker exited:\n{self.log_path.read_text()[-4000:]}")
        return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.stop_all([self])

    @staticmethod
    def stop_all(workers: list[WorkerProcess]) -> None:
        """SIGTERM every worker at once, then wait for each: a worker takes seconds to stop
        (the SQL broker's loop looks for the signal every 2 s), and they stop side by side."""
        running = [worker for worker in workers if worker.process.poll() is None]
        for worker in running:
            os.killpg(worker.process.pid, signal.SIGTERM)
        for worker in running:
            try:
                worker.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(worker.process.pid, signal.SIGKILL)
                worker.process.wait()


@dataclass
class WebProcess:
    """`gaffer web` (or all of `gaffer run`) in a child process, on a free loopback port."""

    process: subprocess.Popen[bytes]
    log_path: Path
    port: int

    @classmethod
    def start(cls, env: dict[str, str], log_path: Path, command: str = "web") -> WebProcess:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "bot.cli", command],
                env={**env, "GAFFER_PORT": str(port)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        web = cls(process, log_path, port)
        wait_for(web.ready, timeout=30, what=f"gaffer {command} to answer (log: {log_path})")
        return web

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"gaffer exited:\n{self.log_path.read_text()[-3000:]}")
        try:
            return requests.get(f"{self.url}/healthz", timeout=2).ok
        except (requests.ConnectionError, requests.Timeout):
            # The port is bound before a worker has booted to accept: no answer is not yet.
            return False

    def post(self, path: str, *, data: bytes, headers: dict[str, str]) -> requests.Response:
        """POST as GitHub does, so IssueFlow can deliver to this process over HTTP."""
        return requests.post(self.url + path, data=data, headers=headers, timeout=10)

    def stop(self) -> None:
        """SIGTERM gaffer alone, as a supervisor does; whatever is left is then killed."""
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


def add_plan(session: Session, state: PlanState = PlanState.PLANNING) -> Plan:
    """Add a plan on issue 1 of octo/widgets (the repository too, the first time)."""
    if session.get(Repository, 1) is None:
        session.add(Repository(id=1, full_name="octo/widgets"))
    plan = Plan(
        repository_id=1,
        installation_id=1,
        issue_number=1,
        issue_title="t",
        issue_author="a",
        clone_url="/x",
        state=state,
    )
    session.add(plan)
    session.flush()
    return plan


def running_with(token: str) -> bool:
    """Return True while a process whose command line holds token lives."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if token.encode() in cmdline.read_bytes():
                return True
        except OSError:
            continue  # it ended while we looked
    return False
