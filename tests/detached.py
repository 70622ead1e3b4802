"""Processes a job leaves behind: a detached grandchild, and a planner killed mid-run."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A planner that takes a read-only worktree, leaves a detached process in it, and waits.
PLANNER = """
import subprocess, sys, time
from pathlib import Path
from tasks.worktrees import readonly_worktree
with readonly_worktree(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])) as path:
    stray = subprocess.run(
        ["bash", "-c", "setsid sleep 1000 >/dev/null 2>&1 & echo $!"],
        cwd=path, capture_output=True, text=True, check=True,
    ).stdout.strip()
    print(path, stray, flush=True)
    time.sleep(1000)
"""


def start_detached(cwd: Path, env: dict[str, str] | None = None) -> int:
    """Start `sleep` in a session of its own with cwd as its folder, as an agent might."""
    started = subprocess.run(
        ["bash", "-c", "setsid sleep 1000 >/dev/null 2>&1 & echo $!"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(started.stdout)


def gone(pid: int) -> bool:
    """Return True when pid no longer runs (a zombie waiting for its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def killed_planner(mirror: Path, sha: str, home: Path) -> tuple[Path, int]:
    """Run a planner until it has its worktree and a stray, then SIGKILL it like a dead worker.

    Return the read-only worktree and the pid of the process left running in it.
    """
    planner = subprocess.Popen(
        [sys.executable, "-c", PLANNER, str(mirror), sha, str(home)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert planner.stdout is not None
    path, stray = planner.stdout.readline().split()
    planner.send_signal(signal.SIGKILL)
    planner.wait()
    planner.stdout.close()
    return Path(path), int(stray)


@contextlib.contextmanager
def cleaned_up(pids: list[int]) -> Iterator[list[int]]:
    """Kill what a failing test leaves running, so no `sleep 1000` outlives the run."""
    try:
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
