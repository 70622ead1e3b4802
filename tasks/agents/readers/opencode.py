"""OpenCode's output: `opencode run --format json` events."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tasks.agents.usage import (
    AGENT,
    QUOTA_TEXT,
    UNPRICED,
    AgentOutput,
    QuotaHit,
    Usage,
    agent_output,
    as_decimal,
    as_dict,
    as_int,
    ended_early,
    json_events,
    now_or,
    reason_of,
    retry_after_s,
    sum_usage,
)


def opencode_step_usage(part: Mapping[str, Any]) -> Usage:
    """Read one step_finish part; OpenCode's output excludes reasoning, so add it back."""
    tokens = as_dict(part.get("tokens"))
    cache = as_dict(tokens.get("cache"))
    reasoning = as_int(tokens.get("reasoning"))
    cost = as_decimal(part.get("cost"))
    return Usage(
        input_tokens=as_int(tokens.get("input")),
        output_tokens=as_int(tokens.get("output")) + reasoning,
        reasoning_tokens=reasoning,
        cache_read_tokens=as_int(cache.get("read")),
        cache_write_tokens=as_int(cache.get("write")),
        # A cost of 0 means OpenCode had no price for the model, not that it was free.
        cost_usd=cost if cost else None,
        cost_source=AGENT if cost else UNPRICED,
    )


def _opencode_error(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """Return the error object of an error event."""
    return as_dict(event.get("error"))


def _opencode_message(error: Mapping[str, Any]) -> str:
    """Return an OpenCode error's message, falling back to its name."""
    return str(as_dict(error.get("data")).get("message") or error.get("name") or "unknown error")


def _opencode_quota(error: Mapping[str, Any], now: datetime) -> QuotaHit | None:
    """Recognise status 429 or a limit message, with any retry-after header."""
    data = as_dict(error.get("data"))
    message = _opencode_message(error)
    headers = {str(k).lower(): v for k, v in as_dict(data.get("responseHeaders")).items()}
    if data.get("statusCode") == 429 or QUOTA_TEXT.search(f"{error.get('name')} {message}"):
        header = str(headers.get("retry-after") or "")
        wait = float(header) if header.replace(".", "", 1).isdigit() else None
        return QuotaHit(
            reason_of(message), wait if wait is not None else retry_after_s(message, now)
        )
    return None


def _opencode_text(events: list[dict[str, Any]]) -> str:
    """Join the text parts of the last message that had any text."""
    parts = [as_dict(e.get("part")) for e in events if e.get("type") == "text"]
    if not parts:
        return ""
    last_message = parts[-1].get("messageID")
    return "\n\n".join(
        str(p.get("text") or "").strip() for p in parts if p.get("messageID") == last_message
    )


def parse_opencode_jsonl(output: str, *, now: datetime | None = None) -> AgentOutput:
    """Read `opencode run --format json` events: text parts, summed steps and errors."""
    events, cut = json_events(output)
    starts = sum(1 for e in events if e.get("type") == "step_start")
    finishes = [as_dict(e.get("part")) for e in events if e.get("type") == "step_finish"]
    usage = sum_usage(opencode_step_usage(p) for p in finishes)
    errors = [_opencode_error(e) for e in events if e.get("type") == "error"]
    if errors:
        message = f"OpenCode failed: {_opencode_message(errors[-1])}"
        quota = _opencode_quota(errors[-1], now_or(now))
        return agent_output(_opencode_text(events), message, usage, quota)
    error = None
    if cut or starts > len(finishes):
        error = ended_early("OpenCode started a step it never finished")
    elif not events:
        error = ended_early("OpenCode printed no events")
    return agent_output(_opencode_text(events), error, usage)
