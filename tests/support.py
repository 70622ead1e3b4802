"""Small helpers the tests share: signing, GitHub-shaped payloads, backends, waiting."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import create_engine, text

from bot.models import Base

WEBHOOK_SECRET = "It's a Secret to Everybody"
_ids = itertools.count(9_000_001)


@dataclass(frozen=True)
class Backend:
    name: str
    database_url: str
    broker_url: str

    @staticmethod
    def reset_services(database_url: str, broker_url: str) -> None:
        """Empty every table and the broker's Redis database before a test."""
        engine = create_engine(database_url)
        tables = ", ".join(table.name for table in Base.metadata.sorted_tables)
        with engine.begin() as conn:
            conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
        engine.dispose()
        redis.Redis.from_url(broker_url).flushdb()


def sign(body: bytes, secret: str = WEBHOOK_SECRET) -> str:
    """Return the X-Hub-Signature-256 header GitHub sends for body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def deliver(
    client: Any,
    event: str,
    payload: dict[str, Any],
    *,
    delivery_id: str | None = None,
    secret: str = WEBHOOK_SECRET,
    hook_id: str = "4242",
    **headers: str,
) -> Any:
    """POST a signed delivery to the receiver the way GitHub does."""
    body = json.dumps(payload).encode()
    return client.post(
        "/webhooks/github",
        data=body,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
            "X-GitHub-Hook-ID": "1",
            "X-GitHub-Hook-Installation-Target-Type": "integration",
            "X-GitHub-Hook-Installation-Target-ID": hook_id,
            "X-Hub-Signature-256": sign(body, secret),
            "User-Agent": "GitHub-Hookshot/test",
            **headers,
        },
    )


def user(login: str, kind: str = "User") -> dict[str, Any]:
    return {
        "login": login,
        "id": abs(hash(login)) % 10**7,
        "type": kind,
        "html_url": f"https://github.test/{login}",
    }


def repository(full_name: str, clone_url: str, repo_id: int = 1296269) -> dict[str, Any]:
    owner, name = full_name.split("/")
    return {
        "id": repo_id,
        "name": name,
        "full_name": full_name,
        "private": False,
        "owner": user(owner, "Organization"),
        "clone_url": clone_url,
        "default_branch": "main",
        "html_url": f"https://github.test/{full_name}",
    }


def issue(
    number: int,
    *,
    title: str = "Widgets overflow",
    body: str = "They do.",
    author: str = "reporter",
    state: str = "open",
) -> dict[str, Any]:
    return {
        "id": 1000 + number,
        "number": number,
        "title": title,
        "body": body,
        "state": state,
        "locked": False,
        "user": user(author),
        "labels": [],
        "author_association": "CONTRIBUTOR",
    }


def labeled(
    repo: dict[str, Any],
    issue_: dict[str, Any],
    label: str = "gaffer",
    installation_id: int = 77,
    sender: str = "triager",
) -> dict[str, Any]:
    """An `issues.labeled` payload."""
    return {
        "action": "labeled",
        "issue": issue_,
        "label": {"id": 1, "name": label},
        "repository": repo,
        "sender": user(sender),
        "installation": {"id": installation_id, "node_id": "MDIz"},
    }


def commented(
    repo: dict[str, Any],
    issue_: dict[str, Any],
    body: str,
    *,
    login: str,
    comment_id: int | None = None,
    installation_id: int = 77,
    action: str = "created",
    kind: str = "User",
) -> dict[str, Any]:
    """An `issue_comment` payload."""
    comment = {
        "id": comment_id or next(_ids),
        "body": body,
        "user": user(login, kind),
        "author_association": "CONTRIBUTOR",
        "performed_via_github_app": None,
    }
    return {
        "action": action,
        "issue": issue_,
        "comment": comment,
        "repository": repo,
        "sender": user(login, kind),
        "installation": {"id": installation_id},
    }


def wait_for(condition: Callable[[], Any], *, timeout: float = 60, what: str = "condition") -> Any:
    """Poll until condition() is truthy and return its value; fail after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@dataclass
class WorkerProcess:
    """A `python -m tasks.worker` child process and its log."""

    process: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(
        cls, env: dict[str, str], log_path: Path, queues: str, concurrency: int = 2
    ) -> WorkerProcess:
        argv = [
            sys.executable,
            "-m",
            "tasks.worker",
            queues,
            "--concurrency",
            str(concurrency),
            "--name",
            f"{queues}-{os.getpid()}@%h",
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
        wait_for(worker.ready, timeout=60, what=f"the worker to start (log: {log_path})")
        return worker

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"worker exited:\n{self.log_path.read_text()[-4000:]}")
        return b"ready." in self.log_path.read_bytes()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
