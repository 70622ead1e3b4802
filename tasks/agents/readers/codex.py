"""Codex CLI's output: `codex exec --json` events."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tasks.agents.usage import (
    AgentOutput,
    Usage,
    agent_output,
    as_dict,
    as_int,
    ended_early,
    json_events,
    now_or,
    quota_from_text,
    sum_usage,
)


def codex_turn_usage(event: Mapping[str, Any]) -> Usage:
    """Read turn.completed usage; Codex counts cached tokens inside input_tokens, and its
    output_tokens hold the reasoning it also reports apart (as the API does)."""
    usage = as_dict(event.get("usage"))
    cached = as_int(usage.get("cached_input_tokens"))
    return Usage(
        input_tokens=max(0, as_int(usage.get("input_tokens")) - cached),
        cache_read_tokens=cached,
        output_tokens=as_int(usage.get("output_tokens")),
        reasoning_tokens=as_int(usage.get("reasoning_output_tokens")),
    )


def _codex_failure(event: Mapping[str, Any]) -> str | None:
    """Return the message of a turn.failed or error event."""
    if event.get("type") == "turn.failed":
        return str(as_dict(event.get("error")).get("message") or "turn failed")
    if event.get("type") == "error":
        return str(event.get("message") or "error")
    return None


def parse_codex_jsonl(output: str, *, now: datetime | None = None) -> AgentOutput:
    """Read `codex exec --json` events: last agent message, summed turn usage, failures."""
    events, cut = json_events(output)
    text = ""
    failure: str | None = None
    finished = False
    for event in events:
        item = as_dict(event.get("item"))
        if event.get("type") == "item.completed" and item.get("type") == "agent_message":
            text = str(item.get("text") or "")
        if event.get("type") == "turn.completed":
            finished, failure = True, None
        if (message := _codex_failure(event)) is not None:
            failure = message
            finished = finished or event.get("type") == "turn.failed"
    usage = sum_usage(codex_turn_usage(e) for e in events if e.get("type") == "turn.completed")
    error = f"Codex failed: {failure}" if failure else None
    if error is None and (cut or not finished):
        error = ended_early("Codex never reported turn.completed")
    return agent_output(text, error, usage, quota_from_text(failure, now_or(now)))
