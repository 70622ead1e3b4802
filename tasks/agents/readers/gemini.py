"""Gemini CLI's output: `--output-format json`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tasks.agents.usage import (
    AgentOutput,
    QuotaHit,
    Usage,
    agent_output,
    api_message,
    as_dict,
    as_int,
    ended_early,
    now_or,
    quota_from_text,
    reason_of,
    retry_after_s,
    sum_usage,
)

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
    tokens = as_dict(entry.get("tokens"))
    cached = as_int(tokens.get("cached"))
    uncached = tokens["input"] if "input" in tokens else as_int(tokens.get("prompt")) - cached
    thoughts = as_int(tokens.get("thoughts"))
    return Usage(
        model=model,
        input_tokens=max(0, as_int(uncached)) + as_int(tokens.get("tool")),
        cache_read_tokens=cached,
        output_tokens=as_int(tokens.get("candidates")) + thoughts,
        reasoning_tokens=thoughts,
    )


def _gemini_quota(error: Mapping[str, Any], now: datetime) -> QuotaHit | None:
    """Recognise error code 429, a quota error type or a RESOURCE_EXHAUSTED message."""
    message = str(error.get("message") or "")
    if str(error.get("code")) == "429" or GEMINI_QUOTA_TYPES.search(str(error.get("type") or "")):
        return QuotaHit(reason_of(message or "Gemini quota exhausted"), retry_after_s(message, now))
    return quota_from_text(message, now)


def parse_gemini_json(output: str, *, now: datetime | None = None) -> AgentOutput:
    """Read Gemini CLI's JSON document: response, per-model token stats and error."""
    doc = _gemini_document(output)
    if doc is None:
        return agent_output(_gemini_salvage(output), ended_early("Gemini printed no complete JSON"))
    models = as_dict(as_dict(doc.get("stats")).get("models"))
    usage = sum_usage(_gemini_model_usage(m, e) for m, e in models.items() if isinstance(e, dict))
    error = as_dict(doc.get("error"))
    if not error:
        return agent_output(str(doc.get("response") or ""), None, usage)
    message = api_message(str(error.get("message") or error.get("type") or "unknown error"))
    return agent_output(
        str(doc.get("response") or ""),
        f"Gemini CLI failed: {message}",
        usage,
        _gemini_quota(error, now_or(now)),
    )
