"""Hold one sandboxed run's whole process tree to a memory, process-count and CPU budget.

A control group (cgroup) counts every process a run starts, however it forks or detaches:
v2 (`memory.max`, `pids.max`, `cpu.stat`) where the machine has one unified hierarchy, v1
(`memory.limit_in_bytes`, `pids.max`, `cpuacct.usage`) where controllers are mounted apart.
Each run's group is made below the worker's own group, so a machine's or container's
limits still hold over it. Where no group can be made, `unavailable()` says why and the
sandbox falls back to limits per process.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "cpuacct")
V2_CONTROLLERS = ("memory", "pids")
KILL_WAIT_S = 2.0


@dataclass(frozen=True)
class TreeLimits:
    """The budget of one run's process tree; None leaves a resource unlimited."""

    memory_mb: int | None
    pids: int | None


class RunGroup:
    """One run's control group(s): join it before exec, read its use, remove it after."""

    def __init__(self, version: int, dirs: dict[str, Path]) -> None:
        self.version = version
        self.dirs = dirs
        self._procs = [os.fsencode(path / "cgroup.procs") for path in dirs.values()]

    @classmethod
    def create(cls, limits: TreeLimits) -> RunGroup | None:
        """Make a group for one run with its limits, or return None where none can be made."""
        if unavailable() is not None:
            return None
        name = f"run-{uuid.uuid4().hex[:12]}"
        if _version() == 2:
            group = cls(2, {"": _v2_parent() / name})
        else:
            group = cls(1, {c: _v1_parent(c) / name for c in V1_CONTROLLERS})
        try:
            group._make(limits)
        except OSError:
            group.remove()
            return None
        return group

    def join(self) -> None:
        """Move the calling process into the group (run in the child, before exec)."""
        pid = str(os.getpid()).encode()
        for procs in self._procs:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def cpu_seconds(self) -> float:
        """Return the CPU time every process of the run has used so far."""
        try:
            if self.version == 2:
                stat = _read(self.dirs[""] / "cpu.stat")
                usec = next(line.split()[1] for line in stat.splitlines() if "usage_usec" in line)
                return int(usec) / 1e6
            return int(_read(self.dirs["cpuacct"] / "cpuacct.usage")) / 1e9
        except (OSError, StopIteration, ValueError):
            return 0.0

    def oom_killed(self) -> bool:
        """Return True when the kernel killed a process of the run for using too much memory."""
        events = "memory.events" if self.version == 2 else "memory.oom_control"
        folder = self.dirs["" if self.version == 2 else "memory"]
        try:
            text = _read(folder / events)
        except OSError:
            return False
        counts = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
        return int(counts.get("oom_kill", "0")) > 0

    def remove(self) -> None:
        """Kill whatever is left in the group, then remove it."""
        for folder in self.dirs.values():
            _kill_all(folder)
            with contextlib.suppress(OSError):
                folder.rmdir()

    def _make(self, limits: TreeLimits) -> None:
        for folder in self.dirs.values():
            folder.mkdir(parents=True)
        memory = None if limits.memory_mb is None else limits.memory_mb * 1024 * 1024
        if self.version == 2:
            folder = self.dirs[""]
            _write(folder / "memory.max", "max" if memory is None else str(memory))
            _write(folder / "memory.swap.max", "0", optional=True)
            _write(folder / "pids.max", "max" if limits.pids is None else str(limits.pids))
            return
        if memory is not None:
            _write(self.dirs["memory"] / "memory.limit_in_bytes", str(memory))
            # With swap accounting on, the same figure bounds memory plus swap.
            _write(self.dirs["memory"] / "memory.memsw.limit_in_bytes", str(memory), optional=True)
        _write(self.dirs["pids"] / "pids.max", "max" if limits.pids is None else str(limits.pids))


@functools.cache
def unavailable() -> str | None:
    """Say why this worker cannot make a control group per run, or None when it can."""
    if not ROOT.is_dir():
        return f"{ROOT} is not mounted"
    try:
        if _version() == 2:
            _v2_prepare()
        else:
            for controller in V1_CONTROLLERS:
                _v1_parent(controller).mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError) as error:
        return f"no control group can be made here ({error})"
    return None


@functools.cache
def _version() -> int:
    return 1 if (ROOT / "memory").is_dir() else 2


def _own_path(controller: str) -> str:
    """Return this process's group path in a v1 controller ('' in v2)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(",") or (controller == "" and names == ""):
            return path.lstrip("/")
    return ""


def _v1_parent(controller: str) -> Path:
    mount = ROOT / controller
    if not (mount / "cgroup.procs").exists():
        mount = next(ROOT.glob(f"*{controller}*"), mount)
    return mount / _own_path(controller) / "gaffer"


def _v2_parent() -> Path:
    return ROOT / _own_path("") / "gaffer"


def _v2_prepare() -> None:
    """Make gaffer's v2 group with memory and pids handed down to the groups made below it."""
    parent = _v2_parent()
    parent.mkdir(exist_ok=True)
    wanted = " ".join(f"+{c}" for c in V2_CONTROLLERS)
    # A group with processes of its own cannot hand controllers down (but the root can).
    _write(parent.parent / "cgroup.subtree_control", wanted)
    _write(parent / "cgroup.subtree_control", wanted)
    missing = set(V2_CONTROLLERS) - set(_read(parent / "cgroup.subtree_control").split())
    if missing:
        raise RuntimeError(f"controllers not delegated: {', '.join(sorted(missing))}")


def _kill_all(folder: Path) -> None:
    """SIGKILL every process in a group until it is empty (or a short wait is over)."""
    if not folder.is_dir():
        return
    with contextlib.suppress(OSError):
        _write(folder / "cgroup.kill", "1", optional=True)
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline:
        try:
            pids = [int(p) for p in _read(folder / "cgroup.procs").split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _read(path: Path) -> str:
    return path.read_text()


def _write(path: Path, value: str, *, optional: bool = False) -> None:
    if optional and not path.exists():
        return
    path.write_text(value)
