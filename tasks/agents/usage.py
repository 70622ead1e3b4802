"""What an agent run used and how it ended: tokens, dollars, quota hits, the parsed answer;
and what every CLI reader shares (quota messages and reset times, small readers)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

AGENT = "agent"
COMPUTED = "computed"
ESTIMATED = "estimated"
UNPRICED = "unpriced"
SOURCE_TRUST = (UNPRICED, ESTIMATED, COMPUTED, AGENT)
REASON_CHARS = 300


@dataclass(frozen=True)
class Usage:
    """Tokens one run used, split the way providers bill them, and what they cost.

    input_tokens are the uncached input tokens only; cache reads and writes are counted
    apart. output_tokens are all tokens billed at the output rate, reasoning included;
    reasoning_tokens is the part of them that was reasoning. cost_source says where
    cost_usd came from: "agent" (the tool said so), "computed" (a price table),
    "estimated" (a stated guess) or "unpriced" (cost_usd is None, not priced yet).
    """

    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: Decimal | None = None
    cost_source: str = UNPRICED

    @property
    def total_tokens(self) -> int:
        """Return every billed token: input, cache reads and writes, and output."""
        cached = self.cache_read_tokens + self.cache_write_tokens
        return self.input_tokens + cached + self.output_tokens

    @property
    def is_empty(self) -> bool:
        """Return True when nothing was used and nothing was charged."""
        return self.total_tokens == 0 and self.reasoning_tokens == 0 and self.cost_usd is None

    def __add__(self, other: Usage) -> Usage:
        """Sum two usages; the sum is named after the model with more tokens."""
        if not isinstance(other, Usage):
            return NotImplemented
        if other.is_empty:
            return self
        if self.is_empty:
            return other
        both_priced = self.cost_usd is not None and other.cost_usd is not None
        return Usage(
            model=_dominant_model(self, other),
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cost_usd=(self.cost_usd or Decimal(0)) + (other.cost_usd or Decimal(0))
            if both_priced
            else None,
            cost_source=min(self.cost_source, other.cost_source, key=SOURCE_TRUST.index)
            if both_priced
            else UNPRICED,
        )


@dataclass(frozen=True)
class QuotaHit:
    """The agent stopped on a rate or usage limit; retry_after_s says when to try again."""

    reason: str
    retry_after_s: float | None = None


@dataclass(frozen=True)
class AgentOutput:
    """What a parser read from an agent's output."""

    text: str
    error: str | None = None
    usage: Usage | None = None
    quota: QuotaHit | None = None
    # Tool calls the CLI's own permissions refused, named for a person: `Bash(pytest -q)`.
    denials: tuple[str, ...] = ()


def sum_usage(usages: Iterable[Usage | None]) -> Usage | None:
    """Add usages together, or return None when there were none."""
    total = Usage()
    for usage in usages:
        if usage is not None:
            total = total + usage
    return None if total.is_empty else total


def _dominant_model(a: Usage, b: Usage) -> str | None:
    """Pick the model that used more tokens (the main model, not a helper)."""
    if a.model == b.model or b.model is None:
        return a.model
    if a.model is None:
        return b.model
    return a.model if a.total_tokens >= b.total_tokens else b.model


def as_int(value: Any) -> int:
    """Read a token count, treating anything unreadable as 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int | float):
        return max(0, int(value))
    return 0


def as_decimal(value: Any) -> Decimal | None:
    """Read a dollar figure exactly as printed, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None


def as_dict(value: Any) -> dict[str, Any]:
    """Return value when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def load_json(line: str) -> Any:
    """Decode one JSON value, or None when the line is not JSON."""
    try:
        return json.loads(line)
    except ValueError:
        return None


def json_events(output: str) -> tuple[list[dict[str, Any]], bool]:
    """Read a JSON document, JSON array or JSON lines; say whether the last line was cut."""
    whole = load_json(output.strip()) if output.strip() else None
    if isinstance(whole, dict):
        return [whole], False
    if isinstance(whole, list):
        return [e for e in whole if isinstance(e, dict)], False
    events: list[dict[str, Any]] = []
    cut = False
    for line in output.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        event = load_json(stripped)
        # Other lines are stderr noise merged into the stream; only a final half-written
        # JSON line means the stream was cut.
        cut = event is None and stripped.startswith(("{", "["))
        if isinstance(event, dict):
            events.append(event)
    return events, cut


def ended_early(detail: str) -> str:
    """Say that the output stopped before the tool's final report."""
    return f"the agent's output ended early: {detail}"


def agent_output(
    text: str,
    error: str | None = None,
    usage: Usage | None = None,
    quota: QuotaHit | None = None,
    denials: tuple[str, ...] = (),
) -> AgentOutput:
    """Build the parser result."""
    return AgentOutput(text=text, error=error, usage=usage, quota=quota, denials=denials)


QUOTA_TEXT = re.compile(
    r"rate[ _-]?limit|usage limit|quota|resource[ _-]?exhausted|too many requests"
    r"|hit your (?:usage )?limit|limit reached|\b429\b",
    re.IGNORECASE,
)
EPOCH_AFTER_BAR = re.compile(r"\|(\d{10})\b")
RETRY_AFTER = re.compile(r"retry[-_ ]?after[\"':\s]*(\d+(?:\.\d+)?)", re.IGNORECASE)
RETRY_DELAY = re.compile(r"retry_?delay[\"':\s]*(\d+(?:\.\d+)?)s", re.IGNORECASE)
AFTER_DURATION = re.compile(
    r"(?:retry|try again|resets?|retrying)\w*\s+(?:in|after)\s+"
    r"((?:\d+(?:\.\d+)?\s*[a-z]+[\s,]*(?:and\s+)?)+)",
    re.IGNORECASE,
)
DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)", re.IGNORECASE)
CLOCK_TIME = re.compile(
    r"(?:resets?|reset at|try again at)\s+(?:at\s+)?(\d{1,2})(?::(\d{2}))?\s*([ap]m)\b"
    r"(?:\s*\(([^)]+)\))?",
    re.IGNORECASE,
)


def _unit_seconds(unit: str) -> float | None:
    """Return how many seconds one of a duration unit is (ms, s, m, h, d and long forms)."""
    unit = unit.lower()
    if unit == "ms" or unit.startswith("milli"):
        return 0.001
    for prefix, seconds in (("s", 1.0), ("m", 60.0), ("h", 3600.0), ("d", 86400.0)):
        if unit.startswith(prefix):
            return seconds
    return None


def _duration_s(text: str) -> float | None:
    """Add up a duration like `2h3m42s`, `41.17s` or `4 days 20 hours 9 minutes`."""
    total = 0.0
    found = False
    for number, unit in DURATION_PART.findall(text):
        seconds = _unit_seconds(unit)
        if seconds is not None:
            total += float(number) * seconds
            found = True
    return total if found else None


def _clock_s(hour: str, minute: str, meridiem: str, zone: str | None, now: datetime) -> float:
    """Return seconds from now until the next time of day `3pm (Europe/Paris)` names."""
    try:
        tz = ZoneInfo(zone.strip()) if zone else UTC
    except (ZoneInfoNotFoundError, ValueError):
        tz = UTC
    local = now.astimezone(tz)
    hour24 = int(hour) % 12 + (12 if meridiem.lower() == "pm" else 0)
    target = local.replace(hour=hour24, minute=int(minute or 0), second=0, microsecond=0)
    if target <= local:
        target += timedelta(days=1)
    return (target - local).total_seconds()


def retry_after_s(text: str, now: datetime) -> float | None:
    """Find when a limit resets in a tool's message, as seconds from now."""
    if match := EPOCH_AFTER_BAR.search(text):
        return max(0.0, int(match[1]) - now.timestamp())
    for pattern in (RETRY_AFTER, RETRY_DELAY):
        if match := pattern.search(text):
            return float(match[1])
    if (match := AFTER_DURATION.search(text)) and (seconds := _duration_s(match[1])) is not None:
        return seconds
    if match := CLOCK_TIME.search(text):
        return _clock_s(match[1], match[2], match[3], match[4], now)
    return None


def reason_of(text: str) -> str:
    """Shorten a tool's message to its first line."""
    first = text.strip().splitlines()[0] if text.strip() else "rate limited"
    return first[:REASON_CHARS]


def quota_from_text(text: str | None, now: datetime) -> QuotaHit | None:
    """Recognise a rate-limit or usage-limit message and when it resets."""
    if not text or not QUOTA_TEXT.search(text):
        return None
    return QuotaHit(reason=reason_of(text), retry_after_s=retry_after_s(text, now))


def now_or(now: datetime | None) -> datetime:
    """Return the given time or the current one."""
    return now or datetime.now(UTC)


def api_message(text: str) -> str:
    """Return the message of an API error body quoted in text (`API Error: 429 {…}`), or text."""
    start = text.find("{")
    body = as_dict(load_json(text[start:]) if start >= 0 else None)
    message = as_dict(body.get("error")).get("message") or body.get("message")
    return str(message) if message else text


@dataclass(frozen=True)
class RetryVerdict:
    """Why an agent that is retrying an API call should be stopped now, not left to wait."""

    error: str
    quota: QuotaHit | None = None
