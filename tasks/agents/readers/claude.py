"""Claude Code's output: `--output-format stream-json --verbose` (or json)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from tasks.agents.usage import (
    AGENT,
    UNPRICED,
    AgentOutput,
    QuotaHit,
    RetryVerdict,
    Usage,
    agent_output,
    api_message,
    as_decimal,
    as_dict,
    as_int,
    ended_early,
    json_events,
    now_or,
    quota_from_text,
    reason_of,
    retry_after_s,
    sum_usage,
)

CLAUDE_LIMIT_RESULT = re.compile(
    r"^(?:Claude (?:AI )?usage limit reached|You've hit your (?:usage )?limit"
    r"|(?:5-hour|weekly|Opus weekly|session) limit reached)",
    re.IGNORECASE,
)


def claude_message_usage(message: Mapping[str, Any]) -> Usage:
    """Read the usage block of one Anthropic API message."""
    usage = as_dict(message.get("usage"))
    return Usage(
        model=message.get("model") or None,
        input_tokens=as_int(usage.get("input_tokens")),
        output_tokens=as_int(usage.get("output_tokens")),
        cache_read_tokens=as_int(usage.get("cache_read_input_tokens")),
        cache_write_tokens=as_int(usage.get("cache_creation_input_tokens")),
    )


def _claude_model_usage(model: str, entry: Mapping[str, Any]) -> Usage:
    """Read one `modelUsage` entry, with the dollars Claude Code put on it."""
    cost = as_decimal(entry.get("costUSD"))
    return Usage(
        model=model,
        input_tokens=as_int(entry.get("inputTokens")),
        output_tokens=as_int(entry.get("outputTokens")),
        cache_read_tokens=as_int(entry.get("cacheReadInputTokens")),
        cache_write_tokens=as_int(entry.get("cacheCreationInputTokens")),
        cost_usd=cost,
        cost_source=AGENT if cost is not None else UNPRICED,
    )


def claude_result_usage(result: Mapping[str, Any], model: str | None) -> Usage:
    """Read a result object's usage: modelUsage (every model used) first, else `usage`."""
    per_model = [
        _claude_model_usage(name, entry)
        for name, entry in as_dict(result.get("modelUsage")).items()
        if isinstance(entry, dict)
    ]
    base = sum_usage(per_model) or claude_message_usage({**result, "model": model})
    cost = as_decimal(result.get("total_cost_usd"))
    if cost is None:
        return base
    return replace(base, cost_usd=cost, cost_source=AGENT)


def _claude_error(result: Mapping[str, Any]) -> str | None:
    """Say why a result object cannot be used, or None for a clean success."""
    text = api_message(str(result.get("result") or "").strip())
    subtype = str(result.get("subtype") or "")
    status = result.get("api_error_status")
    if status:
        return f"Claude Code's API call failed with status {status}: {text or subtype}"
    if subtype == "error_max_turns":
        return f"Claude Code stopped at its turn limit after {result.get('num_turns')} turns"
    if CLAUDE_LIMIT_RESULT.match(text):
        return f"Claude Code hit a usage limit: {reason_of(text)}"
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
            return QuotaHit(reason_of(text or "API error 429"), retry_after_s(text, now))
        failed = result.get("is_error") or CLAUDE_LIMIT_RESULT.match(text.strip())
        if failed and (hit := quota_from_text(text, now)):
            return hit
    for event in reversed(events):
        info = as_dict(event.get("rate_limit_info"))
        if event.get("type") == "rate_limit_event" and info.get("status") == "rejected":
            resets = as_int(info.get("resetsAt"))
            wait = max(0.0, resets - now.timestamp()) if resets else None
            return QuotaHit(f"Claude {info.get('rateLimitType', 'usage')} limit reached", wait)
        if event.get("type") == "assistant" and "rate_limit" in str(event.get("error") or ""):
            return QuotaHit("Claude API rate limit", None)
    return None


def claude_retry_verdict(event: Mapping[str, Any]) -> RetryVerdict | None:
    """Read Claude Code's `api_retry` event (stream-json): a refused key or a rate limit.

    Claude Code retries both for minutes. A refused key never passes by waiting; a rate
    limit says when it lifts (`retry_delay_ms` follows the server's retry-after), so the
    job is parked until then instead of holding an agent slot.
    """
    if (event.get("type"), event.get("subtype")) != ("system", "api_retry"):
        return None
    status, kind = as_int(event.get("error_status")), str(event.get("error") or "")
    if status in (401, 403):
        return RetryVerdict(
            f"Claude Code's API credentials were refused ({status} {kind}): check "
            "ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN on the worker"
        )
    if status == 429:
        wait = as_int(event.get("retry_delay_ms")) / 1000 or None
        reason = f"Claude API rate limit ({kind or status})"
        return RetryVerdict(f"Claude Code was stopped: {reason}", QuotaHit(reason, wait))
    return None


def _claude_model(events: list[dict[str, Any]]) -> str | None:
    """Find the main model named by the init event or an assistant message."""
    for event in events:
        if event.get("type") == "system" and event.get("model"):
            return str(event["model"])
        message = as_dict(event.get("message"))
        if event.get("type") == "assistant" and message.get("model"):
            return str(message["model"])
    return None


def _claude_partial_text(events: list[dict[str, Any]]) -> str:
    """Return the text of the last assistant message seen before the output stopped."""
    for event in reversed(events):
        message = as_dict(event.get("message"))
        if event.get("type") != "assistant":
            continue
        content = message.get("content")
        blocks = [as_dict(b) for b in content] if isinstance(content, list) else []
        texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
        if texts:
            return "".join(texts)
    return ""


class ClaudeTally:
    """Claude Code's usage as its stream goes: the highest counts seen per API message.

    An assistant line says `output_tokens: 1` until the message ends; with
    --include-partial-messages, the API's own message_delta events carry the real count
    while the agent is still writing.
    """

    def __init__(self) -> None:
        self._messages: dict[str, Usage] = {}
        self._current = ""  # the message Claude Code is streaming

    def feed_event(self, event: Mapping[str, Any]) -> None:
        """Take an `assistant` or `stream_event` line; others are ignored."""
        if event.get("type") == "assistant":
            self._add_message(as_dict(event.get("message")))
        elif event.get("type") == "stream_event":
            self._add_stream_event(as_dict(event.get("event")), event.get("api_message_id"))

    @property
    def usage(self) -> Usage | None:
        return sum_usage(self._messages.values())

    def _add_message(self, message: Mapping[str, Any]) -> None:
        """Keep the highest counts per message id (one message spans several lines)."""
        if isinstance(message.get("usage"), dict):
            key = str(message.get("id") or len(self._messages))
            self._keep(key, claude_message_usage(message))

    def _add_stream_event(self, event: Mapping[str, Any], message_id: Any) -> None:
        """Count a message's tokens as they stream: its start, then each delta's running total.

        An assistant line says `output_tokens: 1` until the message ends; the message_delta
        events carry the real count while the agent is still writing.
        """
        if event.get("type") == "message_start":
            message = as_dict(event.get("message"))
            self._current = str(message.get("id") or message_id or self._current)
            self._add_message({**message, "id": self._current})
        elif event.get("type") == "message_delta" and isinstance(event.get("usage"), dict):
            key = str(message_id or self._current)
            model = self._messages.get(key, Usage()).model
            self._keep(key, claude_message_usage({"usage": event["usage"], "model": model}))

    def _keep(self, key: str, usage: Usage) -> None:
        known = self._messages.get(key)
        if known is None:
            self._messages[key] = usage
            return
        self._messages[key] = replace(
            known,
            model=known.model or usage.model,
            input_tokens=max(known.input_tokens, usage.input_tokens),
            output_tokens=max(known.output_tokens, usage.output_tokens),
            cache_read_tokens=max(known.cache_read_tokens, usage.cache_read_tokens),
            cache_write_tokens=max(known.cache_write_tokens, usage.cache_write_tokens),
        )


def parse_claude_json(output: str, *, now: datetime | None = None) -> AgentOutput:
    """Read Claude Code's result object (plain, --verbose array or stream-json lines)."""
    moment = now_or(now)
    events, _ = json_events(output)
    results = [e for e in events if e.get("type") == "result"]
    if not results:
        tally = ClaudeTally()
        for event in events:
            tally.feed_event(event)
        return agent_output(
            text=_claude_partial_text(events),
            error=ended_early("Claude Code printed no result object"),
            usage=tally.usage,
            quota=_claude_quota(None, events, moment),
        )
    result = results[-1]
    error = _claude_error(result)
    return agent_output(
        text=str(result.get("result") or ""),
        error=error,
        usage=claude_result_usage(result, _claude_model(events)),
        quota=_claude_quota(result, events, moment) if error else None,
        denials=_claude_denials(result),
    )


def _claude_denials(result: Mapping[str, Any]) -> tuple[str, ...]:
    """Name the tool calls Claude Code's permissions refused: `Bash(pytest -q)`."""
    denied = result.get("permission_denials")
    named = []
    for entry in denied if isinstance(denied, list) else []:
        call = as_dict(entry)
        given = as_dict(call.get("tool_input"))
        detail = given.get("command") or given.get("file_path") or ""
        named.append(f"{call.get('tool_name') or 'a tool'}({str(detail)[:80]})")
    return tuple(named)
