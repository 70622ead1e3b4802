"""A machine's agent slots: a count that holds across processes, freed by a killed holder,
handed on by a ring rather than a timer, and given up when the job is stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tasks import agent_slots as slots_module
from tasks.agent_slots import SlotWaitStopped, agent_slot, agent_slots, readying
from tests.support import wait_for

HOLDER = """
import sys, time
from pathlib import Path
from tasks.agent_slots import agent_slot
home, seconds, record = Path(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3])
with agent_slot(home, int(sys.argv[4]), lambda: False):
    record.write_text(f"{time.time()}\\n")
    time.sleep(seconds)
    record.write_text(record.read_text() + f"{time.time()}\\n")
"""


def _holder(home: Path, seconds: float, record: Path, count: int) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-c", HOLDER, str(home), str(seconds), str(record), str(count)]
    return subprocess.Popen(argv, cwd=Path(__file__).resolve().parents[2])


def _holding(home: Path, release: threading.Event) -> threading.Thread:
    """A thread that holds the machine's one slot until release is set; returned once held."""
    taken = threading.Event()

    def hold() -> None:
        with agent_slot(home, 1, lambda: False):
            taken.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(30)
    return holder


def test_no_more_than_the_count_run_at_once_across_processes(tmp_path: Path) -> None:
    records = [tmp_path / f"run-{n}" for n in range(5)]
    holders = [_holder(tmp_path, 0.4, record, count=2) for record in records]
    for holder in holders:
        assert holder.wait(timeout=60) == 0
    spans = [tuple(map(float, record.read_text().split())) for record in records]
    for started, _ in spans:
        running = [span for span in spans if span[0] <= started < span[1]]
        assert len(running) <= 2, f"{len(running)} agents ran at once on two slots"


def test_a_killed_holder_frees_its_slot(tmp_path: Path) -> None:
    holder = _holder(tmp_path, 600, tmp_path / "run", count=1)
    wait_for(lambda: (tmp_path / "run").exists(), timeout=30, what="the holder's slot")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    deadline = time.monotonic() + 30
    with agent_slot(tmp_path, 1, lambda: time.monotonic() > deadline) as number:
        assert number == 0


def test_a_freed_slot_wakes_its_waiter_at_once(tmp_path: Path, monkeypatch) -> None:
    # Without the ring the waiter would look again only after an hour.
    monkeypatch.setattr(slots_module, "LOOK_AGAIN_S", 3600.0)
    release = threading.Event()
    holder = _holding(tmp_path, release)
    got: list[int] = []
    found_full = threading.Event()

    def second() -> None:
        with agent_slot(tmp_path, 1, lambda: found_full.set() or False) as number:
            got.append(number)

    waiter = threading.Thread(target=second, daemon=True)
    waiter.start()
    assert found_full.wait(30)  # it looked, found the slot taken, and now waits
    release.set()
    holder.join(30)
    waiter.join(30)
    assert got == [0], "the waiter never woke when the slot was freed"


def test_a_slot_rung_free_while_its_lock_lingers_is_taken_once_it_goes(
    tmp_path: Path, monkeypatch
) -> None:
    """A process another thread forks holds a copy of the slot's descriptor until it execs,
    so the slot can still be locked when its holder rings: the waiter looks again soon
    after the ring rather than at its next hourly look. (A copy kept in this process
    stands in for the child's.)"""
    monkeypatch.setattr(slots_module, "LOOK_AGAIN_S", 3600.0)
    got: list[int] = []
    found_full = threading.Event()

    def second() -> None:
        with agent_slot(tmp_path, 1, lambda: found_full.set() or False) as number:
            got.append(number)

    with agent_slot(tmp_path, 1, lambda: False):
        waiter = threading.Thread(target=second, daemon=True)
        waiter.start()
        assert found_full.wait(30)
        lingering = os.dup(_descriptor_of(tmp_path / "agent-slots" / "0"))
    threading.Timer(0.1, os.close, [lingering]).start()  # the copy goes a moment later
    waiter.join(30)
    assert got == [0], "the waiter never looked again after the ring"


def _descriptor_of(path: Path) -> int:
    """This process's open descriptor of path."""
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}") == str(path.resolve()):
                return int(name)
    raise AssertionError(f"{path} is not open here")


def test_a_job_readies_only_in_its_turn_which_ends_when_it_waits_for_an_agent(
    tmp_path: Path,
) -> None:
    """With one slot, a second job begins readying its work only once the first has turned
    to its agent, and not while the first is still readying."""
    events: list[str] = []
    first_readying, first_may_go_on = threading.Event(), threading.Event()

    def first() -> None:
        with readying(tmp_path, 1, lambda: False):
            events.append("first readies")
            first_readying.set()
            first_may_go_on.wait(30)
            events.append("first turns to its agent")
            with agent_slot(tmp_path, 1, lambda: False):
                readied = second_done.wait(10)
                events.append("second readied meanwhile" if readied else "second never readied")

    def second() -> None:
        with readying(tmp_path, 1, lambda: False):
            events.append("second readies")
        second_done.set()

    second_done = threading.Event()
    one = threading.Thread(target=first, daemon=True)
    one.start()
    assert first_readying.wait(30)
    two = threading.Thread(target=second, daemon=True)
    two.start()
    two.join(0.3)  # the second waits for its turn meanwhile
    first_may_go_on.set()
    one.join(30)
    two.join(30)
    assert events == [
        "first readies",
        "first turns to its agent",
        "second readies",
        "second readied meanwhile",
    ]


def test_a_stopped_job_gives_up_its_wait(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(slots_module, "LOOK_AGAIN_S", 0.05)
    looks = []

    def stopped() -> bool:
        looks.append(1)
        return len(looks) > 2

    with (
        agent_slot(tmp_path, 1, lambda: False),
        pytest.raises(SlotWaitStopped, match="stopped while it waited"),
        agent_slot(tmp_path, 1, stopped),
    ):
        pytest.fail("a second slot was handed out of one")
    with agent_slot(tmp_path, 1, lambda: False) as number:  # the first was given back
        assert number == 0


def test_the_slot_lock_is_not_handed_to_the_agent(tmp_path: Path) -> None:
    """A process the agent leaves behind must not keep the machine's slot."""
    with agent_slot(tmp_path, 1, lambda: False):
        child = subprocess.Popen(["sleep", "600"], close_fds=False)
    try:
        deadline = time.monotonic() + 10
        with agent_slot(tmp_path, 1, lambda: time.monotonic() > deadline) as number:
            assert number == 0
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


@pytest.mark.parametrize("value", [0, -1, True, "2", 1.5])
def test_agent_slots_must_be_a_whole_number(value: object) -> None:
    with pytest.raises(ValueError, match="agent_slots in GAFFER_CONFIG"):
        agent_slots(value)


def test_two_agent_slots_unless_told() -> None:
    assert agent_slots(None) == 2
    assert agent_slots(5) == 5


def test_a_waiter_without_a_doorbell_looks_now_and_then_rather_than_spinning(
    tmp_path: Path, monkeypatch
) -> None:
    # Something not of ours where the doorbell's folder goes: the waiter cannot listen.
    monkeypatch.setattr(slots_module.Doorbell, "_listen", lambda self: None)
    looks = []
    release = threading.Event()
    holder = _holding(tmp_path, release)
    threading.Timer(0.5, release.set).start()
    with agent_slot(tmp_path, 1, lambda: looks.append(1) or False) as number:
        assert number == 0
    holder.join(30)
    assert len(looks) <= 20, f"{len(looks)} looks while one slot was held for half a second"
