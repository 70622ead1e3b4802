"""aider's printed chat (`--no-pretty --no-stream`): its answer, token and cost reports, errors."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime
from decimal import Decimal

from tasks.agents.usage import (
    AGENT,
    QUOTA_TEXT,
    AgentOutput,
    QuotaHit,
    Usage,
    agent_output,
    api_message,
    ended_early,
    now_or,
    reason_of,
    retry_after_s,
    sum_usage,
)

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
        return ended_early("aider printed no token report")
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
        quota = QuotaHit(reason_of(detail), retry_after_s(detail, now_or(now)))
    elif error and detail.startswith("litellm.AuthenticationError"):
        error = f"the provider refused the agent's credentials ({reason_of(api_message(detail))})"
    return agent_output(_aider_text(output), error, _aider_usage(output), quota)
