"""Kill what a job left running in a folder gaffer is done with (Linux only, via /proc)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

PROC = Path("/proc")
WAIT_S = 2.0
# Set in every agent's and check's environment, and inherited by what they start: finds a
# process that left the worktree for another folder.
MARK = "GAFFER_WORKTREE"


def worktree_mark(worktree: Path) -> dict[str, str]:
    """Return the environment entry that marks processes as started for worktree."""
    return {MARK: str(worktree.resolve())}


def kill_processes_in(folder: Path) -> list[int]:
    """SIGKILL every process working in folder: its cwd inside, or marked for it; return them."""
    if not (PROC / "self" / "cwd").exists():
        return []  # no /proc: nothing to find, and nothing is claimed
    root = str(folder.resolve())
    mark = f"{MARK}={root}".encode()
    pids = [pid for pid in _pids() if _inside(_cwd(pid), root) or _marked(pid, mark)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    _wait_until_dead(pids)
    return pids


def _pids() -> list[int]:
    mine = os.getpid()
    return [int(p.name) for p in PROC.iterdir() if p.name.isdigit() and int(p.name) != mine]


def _cwd(pid: int) -> str | None:
    try:
        return os.readlink(PROC / str(pid) / "cwd")
    except OSError:  # gone meanwhile, or not ours to look at
        return None


def _marked(pid: int, mark: bytes) -> bool:
    try:
        return mark in (PROC / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:  # gone meanwhile, or not ours to look at
        return False


def _inside(cwd: str | None, root: str) -> bool:
    return cwd is not None and (cwd == root or cwd.startswith(root.rstrip("/") + "/"))


def _wait_until_dead(pids: list[int]) -> None:
    """Wait briefly until each pid has died, so its folder can be removed after."""
    deadline = time.monotonic() + WAIT_S
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    """Return True while pid runs; a zombie waiting for its parent counts as dead."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
