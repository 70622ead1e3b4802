"""An attacking agent or check, run through gaffer's runner from a process holding secrets."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import WEBHOOK_SECRET

ROOT = Path(__file__).resolve().parents[2]
ATTACK = ROOT / "tests" / "fixtures" / "attackers" / "attack.py"
REPORT_MARK = "gaffer-attack-report"
PG_SOCKET = "/var/run/postgresql/.s.PGSQL.5432"
# The sandbox as the tests run it: the attacker's script shown, small tree limits.
ON: dict[str, Any] = {"read_only": [str(ATTACK.parent)], "pids": 64, "file_size_mb": 50}
OFF = "none"


@dataclass
class Attacked:
    """What the attacker reported, and what the runner said of the run."""

    report: dict[str, Any]
    result: dict[str, Any]
    log: Path


@dataclass
class Machine:
    """A worker's home with two jobs' worktrees, its key and database, and its services."""

    home: Path
    worktree: Path
    job_home: Path
    other_worktree: Path
    key_file: Path
    database: Path
    web_port: int
    unix_socket: Path

    def secrets_paths(self) -> list[str]:
        return [str(self.key_file), str(self.database), str(self.home / "jobs")]


@pytest.fixture
def machine(tmp_path: Path, private_key: str) -> Iterator[Machine]:
    home = tmp_path / "home"
    worktree = home / "worktrees" / "octo" / "widgets" / "wt-mine"
    other = home / "worktrees" / "octo" / "widgets" / "wt-other"
    for folder in (worktree, other, home / "jobs" / "1" / "1"):
        folder.mkdir(parents=True)
    (other / "unreleased.py").write_text("SECRET_FEATURE = True\n")
    (home / "jobs" / "1" / "1" / "agent.log").write_text("another job's log\n")
    key = tmp_path / "app.pem"
    key.write_text(private_key)
    database = home / "gaffer.sqlite"
    database.write_bytes(b"SQLite format 3\0")
    with (
        socket.create_server(("127.0.0.1", 0)) as web,
        socket.socket(socket.AF_UNIX) as unix,
    ):
        # A short path: unix socket names are limited to 108 bytes.
        unix_path = Path(f"/tmp/gaffer-test-{os.getpid()}-{tmp_path.name[-8:]}.sock")
        unix.bind(str(unix_path))
        unix.listen()
        yield Machine(
            home,
            worktree,
            home / "jobs" / "2" / "2" / "home",
            other,
            key,
            database,
            web.getsockname()[1],
            unix_path,
        )
        unix_path.unlink(missing_ok=True)


@pytest.fixture
def attack(machine: Machine, tmp_path: Path) -> Callable[..., Attacked]:
    """Run the attacker with a plan, sandboxed (`sandbox=ON`) or not (`sandbox=OFF`)."""

    def run(plan: dict[str, Any], *, sandbox: Any = ON, **spec: Any) -> Attacked:
        log = tmp_path / f"run-{len(list(tmp_path.glob('run-*.log')))}.log"
        request = {
            "sandbox": sandbox,
            "hidden": [str(machine.home), str(machine.key_file)],
            "services": [["127.0.0.1", machine.web_port], ["127.0.0.1", 5432]],
            "worktree": str(machine.worktree),
            "home": str(machine.job_home),
            "log": str(log),
            "argv": [sys.executable, str(ATTACK), json.dumps(plan)],
            **spec,
        }
        worker_env = {
            **os.environ,
            "WEBHOOK_SECRET": WEBHOOK_SECRET,
            "GAFFER_DEFAULT_AGENT": "script",
            "PRIVATE_KEY_PATH": str(machine.key_file),
            "DATABASE_URL": f"sqlite:///{machine.database}",
        }
        done = subprocess.run(
            [sys.executable, "-m", "tests.security.as_worker"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=worker_env,
            cwd=ROOT,
            timeout=120,
            check=True,
        )
        result = json.loads(done.stdout)
        return Attacked(_report(result["output"]), result, log)

    return run


def _report(output: str) -> dict[str, Any]:
    for line in output.splitlines():
        if line.startswith(REPORT_MARK):
            return json.loads(line.removeprefix(REPORT_MARK))
    return {}


def processes_marked(marker: str) -> list[int]:
    """Return the pids on this machine whose command line carries marker."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline.split(b"\0"):
            found.append(int(entry.name))
    return found
