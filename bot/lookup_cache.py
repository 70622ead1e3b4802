"""Remember GitHub's answers to look-ups for a short while, in this process only.

A flood of commands asks the same questions (may this user write? what is the config?)
again and again; a brief memory answers them without a round trip. Only answers are
remembered: a look-up that raised is asked again next time. Entries expire after ttl_s
and the oldest go first once max_entries is reached, so a change on GitHub (a user given
write access, a new default-branch commit) is seen within ttl_s at the latest.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

# What `gaffer` remembers by default: a minute, a few thousand answers.
DEFAULT_TTL_S = 60.0
DEFAULT_MAX_ENTRIES = 4096


class LookupCache:
    """A bounded, thread-safe memory of look-up answers, each kept for ttl_s seconds."""

    def __init__(
        self,
        ttl_s: float = DEFAULT_TTL_S,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, key: Hashable, look_up: Callable[[], T]) -> T:
        """Return the remembered answer for key, or look_up()'s, remembering it if it returns."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] > now:
                return entry[1]  # type: ignore[no-any-return]
        # Asked outside the lock: a slow look-up must not hold up every other one.
        answer = look_up()
        with self._lock:
            self._entries[key] = (self._clock() + self.ttl_s, answer)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return answer
