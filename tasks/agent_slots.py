"""A machine's agent slots: at most `agent_slots` (GAFFER_CONFIG, default 2) agents run at
once on one machine (one GAFFER_HOME), across all its worker processes and threads.

A slot covers the agent's run alone, not the job around it. The agent worker runs more jobs
than there are slots (twice as many unless told), so while one job's agent runs another job
readies its worktree, pushes, or runs its checks, and the next agent starts the moment a
slot is free: the slots stay busy with agents, and a job's git, sandbox and GitHub work
costs it no agent time.

Each slot is a lock file under GAFFER_HOME/agent-slots, held with flock(2) by the open file
for the run's length. The kernel lets go of it when the process dies, so a killed worker
never keeps a slot. A job that finds every slot taken waits on a doorbell rung by each run
that ends, looking again once a second in any case, and gives up its wait when the job is
cancelled.
"""

from __future__ import annotations

import fcntl
import os
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


class SlotWaitStopped(Exception):
    """The job was stopped while it waited for an agent slot."""


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

    Waits while all are taken; raises SlotWaitStopped once should_stop says so.
    """
    folder = home / "agent-slots"
    folder.mkdir(parents=True, exist_ok=True)
    bell = Doorbell.named("agents", str(folder.resolve()))
    try:
        bell.wait(0)  # listen before the first look, so no ring falls between the two
        while (held := _take_any(folder, count)) is None:
            if should_stop():
                raise SlotWaitStopped("the job was stopped while it waited for an agent slot")
            if not bell.wait(LOOK_AGAIN_S):
                time.sleep(BELL_LESS_LOOK_S)  # no doorbell here: look often instead
    finally:
        bell.close()
    number, fd = held
    try:
        yield number
    finally:
        os.close(fd)  # closing the file lets go of its lock
        bell.ring()


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
