"""Usage read from an agent's output as it streams, to stop it at its budget, and the
retry notes that mean waiting cannot help (a refused key, a rate limit)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tasks.agents.readers.claude import ClaudeTally, claude_result_usage, claude_retry_verdict
from tasks.agents.readers.codex import codex_turn_usage
from tasks.agents.readers.opencode import opencode_step_usage
from tasks.agents.usage import (
    QuotaHit,
    RetryVerdict,
    Usage,
    api_message,
    as_dict,
    load_json,
    now_or,
    reason_of,
    retry_after_s,
    sum_usage,
)

# aider prints litellm's error wrapped at 80 columns, then "Retrying in 0.2 seconds...":
# the lines between are held and read together when that note comes.
_AIDER_ERROR = re.compile(r"^litellm\.(?:(RateLimitError)|AuthenticationError): ")
_AIDER_RETRYING = "Retrying in "
_AIDER_HELD_LINES = 10
# Lines in which a CLI says it is retrying a refused call, by the shape that CLI prints
# them in (never words an answer could contain): aider's litellm errors, Gemini CLI's retry
# notes, Codex's error events. The first group names a rate limit; else the key was refused.
_RETRYING = (
    _AIDER_ERROR,
    re.compile(r"^Attempt \d+ failed with status (?:(429)|40[13])\b"),
    re.compile(r'^\{"type":"error","message":"Reconnecting\.\.\. .*status:? (?:(429)|40[13])\b'),
)


def retry_verdict_of_line(line: str, now: datetime | None = None) -> RetryVerdict | None:
    """Read a retry note that waiting cannot fix from aider, Gemini CLI or Codex.

    A rate limit parks the job until the time the message gives (or gaffer's backoff); a
    refused key fails it. The CLIs would otherwise retry for minutes, holding a slot.
    """
    for pattern in _RETRYING:
        if match := pattern.match(line):
            said = reason_of(api_message(line))
            if match[1]:
                wait = retry_after_s(line, now_or(now))
                hit = QuotaHit(f"the provider's rate limit ({said})", wait)
                return RetryVerdict(f"the agent was stopped at {hit.reason}", hit)
            return RetryVerdict(f"the provider refused the agent's credentials ({said})")
    return None


class LiveUsage:
    """Add up usage from stream lines as they arrive, to enforce a budget mid-run.

    Understands Claude Code stream-json (assistant messages and, with
    --include-partial-messages, the API's stream events, then the result), Codex
    JSONL (turn.completed, which Codex prints once per turn) and OpenCode JSONL
    (step_finish). Lines of any other shape are ignored.
    """

    def __init__(self) -> None:
        self._claude = ClaudeTally()
        self._claude_result: Usage | None = None
        # Set when the agent is stuck retrying what waiting cannot fix (claude_retry_verdict).
        self.verdict: RetryVerdict | None = None
        self._held: list[str] = []  # an aider error, until its retry note says it retries
        self._model: str | None = None
        self._steps: Usage | None = None

    def feed(self, line: str) -> None:
        """Take one line of the agent's output."""
        event = load_json(line.strip()) if line.strip().startswith("{") else None
        if isinstance(event, dict):
            self.feed_event(event)
        if self.verdict is None:
            self.verdict = self._line_verdict(line.strip())

    def _line_verdict(self, line: str) -> RetryVerdict | None:
        """Read a retry note; aider's error counts only once aider says it retries, so an
        answer that quotes one is not mistaken for it."""
        if _AIDER_ERROR.match(line):
            self._held = [line]
            return None
        if self._held and line.startswith(_AIDER_RETRYING):
            error, self._held = " ".join(self._held), []
            return retry_verdict_of_line(error)
        if self._held and len(self._held) < _AIDER_HELD_LINES:
            self._held.append(line)
            return None
        self._held = []
        return retry_verdict_of_line(line)

    def feed_event(self, event: Mapping[str, Any]) -> None:
        """Take one decoded event."""
        kind = event.get("type")
        if kind == "system" and event.get("model"):
            self._model = str(event["model"])
        elif kind == "system" and self.verdict is None:
            self.verdict = claude_retry_verdict(event)
        elif kind in ("assistant", "stream_event"):
            self._claude.feed_event(event)
        elif kind == "result":
            self._claude_result = claude_result_usage(event, self._model)
        elif kind == "turn.completed":
            self._steps = sum_usage([self._steps, codex_turn_usage(event)])
        elif kind == "step_finish":
            self._steps = sum_usage([self._steps, opencode_step_usage(as_dict(event.get("part")))])

    @property
    def usage(self) -> Usage | None:
        """Return the usage so far, or None before any was reported."""
        if self._claude_result is not None:
            return self._claude_result
        return sum_usage([self._claude.usage, self._steps])
