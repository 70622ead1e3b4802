"""Read each agent CLI's output into its answer, its token usage and any quota it ran into."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
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


# --- small readers -------------------------------------------------------------------


def _int(value: Any) -> int:
    """Read a token count, treating anything unreadable as 0."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int | float):
        return max(0, int(value))
    return 0


def _decimal(value: Any) -> Decimal | None:
    """Read a dollar figure exactly as printed, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None


def _dict(value: Any) -> dict[str, Any]:
    """Return value when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _load(line: str) -> Any:
    """Decode one JSON value, or None when the line is not JSON."""
    try:
        return json.loads(line)
    except ValueError:
        return None


def _json_events(output: str) -> tuple[list[dict[str, Any]], bool]:
    """Read a JSON document, JSON array or JSON lines; say whether the last line was cut."""
    whole = _load(output.strip()) if output.strip() else None
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
        event = _load(stripped)
        # Other lines are stderr noise merged into the stream; only a final half-written
        # JSON line means the stream was cut.
        cut = event is None and stripped.startswith(("{", "["))
        if isinstance(event, dict):
            events.append(event)
    return events, cut


def _ended_early(detail: str) -> str:
    """Say that the output stopped before the tool's final report."""
    return f"the agent's output ended early: {detail}"


def _output(
    text: str,
    error: str | None = None,
    usage: Usage | None = None,
    quota: QuotaHit | None = None,
    denials: tuple[str, ...] = (),
) -> AgentOutput:
    """Build the parser result."""
    return AgentOutput(text=text, error=error, usage=usage, quota=quota, denials=denials)


# --- quota endings and reset times ------------------------------------------------------

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


def _reason(text: str) -> str:
    """Shorten a tool's message to its first line."""
    first = text.strip().splitlines()[0] if text.strip() else "rate limited"
    return first[:REASON_CHARS]


def quota_from_text(text: str | None, now: datetime) -> QuotaHit | None:
    """Recognise a rate-limit or usage-limit message and when it resets."""
    if not text or not QUOTA_TEXT.search(text):
        return None
    return QuotaHit(reason=_reason(text), retry_after_s=retry_after_s(text, now))


def _now(now: datetime | None) -> datetime:
    """Return the given time or the current one."""
    return now or datetime.now(UTC)


# --- Claude Code (--output-format json | json --verbose | stream-json) ----------------------

CLAUDE_LIMIT_RESULT = re.compile(
    r"^(?:Claude (?:AI )?usage limit reached|You've hit your (?:usage )?limit"
    r"|(?:5-hour|weekly|Opus weekly|session) limit reached)",
    re.IGNORECASE,
)


def _claude_message_usage(message: Mapping[str, Any]) -> Usage:
    """Read the usage block of one Anthropic API message."""
    usage = _dict(message.get("usage"))
    return Usage(
        model=message.get("model") or None,
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        cache_read_tokens=_int(usage.get("cache_read_input_tokens")),
        cache_write_tokens=_int(usage.get("cache_creation_input_tokens")),
    )


def _claude_model_usage(model: str, entry: Mapping[str, Any]) -> Usage:
    """Read one `modelUsage` entry, with the dollars Claude Code put on it."""
    cost = _decimal(entry.get("costUSD"))
    return Usage(
        model=model,
        input_tokens=_int(entry.get("inputTokens")),
        output_tokens=_int(entry.get("outputTokens")),
        cache_read_tokens=_int(entry.get("cacheReadInputTokens")),
        cache_write_tokens=_int(entry.get("cacheCreationInputTokens")),
        cost_usd=cost,
        cost_source=AGENT if cost is not None else UNPRICED,
    )


def _claude_result_usage(result: Mapping[str, Any], model: str | None) -> Usage:
    """Read a result object's usage: modelUsage (every model used) first, else `usage`."""
    per_model = [
        _claude_model_usage(name, entry)
        for name, entry in _dict(result.get("modelUsage")).items()
        if isinstance(entry, dict)
    ]
    base = sum_usage(per_model) or _claude_message_usage({**result, "model": model})
    cost = _decimal(result.get("total_cost_usd"))
    if cost is None:
        return base
    return replace(base, cost_usd=cost, cost_source=AGENT)


def _api_message(text: str) -> str:
    """Return the message of an API error body quoted in text (`API Error: 429 {…}`), or text."""
    start = text.find("{")
    body = _dict(_load(text[start:]) if start >= 0 else None)
    message = _dict(body.get("error")).get("message") or body.get("message")
    return str(message) if message else text


def _claude_error(result: Mapping[str, Any]) -> str | None:
    """Say why a result object cannot be used, or None for a clean success."""
    text = _api_message(str(result.get("result") or "").strip())
    subtype = str(result.get("subtype") or "")
    status = result.get("api_error_status")
    if status:
        return f"Claude Code's API call failed with status {status}: {text or subtype}"
    if subtype == "error_max_turns":
        return f"Claude Code stopped at its turn limit after {result.get('num_turns')} turns"
    if CLAUDE_LIMIT_RESULT.match(text):
        return f"Claude Code hit a usage limit: {_reason(text)}"
    if subtype.startswith("error"):
        return f"Claude Code failed ({subtype}): {text}".rstrip(": ")
    if result.get("is_error"):
        return f"Claude Code reported an error: {text or 'no message'}"
    return None


def _claude_quota(
    result: Mapping[str, Any] | None, events: list[dict[str, Any]], now: datetime
) -> QuotaHit | None:
    """Recognise a limit from the result, a rejected rate_limit_event or a failed message."""
    if result is not None:
        text = str(result.get("result") or "")
        if result.get("api_error_status") == 429:
            return QuotaHit(_reason(text or "API error 429"), retry_after_s(text, now))
        failed = result.get("is_error") or CLAUDE_LIMIT_RESULT.match(text.strip())
        if failed and (hit := quota_from_text(text, now)):
            return hit
    for event in reversed(events):
        info = _dict(event.get("rate_limit_info"))
        if event.get("type") == "rate_limit_event" and info.get("status") == "rejected":
            resets = _int(info.get("resetsAt"))
            wait = max(0.0, resets - now.timestamp()) if resets else None
            return QuotaHit(f"Claude {info.get('rateLimitType', 'usage')} limit reached", wait)
        if event.get("type") == "assistant" and "rate_limit" in str(event.get("error") or ""):
            return QuotaHit("Claude API rate limit", None)
    return None


@dataclass(frozen=True)
class RetryVerdict:
    """Why an agent that is retrying an API call should be stopped now, not left to wait."""

    error: str
    quota: QuotaHit | None = None


def claude_retry_verdict(event: Mapping[str, Any]) -> RetryVerdict | None:
    """Read Claude Code's `api_retry` event (stream-json): a refused key or a rate limit.

    Claude Code retries both for minutes. A refused key never passes by waiting; a rate
    limit says when it lifts (`retry_delay_ms` follows the server's retry-after), so the
    job is parked until then instead of holding an agent slot.
    """
    if (event.get("type"), event.get("subtype")) != ("system", "api_retry"):
        return None
    status, kind = _int(event.get("error_status")), str(event.get("error") or "")
    if status in (401, 403):
        return RetryVerdict(
            f"Claude Code's API credentials were refused ({status} {kind}): check "
            "ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN on the worker"
        )
    if status == 429:
        wait = _int(event.get("retry_delay_ms")) / 1000 or None
        reason = f"Claude API rate limit ({kind or status})"
        return RetryVerdict(f"Claude Code was stopped: {reason}", QuotaHit(reason, wait))
    return None


# Lines in which a CLI says it is retrying a refused call, by the shape that CLI prints
# them in (never words an answer could contain): aider's litellm errors, Gemini CLI's retry
# notes, Codex's error events. The first group names a rate limit; else the key was refused.
# aider prints litellm's error wrapped at 80 columns, then "Retrying in 0.2 seconds...":
# the lines between are held and read together when that note comes.
_AIDER_ERROR = re.compile(r"^litellm\.(?:(RateLimitError)|AuthenticationError): ")
_AIDER_RETRYING = "Retrying in "
_AIDER_HELD_LINES = 10
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
            said = _reason(_api_message(line))
            if match[1]:
                wait = retry_after_s(line, _now(now))
                hit = QuotaHit(f"the provider's rate limit ({said})", wait)
                return RetryVerdict(f"the agent was stopped at {hit.reason}", hit)
            return RetryVerdict(f"the provider refused the agent's credentials ({said})")
    return None


def _claude_model(events: list[dict[str, Any]]) -> str | None:
    """Find the main model named by the init event or an assistant message."""
    for event in events:
        if event.get("type") == "system" and event.get("model"):
            return str(event["model"])
        message = _dict(event.get("message"))
        if event.get("type") == "assistant" and message.get("model"):
            return str(message["model"])
    return None


def _claude_partial_text(events: list[dict[str, Any]]) -> str:
    """Return the text of the last assistant message seen before the output stopped."""
    for event in reversed(events):
        message = _dict(event.get("message"))
        if event.get("type") != "assistant":
            continue
        content = message.get("content")
        blocks = [_dict(b) for b in content] if isinstance(content, list) else []
        texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
        if texts:
            return "".join(texts)
    return ""


def parse_claude_json(output: str, *, now: datetime | None = None) -> AgentOutput:
    """Read Claude Code's result object (plain, --verbose array or stream-json lines)."""
    moment = _now(now)
    events, _ = _json_events(output)
    results = [e for e in events if e.get("type") == "result"]
    if not results:
        live = LiveUsage()
        for event in events:
            live.feed_event(event)
        return _output(
            text=_claude_partial_text(events),
            error=_ended_early("Claude Code printed no result object"),
            usage=live.usage,
            quota=_claude_quota(None, events, moment),
        )
    result = results[-1]
    error = _claude_error(result)
    return _output(
        text=str(result.get("result") or ""),
        error=error,
        usage=_claude_result_usage(result, _claude_model(events)),
        quota=_claude_quota(result, events, moment) if error else None,
        denials=_claude_denials(result),
    )


def _claude_denials(result: Mapping[str, Any]) -> tuple[str, ...]:
    """Name the tool calls Claude Code's permissions refused: `Bash(pytest -q)`."""
    denied = result.get("permission_denials")
    named = []
    for entry in denied if isinstance(denied, list) else []:
        call = _dict(entry)
        given = _dict(call.get("tool_input"))
        detail = given.get("command") or given.get("file_path") or ""
        named.append(f"{call.get('tool_name') or 'a tool'}({str(detail)[:80]})")
    return tuple(named)


# --- Codex CLI (codex exec --json) --------------------------------------------------------


def _codex_turn_usage(event: Mapping[str, Any]) -> Usage:
    """Read turn.completed usage; Codex counts cached tokens inside input_tokens, and its
    output_tokens hold the reasoning it also reports apart (as the API does)."""
    usage = _dict(event.get("usage"))
    cached = _int(usage.get("cached_input_tokens"))
    return Usage(
        input_tokens=max(0, _int(usage.get("input_tokens")) - cached),
        cache_read_tokens=cached,
        output_tokens=_int(usage.get("output_tokens")),
        reasoning_tokens=_int(usage.get("reasoning_output_tokens")),
    )


def _codex_failure(event: Mapping[str, Any]) -> str | None:
    """Return the message of a turn.failed or error event."""
    if event.get("type") == "turn.failed":
        return str(_dict(event.get("error")).get("message") or "turn failed")
    if event.get("type") == "error":
        return str(event.get("message") or "error")
    return None


def parse_codex_jsonl(output: str, *, now: datetime | None = None) -> AgentOutput:
    """Read `codex exec --json` events: last agent message, summed turn usage, failures."""
    events, cut = _json_events(output)
    text = ""
    failure: str | None = None
    finished = False
    for event in events:
        item = _dict(event.get("item"))
        if event.get("type") == "item.completed" and item.get("type") == "agent_message":
            text = str(item.get("text") or "")
        if event.get("type") == "turn.completed":
            finished, failure = True, None
        if (message := _codex_failure(event)) is not None:
            failure = message
            finished = finished or event.get("type") == "turn.failed"
    usage = sum_usage(_codex_turn_usage(e) for e in events if e.get("type") == "turn.completed")
    error = f"Codex failed: {failure}" if failure else None
    if error is None and (cut or not finished):
        error = _ended_early("Codex never reported turn.completed")
    return _output(text, error, usage, quota_from_text(failure, _now(now)))


# --- Gemini CLI (--output-format json) ----------------------------------------------------

GEMINI_QUOTA_TYPES = re.compile(r"quota|ratelimit", re.IGNORECASE)


def _gemini_document(output: str) -> dict[str, Any] | None:
    """Find Gemini's pretty-printed JSON document among any lines printed before it."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"^\{", output, re.MULTILINE):
        try:
            doc, _ = decoder.raw_decode(output, match.start())
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.keys() & {"response", "stats", "error"}:
            return doc
    return None


def _gemini_salvage(output: str) -> str:
    """Recover the response string from a document cut off after it."""
    match = re.search(r'"response":\s*', output)
    if match is None:
        return ""
    try:
        value, _ = json.JSONDecoder().raw_decode(output, match.end())
    except ValueError:
        return ""
    return value if isinstance(value, str) else ""


def _gemini_model_usage(model: str, entry: Mapping[str, Any]) -> Usage:
    """Read stats.models.<model>.tokens: prompt includes cached; thoughts bill as output."""
    tokens = _dict(entry.get("tokens"))
    cached = _int(tokens.get("cached"))
    uncached = tokens["input"] if "input" in tokens else _int(tokens.get("prompt")) - cached
    thoughts = _int(tokens.get("thoughts"))
    return Usage(
        model=model,
        input_tokens=max(0, _int(uncached)) + _int(tokens.get("tool")),
        cache_read_tokens=cached,
        output_tokens=_int(tokens.get("candidates")) + thoughts,
        reasoning_tokens=thoughts,
    )


def _gemini_quota(error: Mapping[str, Any], now: datetime) -> QuotaHit | None:
    """Recognise error code 429, a quota error type or a RESOURCE_EXHAUSTED message."""
    message = str(error.get("message") or "")
    if str(error.get("code")) == "429" or GEMINI_QUOTA_TYPES.search(str(error.get("type") or "")):
        return QuotaHit(_reason(message or "Gemini quota exhausted"), retry_after_s(message, now))
    return quota_from_text(message, now)


def parse_gemini_json(output: str, *, now: datetime | None = None) -> AgentOutput:
    """Read Gemini CLI's JSON document: response, per-model token stats and error."""
    doc = _gemini_document(output)
    if doc is None:
        return _output(_gemini_salvage(output), _ended_early("Gemini printed no complete JSON"))
    models = _dict(_dict(doc.get("stats")).get("models"))
    usage = sum_usage(_gemini_model_usage(m, e) for m, e in models.items() if isinstance(e, dict))
    error = _dict(doc.get("error"))
    if not error:
        return _output(str(doc.get("response") or ""), None, usage)
    message = _api_message(str(error.get("message") or error.get("type") or "unknown error"))
    return _output(
        str(doc.get("response") or ""),
        f"Gemini CLI failed: {message}",
        usage,
        _gemini_quota(error, _now(now)),
    )


# --- aider (--no-pretty --no-stream) --------------------------------------------------------

AIDER_TOKENS = re.compile(r"^Tokens: (?P<counts>.+?received)\.", re.MULTILINE)
AIDER_COUNT = re.compile(r"([\d.,]+)\s*([kM]?) (sent|cache write|cache hit|received)")
AIDER_COST = re.compile(r"Cost: \$([\d.]+) (?:message|request), \$([\d.]+) session\.")
AIDER_MODEL = re.compile(r"^(?:Main model|Model): (\S+)", re.MULTILINE)
AIDER_ERROR = re.compile(r"^(?:litellm\.)?(\w+Error): .*$", re.MULTILINE)
AIDER_TRACEBACK = "Traceback (most recent call last):"
# The lines of aider's banner, printed before its answer.
AIDER_BANNER = re.compile(
    r"(?:Aider v\d|Main model: |Weak model: |Editor model: |Git repo: |Repo-map: "
    r"|https://aider\.chat/HISTORY)"
)
AIDER_CHATTER = re.compile(r"(?:Tokens: |Cost: |Warning: (?:Input|Output) is not a terminal)")
SUFFIX = {"": 1, "k": 1_000, "M": 1_000_000}


def _aider_count(number: str, suffix: str) -> int:
    """Read aider's rounded counts: `345`, `1,234`, `1.2k`, `12k`, `1.5M`."""
    return int(Decimal(number.replace(",", "")) * SUFFIX[suffix])


def _aider_message_usage(counts: str, model: str | None) -> Usage:
    """Read one `Tokens:` report; `sent` includes the cache hits and writes."""
    found = {kind: _aider_count(n, s) for n, s, kind in AIDER_COUNT.findall(counts)}
    hit, write = found.get("cache hit", 0), found.get("cache write", 0)
    return Usage(
        model=model,
        input_tokens=max(0, found.get("sent", 0) - hit - write),
        cache_read_tokens=hit,
        cache_write_tokens=write,
        output_tokens=found.get("received", 0),
    )


def _aider_usage(output: str) -> Usage | None:
    """Sum every `Tokens:` report and take the last session cost as the dollars."""
    model_match = AIDER_MODEL.search(output)
    model = model_match[1] if model_match else None
    reports = AIDER_TOKENS.finditer(output)
    usage = sum_usage(_aider_message_usage(m["counts"], model) for m in reports)
    costs = AIDER_COST.findall(output)
    if usage is None or not costs:
        return usage
    return replace(usage, cost_usd=Decimal(costs[-1][1]), cost_source=AGENT)


def _aider_error(output: str) -> str | None:
    """Find an API error or crash printed after aider's last usage report."""
    last_report = max((m.end() for m in AIDER_TOKENS.finditer(output)), default=-1)
    if AIDER_TRACEBACK in output[last_report + 1 :]:
        last_line = output.rstrip().splitlines()[-1]
        return f"aider crashed: {last_line.strip()}"
    errors = [m for m in AIDER_ERROR.finditer(output) if m.start() > last_report]
    if errors:
        return f"aider failed: {_unwrapped(output, errors[-1])}"
    if last_report < 0:
        return _ended_early("aider printed no token report")
    return None


def _unwrapped(output: str, match: re.Match[str]) -> str:
    """Return an error aider printed with the lines its 80-column wrap split it into, joined
    (`try again in` may sit on the next line), up to a blank line or the next error."""
    lines = output[match.start() :].split("\n\n", 1)[0].splitlines()
    kept = [lines[0].strip()]
    for line in lines[1:]:
        if AIDER_ERROR.match(line) or line.startswith(("Retrying in", "The API provider")):
            break
        kept.append(line.strip())
    return " ".join(kept)


def _aider_text(output: str) -> str:
    """Return what aider answered: without its banner, terminal warnings, release-notes
    pointer, and token and cost reports."""
    lines = output.splitlines(keepends=True)
    # Everything up to aider's banner is start-up noise (warnings, a refused price-list
    # download); the answer begins after the banner and the blank lines that follow it.
    banner = [i for i, line in enumerate(lines[:60]) if AIDER_BANNER.match(line)]
    start = banner[-1] + 1 if banner else 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    return "".join(line for line in lines[start:] if not AIDER_CHATTER.match(line))


def parse_aider(output: str, *, now: datetime | None = None) -> AgentOutput:
    """Read aider's printed chat, its `Tokens:`/`Cost:` reports and any API error."""
    error = _aider_error(output)
    quota = None
    detail = (error or "").removeprefix("aider failed: ")
    if error and ("RateLimitError" in error or QUOTA_TEXT.search(error)):
        quota = QuotaHit(_reason(detail), retry_after_s(detail, _now(now)))
    elif error and detail.startswith("litellm.AuthenticationError"):
        error = f"the provider refused the agent's credentials ({_reason(_api_message(detail))})"
    return _output(_aider_text(output), error, _aider_usage(output), quota)


# --- OpenCode (opencode run --format json) -----------------------------------------------


def _opencode_step_usage(part: Mapping[str, Any]) -> Usage:
    """Read one step_finish part; OpenCode's output excludes reasoning, so add it back."""
    tokens = _dict(part.get("tokens"))
    cache = _dict(tokens.get("cache"))
    reasoning = _int(tokens.get("reasoning"))
    cost = _decimal(part.get("cost"))
    return Usage(
        input_tokens=_int(tokens.get("input")),
        output_tokens=_int(tokens.get("output")) + reasoning,
        reasoning_tokens=reasoning,
        cache_read_tokens=_int(cache.get("read")),
        cache_write_tokens=_int(cache.get("write")),
        # A cost of 0 means OpenCode had no price for the model, not that it was free.
        cost_usd=cost if cost else None,
        cost_source=AGENT if cost else UNPRICED,
    )


def _opencode_error(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return the error object of an error event."""
    return _dict(event.get("error"))


def _opencode_message(error: Mapping[str, Any]) -> str:
    """Return an OpenCode error's message, falling back to its name."""
    return str(_dict(error.get("data")).get("message") or error.get("name") or "unknown error")


def _opencode_quota(error: Mapping[str, Any], now: datetime) -> QuotaHit | None:
    """Recognise status 429 or a limit message, with any retry-after header."""
    data = _dict(error.get("data"))
    message = _opencode_message(error)
    headers = {str(k).lower(): v for k, v in _dict(data.get("responseHeaders")).items()}
    if data.get("statusCode") == 429 or QUOTA_TEXT.search(f"{error.get('name')} {message}"):
        header = str(headers.get("retry-after") or "")
        wait = float(header) if header.replace(".", "", 1).isdigit() else None
        return QuotaHit(_reason(message), wait if wait is not None else retry_after_s(message, now))
    return None


def _opencode_text(events: list[dict[str, Any]]) -> str:
    """Join the text parts of the last message that had any text."""
    parts = [_dict(e.get("part")) for e in events if e.get("type") == "text"]
    if not parts:
        return ""
    last_message = parts[-1].get("messageID")
    return "\n\n".join(
        str(p.get("text") or "").strip() for p in parts if p.get("messageID") == last_message
    )


def parse_opencode_jsonl(output: str, *, now: datetime | None = None) -> AgentOutput:
    """Read `opencode run --format json` events: text parts, summed steps and errors."""
    events, cut = _json_events(output)
    starts = sum(1 for e in events if e.get("type") == "step_start")
    finishes = [_dict(e.get("part")) for e in events if e.get("type") == "step_finish"]
    usage = sum_usage(_opencode_step_usage(p) for p in finishes)
    errors = [_opencode_error(e) for e in events if e.get("type") == "error"]
    if errors:
        message = f"OpenCode failed: {_opencode_message(errors[-1])}"
        quota = _opencode_quota(errors[-1], _now(now))
        return _output(_opencode_text(events), message, usage, quota)
    error = None
    if cut or starts > len(finishes):
        error = _ended_early("OpenCode started a step it never finished")
    elif not events:
        error = _ended_early("OpenCode printed no events")
    return _output(_opencode_text(events), error, usage)


# --- live usage while an agent runs ----------------------------------------------------------


class LiveUsage:
    """Add up usage from stream lines as they arrive, to enforce a budget mid-run.

    Understands Claude Code stream-json (assistant messages and, with
    --include-partial-messages, the API's stream events, then the result), Codex
    JSONL (turn.completed, which Codex prints once per turn) and OpenCode JSONL
    (step_finish). Lines of any other shape are ignored.
    """

    def __init__(self) -> None:
        self._claude_messages: dict[str, Usage] = {}
        self._claude_result: Usage | None = None
        self._current = ""  # the message Claude Code is streaming
        # Set when the agent is stuck retrying what waiting cannot fix (claude_retry_verdict).
        self.verdict: RetryVerdict | None = None
        self._held: list[str] = []  # an aider error, until its retry note says it retries
        self._model: str | None = None
        self._steps: Usage | None = None

    def feed(self, line: str) -> None:
        """Take one line of the agent's output."""
        event = _load(line.strip()) if line.strip().startswith("{") else None
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
        elif kind == "assistant":
            self._add_claude_message(_dict(event.get("message")))
        elif kind == "stream_event":  # --include-partial-messages: the API's own events
            self._add_claude_stream_event(_dict(event.get("event")), event.get("api_message_id"))
        elif kind == "result":
            self._claude_result = _claude_result_usage(event, self._model)
        elif kind == "turn.completed":
            self._steps = sum_usage([self._steps, _codex_turn_usage(event)])
        elif kind == "step_finish":
            self._steps = sum_usage([self._steps, _opencode_step_usage(_dict(event.get("part")))])

    def _add_claude_message(self, message: Mapping[str, Any]) -> None:
        """Keep the highest counts per message id (one message spans several lines)."""
        if isinstance(message.get("usage"), dict):
            key = str(message.get("id") or len(self._claude_messages))
            self._keep(key, _claude_message_usage(message))

    def _add_claude_stream_event(self, event: Mapping[str, Any], message_id: Any) -> None:
        """Count a message's tokens as they stream: its start, then each delta's running total.

        An assistant line says `output_tokens: 1` until the message ends; the message_delta
        events carry the real count while the agent is still writing.
        """
        if event.get("type") == "message_start":
            message = _dict(event.get("message"))
            self._current = str(message.get("id") or message_id or self._current)
            self._add_claude_message({**message, "id": self._current})
        elif event.get("type") == "message_delta" and isinstance(event.get("usage"), dict):
            key = str(message_id or self._current)
            model = self._claude_messages.get(key, Usage()).model
            self._keep(key, _claude_message_usage({"usage": event["usage"], "model": model}))

    def _keep(self, key: str, usage: Usage) -> None:
        known = self._claude_messages.get(key)
        if known is None:
            self._claude_messages[key] = usage
            return
        self._claude_messages[key] = replace(
            known,
            model=known.model or usage.model,
            input_tokens=max(known.input_tokens, usage.input_tokens),
            output_tokens=max(known.output_tokens, usage.output_tokens),
            cache_read_tokens=max(known.cache_read_tokens, usage.cache_read_tokens),
            cache_write_tokens=max(known.cache_write_tokens, usage.cache_write_tokens),
        )

    @property
    def usage(self) -> Usage | None:
        """Return the usage so far, or None before any was reported."""
        if self._claude_result is not None:
            return self._claude_result
        return sum_usage([*self._claude_messages.values(), self._steps])
