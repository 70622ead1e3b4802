"""Reading each agent CLI's output: the answer, the tokens and dollars, and quota endings.

Fixtures in tests/fixtures/agents/ follow, per tool:
- Claude Code: the result object documented in Claude Code's headless docs
  (docs.anthropic.com/en/docs/claude-code/headless, `--output-format json|stream-json`)
  and FACTS.md; limit texts and `rate_limit_event` as quoted in anthropics/claude-code
  issues #2490, #59637 and #38673.
- Codex CLI: openai/codex codex-rs/exec/src/exec_events.rs (ThreadEvent, Usage,
  TurnFailedEvent, ThreadErrorEvent).
- Gemini CLI: google-gemini/gemini-cli packages/core/src/output/json-formatter.ts and
  types.ts (JsonOutput, JsonError) and packages/core/src/telemetry/uiTelemetry.ts
  (ModelMetrics.tokens; input = prompt - cached).
- aider: aider/coders/base_coder.py calculate_and_show_tokens_and_cost (the `Tokens:` and
  `Cost:` report, old `request` and newer `message` wording) and FACTS.md.
- OpenCode: packages/opencode/src/cli/cmd/run.ts (the `emit` envelope {type, timestamp,
  sessionID, part|error}) and session getUsage (input excludes cache, output excludes
  reasoning).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from tasks.agents.definitions import PARSERS
from tasks.agents.live import LiveUsage, retry_verdict_of_line
from tasks.agents.usage import QuotaHit, Usage, retry_after_s, sum_usage

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agents"
# 2025-06-23 18:00 UTC: two hours before the epoch in claude-usage-limit.json.
NOW = datetime(2025, 6, 23, 18, 0, tzinfo=UTC)
OUTPUT_OF = {
    "claude": "claude-json",
    "codex": "codex-jsonl",
    "gemini": "gemini-json",
    "aider": "aider",
    "opencode": "opencode-jsonl",
}


def parse(fixture: str):
    parser = PARSERS[OUTPUT_OF[fixture.split("-")[0]]]
    return parser((FIXTURES / fixture).read_text(), now=NOW)


def tokens(usage: Usage | None) -> tuple[int, int, int, int, int] | None:
    """(input, cache read, cache write, output, reasoning) as a bill lists them."""
    if usage is None:
        return None
    return (
        usage.input_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.output_tokens,
        usage.reasoning_tokens,
    )


@pytest.mark.parametrize(
    "fixture, text, bill, model, dollars, source",
    [
        pytest.param(
            "claude-success.json",
            "Added a `--dry-run` flag to `gaffer sync` and a test for it.",
            (5380, 187411, 15214, 2632, 0),
            "claude-sonnet-4-5-20250929",
            Decimal("0.1536564"),
            "agent",
            id="claude result counts every model in modelUsage and keeps its dollars",
        ),
        pytest.param(
            "claude-verbose.json",
            "The README now documents `--dry-run`.",
            (10, 40000, 12900, 570, 0),
            "claude-sonnet-4-5-20250929",
            Decimal("0.0723"),
            "agent",
            id="claude --verbose array reads the result element",
        ),
        pytest.param(
            "claude-stream.jsonl",
            "The README now documents `--dry-run`.",
            (10, 40000, 12900, 570, 0),
            "claude-sonnet-4-5-20250929",
            Decimal("0.0723"),
            "agent",
            id="claude stream-json reads the result line at the end",
        ),
        pytest.param(
            "codex-success.jsonl",
            "Added `--dry-run` to `gaffer sync`; tests pass.",
            (7253, 40960, 0, 1877, 0),
            None,
            None,
            "unpriced",
            id="codex cached tokens are taken out of input and billed as cache reads",
        ),
        pytest.param(
            "codex-two-turns.jsonl",
            "Also updated the README.",
            (9253, 90960, 0, 2177, 0),
            None,
            None,
            "unpriced",
            id="codex usage is summed over turns and the last agent message is the answer",
        ),
        pytest.param(
            "gemini-success.json",
            "Added `--dry-run` to `gaffer sync` and covered it with a test.",
            (24234, 40120, 0, 4140, 2210),
            "gemini-2.5-pro",
            None,
            "unpriced",
            id="gemini thoughts bill as output and the helper model's tokens are added",
        ),
        pytest.param(
            "gemini-no-input-field.json",
            "Added `--dry-run` to `gaffer sync` and covered it with a test.",
            (24234, 40120, 0, 4140, 2210),
            "gemini-2.5-pro",
            None,
            "unpriced",
            id="gemini without an input count derives it as prompt minus cached",
        ),
        pytest.param(
            "aider-success.txt",
            None,
            (3400, 21400, 1200, 1445, 0),
            "anthropic/claude-sonnet-4-20250514",
            Decimal("0.03"),
            "agent",
            id="aider k suffixes are read, cache taken out of sent, last session cost kept",
        ),
        pytest.param(
            "aider-old-format.txt",
            None,
            (1234, 0, 0, 56, 0),
            "gpt-4o",
            Decimal("0.0037"),
            "agent",
            id="aider's older comma counts and request wording still read",
        ),
        pytest.param(
            "aider-no-cost.txt",
            None,
            (2500, 0, 0, 410, 0),
            "openai/my-local-coder",
            None,
            "unpriced",
            id="aider without a cost line leaves the dollars to pricing",
        ),
        pytest.param(
            "opencode-success.jsonl",
            "Added `--dry-run` to `gaffer sync`.",
            (2520, 41400, 5900, 855, 120),
            None,
            Decimal("0.0405"),
            "agent",
            id="opencode steps are summed with reasoning billed as output",
        ),
        pytest.param(
            "opencode-zero-cost.jsonl",
            "Done.",
            (1500, 0, 0, 200, 0),
            None,
            None,
            "unpriced",
            id="opencode cost 0 means no price was known, not free",
        ),
    ],
)
def test_successful_runs_read_answer_and_bill(fixture, text, bill, model, dollars, source):
    out = parse(fixture)
    assert out.error is None and out.quota is None
    if text is not None:
        assert out.text == text
    assert tokens(out.usage) == bill
    assert out.usage.model == model
    assert out.usage.cost_usd == dollars
    assert out.usage.cost_source == source


def test_aider_answer_leaves_out_its_usage_reports():
    text = parse("aider-success.txt").text
    assert "Applied edit to bot/cli.py" in text
    assert "Tokens:" not in text and "Cost:" not in text


@pytest.mark.parametrize(
    "fixture, error, text, bill",
    [
        pytest.param(
            "claude-stream-crash.jsonl",
            "the agent's output ended early: Claude Code printed no result object",
            "The README now documents `--dry-run`.",
            (10, 40000, 12900, 570, 0),
            id="claude stream cut before the result keeps the messages' usage",
        ),
        pytest.param(
            "claude-truncated.json",
            "the agent's output ended early: Claude Code printed no result object",
            "",
            None,
            id="claude json cut mid-object has nothing to read",
        ),
        pytest.param(
            "codex-crash.jsonl",
            "the agent's output ended early: Codex never reported turn.completed",
            "Looking at the CLI first.",
            None,
            id="codex cut mid-line keeps the last message",
        ),
        pytest.param(
            "gemini-truncated.json",
            "the agent's output ended early: Gemini printed no complete JSON",
            "Added `--dry-run` to `gaffer sync` and covered it with a test.",
            None,
            id="gemini cut after the response salvages the response",
        ),
        pytest.param(
            "gemini-crash.txt",
            "the agent's output ended early: Gemini printed no complete JSON",
            "",
            None,
            id="gemini crash with no JSON at all",
        ),
        pytest.param(
            "aider-truncated.txt",
            "the agent's output ended early: aider printed no token report",
            None,
            None,
            id="aider cut before any token report",
        ),
        pytest.param(
            "aider-crash.txt",
            "aider crashed: KeyboardInterrupt",
            None,
            (12000, 0, 0, 345, 0),
            id="aider traceback after a report keeps the report",
        ),
        pytest.param(
            "opencode-crash.jsonl",
            "the agent's output ended early: OpenCode started a step it never finished",
            "Editing the CLI.",
            (2210, 18000, 5200, 760, 120),
            id="opencode cut mid-step keeps the finished steps",
        ),
        pytest.param(
            "claude-max-turns.json",
            "Claude Code stopped at its turn limit after 11 turns",
            "",
            (120, 612000, 30100, 8800, 0),
            id="claude turn limit is an error that still bills",
        ),
        pytest.param(
            "gemini-turn-limit.json",
            "Gemini CLI failed: Reached max session turns for this session. Increase the "
            "number of turns by specifying maxSessionTurns in settings.json.",
            "",
            None,
            id="gemini turn limit error is not a quota",
        ),
    ],
)
def test_broken_runs_say_why_and_keep_what_they_have(fixture, error, text, bill):
    out = parse(fixture)
    assert out.error == error
    assert out.quota is None
    if text is not None:
        assert out.text == text
    assert tokens(out.usage) == bill


@pytest.mark.parametrize(
    "fixture, reason_start, retry_after",
    [
        pytest.param("claude-api-429.json", "API Error: 429", 37.0, id="claude api 429"),
        pytest.param(
            "claude-usage-limit.json",
            "Claude AI usage limit reached",
            7200.0,
            id="claude usage limit with reset epoch",
        ),
        pytest.param(
            "claude-limit-resets-clock.json",
            "You've hit your limit",
            19 * 3600.0,
            id="claude limit resets at 3pm Paris time, 19 hours after 20:00 Paris",
        ),
        pytest.param(
            "claude-stream-rejected.jsonl",
            "Claude five_hour limit reached",
            3 * 3600.0,
            id="claude stream rate_limit_event rejected",
        ),
        pytest.param(
            "codex-rate-limit.jsonl", "Rate limit reached for gpt-5-codex", 1.115, id="codex 429"
        ),
        pytest.param(
            "codex-usage-limit.jsonl",
            "You've hit your usage limit",
            2 * 3600.0 + 5 * 60,
            id="codex usage limit in words",
        ),
        pytest.param(
            "gemini-quota.json",
            "You have exhausted your capacity",
            2 * 3600.0 + 3 * 60 + 42,
            id="gemini code 429 with a Go-style duration",
        ),
        pytest.param(
            "gemini-resource-exhausted.json",
            "[API Error:",
            41.17,
            id="gemini RESOURCE_EXHAUSTED",
        ),
        pytest.param(
            "aider-rate-limit.txt",
            "litellm.RateLimitError: AnthropicException",
            None,
            id="aider RateLimitError without a reset time",
        ),
        pytest.param(
            "opencode-rate-limit.jsonl",
            "Rate limit exceeded",
            30.0,
            id="opencode 429 with retry-after header",
        ),
    ],
)
def test_quota_endings_are_recognised_with_their_reset_time(fixture, reason_start, retry_after):
    out = parse(fixture)
    assert out.error
    assert isinstance(out.quota, QuotaHit)
    assert out.quota.reason.startswith(reason_start)
    assert out.quota.retry_after_s == pytest.approx(retry_after)


@pytest.mark.parametrize(
    "output",
    [
        pytest.param("", id="empty output"),
        pytest.param("\x00\xff not json {", id="garbage"),
        pytest.param('{"type": "result", "usage": [1, 2]', id="cut object"),
        pytest.param("[1, 2, 3]", id="json of the wrong shape"),
        pytest.param('{"type":"result","modelUsage":{"m":"x"},"total_cost_usd":"NaN?"}', id="bad"),
    ],
)
@pytest.mark.parametrize("name", sorted(set(OUTPUT_OF.values())))
def test_parsers_never_raise(name, output):
    out = PARSERS[name](output)
    assert isinstance(out.text, str)


@pytest.mark.parametrize(
    "text, seconds",
    [
        pytest.param("Please try again in 20ms.", 0.02, id="milliseconds"),
        pytest.param("Retry-After: 12", 12.0, id="retry-after header"),
        pytest.param('"retryDelay": "41s"', 41.0, id="google RetryInfo"),
        pytest.param("try again in 4 days 20 hours 9 minutes", 418140.0, id="words"),
        pytest.param("resets 11:30am (Asia/Calcutta)", 12 * 3600.0, id="clock with minutes"),
        pytest.param("Claude AI usage limit reached|1750690000", 0.0, id="past epoch is now"),
        pytest.param("rate limited, try later", None, id="no time given"),
    ],
)
def test_reset_times(text, seconds):
    assert retry_after_s(text, NOW) == (pytest.approx(seconds) if seconds is not None else None)


def test_usages_add_up_per_step():
    plan = Usage("gpt-5", 100, 10, 1000, 0, 0, Decimal("0.01"), "computed")
    execute = Usage("gpt-5", 200, 20, 2000, 0, 5, Decimal("0.02"), "agent")
    total = plan + execute
    assert tokens(total) == (300, 3000, 0, 30, 5)
    assert (total.cost_usd, total.cost_source) == (Decimal("0.03"), "computed")
    assert (plan + Usage(model="gpt-5", input_tokens=1)).cost_usd is None
    assert sum_usage([None, plan, None]) == plan
    assert sum_usage([]) is None


def test_sum_is_named_after_the_model_with_more_tokens():
    helper = Usage(model="claude-3-5-haiku", input_tokens=50)
    main = Usage(model="claude-sonnet-4-5", input_tokens=5000)
    assert (helper + main).model == "claude-sonnet-4-5"


@pytest.mark.parametrize(
    "fixture, after_lines, bill",
    [
        pytest.param(
            "claude-stream.jsonl",
            3,
            (4, 14000, 12000, 150, 0),
            id="claude message repeated over two lines counts once",
        ),
        pytest.param(
            "claude-stream.jsonl",
            5,
            (10, 40000, 12900, 570, 0),
            id="claude second message adds up",
        ),
        pytest.param("codex-two-turns.jsonl", 9, (7253, 40960, 0, 1877, 0), id="codex turn one"),
        pytest.param(
            "opencode-success.jsonl", 4, (2210, 18000, 5200, 760, 120), id="opencode first step"
        ),
    ],
)
def test_live_usage_grows_while_the_agent_runs(fixture, after_lines, bill):
    live = LiveUsage()
    assert live.usage is None
    for line in (FIXTURES / fixture).read_text().splitlines()[:after_lines]:
        live.feed(line)
    assert tokens(live.usage) == bill


def test_live_usage_takes_claude_result_dollars_at_the_end():
    live = LiveUsage()
    for line in (FIXTURES / "claude-stream.jsonl").read_text().splitlines():
        live.feed(line)
    live.feed("a line of stderr noise")
    live.feed('{"type": "result", "usage": ')
    assert live.usage.cost_usd == Decimal("0.0723")
    assert live.usage.cost_source == "agent"


def _stream(event: dict, message_id: str = "msg_1") -> str:
    return json.dumps({"type": "stream_event", "event": event, "api_message_id": message_id})


def test_live_usage_takes_the_real_output_count_from_claudes_stream_events():
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "model": "claude-sonnet-4-5",
            "usage": {"input_tokens": 900, "output_tokens": 1},
        },
    }
    assistant = {
        "type": "assistant",
        "message": {"id": "msg_1", "model": "claude-sonnet-4-5", "usage": {"output_tokens": 1}},
    }
    delta = {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 321}}
    live = LiveUsage()
    live.feed(_stream(start))
    live.feed(json.dumps(assistant))  # says 1 until the message ends
    live.feed(_stream(delta))
    live.feed(json.dumps(assistant))  # a late line never lowers the count
    assert live.usage is not None
    assert (live.usage.model, live.usage.input_tokens, live.usage.output_tokens) == (
        "claude-sonnet-4-5",
        900,
        321,
    )


@pytest.mark.parametrize(
    ("status", "error", "quota_s"),
    [
        pytest.param(429, "Claude Code was stopped: Claude API rate limit", 30.084, id="429 parks"),
        pytest.param(401, "Claude Code's API credentials were refused (401", None, id="401 fails"),
    ],
)
def test_claude_retrying_what_waiting_cannot_fix_is_a_verdict(status, error, quota_s):
    live = LiveUsage()
    retry = {
        "type": "system",
        "subtype": "api_retry",
        "attempt": 1,
        "retry_delay_ms": 30084,
        "error_status": status,
        "error": "rate_limit" if status == 429 else "authentication_failed",
    }
    live.feed(json.dumps({**retry, "error_status": 529, "error": "overloaded"}))
    assert live.verdict is None  # overloaded: worth Claude Code's own retry
    live.feed(json.dumps(retry))
    assert live.verdict is not None and live.verdict.error.startswith(error)
    assert (live.verdict.quota.retry_after_s if live.verdict.quota else None) == quota_s


def test_aiders_banner_and_terminal_warnings_are_not_part_of_its_answer():
    parsed = parse("aider-chatter.txt")
    assert parsed.error is None
    assert parsed.text.strip() == "## Plan\n\n1. Clip long names in the sidebar."


def test_aiders_wait_is_read_across_its_80_column_wrap():
    parsed = parse("aider-rate-limit-wrapped.txt")
    assert parsed.quota is not None
    assert parsed.quota.retry_after_s == 20


@pytest.mark.parametrize(
    ("line", "wait"),
    [
        pytest.param(
            "litellm.RateLimitError: RateLimitError: OpenAIException - try again in 20s.",
            20,
            id="aider",
        ),
        pytest.param(
            'Attempt 1 failed with status 429. Retrying with backoff... _ApiError: {"error":'
            '{"code":429,"message":"Please try again in 40s.","status":"RESOURCE_EXHAUSTED"}}',
            40,
            id="gemini",
        ),
        pytest.param(
            '{"type":"error","message":"Reconnecting... 1/5 (exceeded retry limit, last '
            'status: 429 Too Many Requests)"}',
            None,
            id="codex",
        ),
    ],
)
def test_a_cli_retrying_a_rate_limit_is_a_verdict_with_its_wait(line, wait):
    verdict = retry_verdict_of_line(line, NOW)
    assert verdict is not None and verdict.quota is not None
    assert verdict.quota.retry_after_s == wait


def test_an_answer_that_talks_about_rate_limits_is_no_verdict():
    for line in (
        "Handle RateLimitError: retry after 429 Too Many Requests.",
        "The test prints: Attempt 1 failed with status 429.",  # not at the line's start
        '{"type":"item.completed","item":{"text":"last status: 429"}}',
    ):
        assert retry_verdict_of_line(line, NOW) is None


def feed_lines(lines: list[str]) -> LiveUsage:
    live = LiveUsage()
    for line in lines:
        live.feed(line + "\n")
    return live


AIDER_WRAPPED_LIMIT = [
    "litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached for",
    "gpt-4.1 on tokens per min. Please try again in 20s.",
    "The API provider has rate limited you. Try again later or check your quotas.",
]


def test_aiders_limit_is_a_verdict_once_it_says_it_retries_with_the_wrapped_wait():
    live = feed_lines(AIDER_WRAPPED_LIMIT)
    assert live.verdict is None  # not yet: it may be an answer quoting the error
    live.feed("Retrying in 0.2 seconds...\n")
    assert live.verdict is not None and live.verdict.quota is not None
    assert live.verdict.quota.retry_after_s == 20


def test_an_aider_answer_quoting_litellms_error_is_no_verdict():
    live = feed_lines([*AIDER_WRAPPED_LIMIT, "", "So catch it and back off.", "Done."])
    assert live.verdict is None
