"""What each worker does for its own machine: reap its worktrees, which beat cannot see."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

# Often enough that a dead job's worktree and processes go within minutes, rarely enough
# that a machine with many repositories spends little on it.
REAP_EVERY_S = 300.0


class MachineReaper:
    """Run a reaping pass every `every_s` seconds in a daemon thread, first after one wait."""

    def __init__(self, reap: Callable[[], object], every_s: float) -> None:
        self._reap = reap
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gaffer-reaper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                self._reap()
            except Exception:
                log.exception("reaping this machine's worktrees failed; trying again later")


def reap_every_s(raw: object) -> float | None:
    """Read the server's `reap_every_s`: seconds between passes, or None (null) for never."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw <= 0:
        raise ValueError("`reap_every_s` must be a positive number of seconds, or null")
    return float(raw)
