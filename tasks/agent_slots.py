"""A machine's agent slots: at most `agent_slots` (GAFFER_CONFIG, default 2) agents run at
once on one machine (one GAFFER_HOME), across all its worker processes and threads.

A slot covers the agent's run alone, not the job around it. The agent worker runs more jobs
than there are slots (twice as many unless told), so while one job's agent runs another job
readies its worktree, pushes, or runs its checks, and the next agent starts the moment a
slot is free: the slots stay busy with agents, and a job's git, sandbox and GitHub work
costs it no agent time. The agent itself is readied before its slot: its sandbox, proxy
and control group are up, its processes held at a gate just before the agent's exec, and
the slot is given up the moment those processes are gone, before the sandbox is torn down
(tasks/isolation/runner.py). A slot passes from one agent to the next in milliseconds.

Each slot is a lock file under GAFFER_HOME/agent-slots, held with flock(2) by the open file
for the run's length. The kernel lets go of it when the process dies, so a killed worker
never keeps a slot. A job that finds every slot taken waits on a doorbell rung by each run
that ends, looking again once a second in any case, and gives up its wait when the job is
cancelled.

Readying a job's work (its worktree, branch, prompt and GitHub reads) is CPU and disk work
too. A job that runs an agent readies it under one of as many readying slots as there are
agent slots (GAFFER_HOME/ready-slots, held the same way), and gives that up as it turns to
wait for its agent slot: jobs beyond the free slots ready theirs while the agents run,
instead of slowing the ones that could start now.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bot.doorbell import Doorbell

DEFAULT_AGENT_SLOTS = 2
# The agent worker's jobs at once, per agent slot, unless its --concurrency says otherwise.
JOBS_PER_SLOT = 2
LOOK_AGAIN_S = 1.0
BELL_LESS_LOOK_S = 0.1
# A slot rung free can stay locked a moment longer: a process another thread forks holds a
# copy of every descriptor until it execs. After a ring, a waiter looks again soon, so.
AFTER_RING_LOOKS_S = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2)


class SlotWaitStopped(Exception):
    """The job was stopped while it waited for a slot."""


class _Held:
    """One slot held: its lock file's descriptor, and the doorbell its release rings."""

    def __init__(self, fd: int, bell: Doorbell) -> None:
        self.fd: int | None = fd
        self.bell = bell

    def release(self) -> None:
        if self.fd is None:
            return
        os.close(self.fd)  # closing the file lets go of its lock
        self.fd = None
        self.bell.ring()


# The readying slot the job on this thread holds, until it turns to wait for an agent.
_readying = threading.local()


def agent_slots(value: object) -> int:
    """The server's `agent_slots`, checked: a whole number ≥ 1."""
    if value is None:
        return DEFAULT_AGENT_SLOTS
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("agent_slots in GAFFER_CONFIG must be a whole number ≥ 1")
    return value


@contextmanager
def agent_slot(home: Path, count: int, should_stop: Callable[[], bool]) -> Iterator[int]:
    """Hold one of the machine's count agent slots for the block; return its number.

    Gives up the thread's readying slot first. Waits while all are taken; raises
    SlotWaitStopped once should_stop says so.
    """
    held_ready = getattr(_readying, "held", None)
    if held_ready is not None:
        held_ready.release()
    number, held = _take(home / "agent-slots", "agents", count, should_stop, "an agent slot")
    try:
        yield number
    finally:
        held.release()


@contextmanager
def readying(home: Path, count: int, should_stop: Callable[[], bool]) -> Iterator[None]:
    """Hold one of the machine's count readying slots until the block ends or, sooner,
    the thread's job takes its turn at an agent slot (agent_slot)."""
    _, held = _take(home / "ready-slots", "readying", count, should_stop, "its turn to ready")
    _readying.held = held
    try:
        yield
    finally:
        _readying.held = None
        held.release()


def _take(
    folder: Path, kind: str, count: int, should_stop: Callable[[], bool], what: str
) -> tuple[int, _Held]:
    """Wait for one of count slots in folder; raise SlotWaitStopped once should_stop says so."""
    folder.mkdir(parents=True, exist_ok=True)
    bell = Doorbell.named(kind, str(folder.resolve()))
    try:
        bell.wait(0)  # listen before the first look, so no ring falls between the two
        soon: list[float] = []
        while (held := _take_any(folder, count)) is None:
            if should_stop():
                raise SlotWaitStopped(f"the job was stopped while it waited for {what}")
            rung = bell.rung_within(soon.pop(0) if soon else LOOK_AGAIN_S)
            if rung:
                soon = list(AFTER_RING_LOOKS_S)
            elif rung is None:
                time.sleep(BELL_LESS_LOOK_S)  # no doorbell here: look often instead
    finally:
        bell.close()
    number, fd = held
    return number, _Held(fd, bell)


def _take_any(folder: Path, count: int) -> tuple[int, int] | None:
    for number in range(count):
        fd = os.open(folder / str(number), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return number, fd
    return None
