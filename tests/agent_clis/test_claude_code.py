"""Claude Code, the real CLI (pinned in tests/agents), run as gaffer runs it.

Each test runs the shipped `claude` definition through gaffer's `run_agent`, inside the
sandbox, against the model server in tests/model_server.py on loopback, and asserts what
gaffer records: the edit (or none), the tokens and dollars, the error, the parked quota.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from tasks.agents.definitions import AgentResult
from tasks.agents.pricing import price
from tasks.agents.usage import Usage
from tasks.isolation.sandbox import Sandbox
from tests.agent_clis.conftest import attempted, models_asked, only_the_model_server, run_cli
from tests.model_server import ModelServer, Refusal, Reply, Text, ToolCall, model_server

MODEL = "claude-sonnet-4-5"


def claude(
    server: ModelServer,
    worktree: Path,
    job_dir: Path,
    sandbox: Sandbox,
    *,
    stage: str = "execute",
    prompt: str = "Add hello.py.",
    budget: Decimal | None = None,
) -> AgentResult:
    env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "sk-ant-test"}
    return run_cli(
        "claude",
        env,
        worktree,
        job_dir,
        sandbox,
        model=MODEL,
        stage=stage,
        prompt=prompt,
        budget=budget,
    )


def write_hello(worktree: Path) -> list[Reply]:
    return [
        ToolCall("Write", {"file_path": str(worktree / "hello.py"), "content": "print(1)\n"}),
        Text("Added hello.py.", input_tokens=1200, output_tokens=40),
    ]


def test_execute_lands_the_edit_and_records_what_the_server_billed(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    with model_server(write_hello(worktree)) as server:
        result = claude(server, worktree, tmp_path / "job", sandbox)
    assert attempted(tmp_path / "job") == only_the_model_server(server)
    assert result.ok, result.error
    assert (worktree / "hello.py").read_text() == "print(1)\n"
    assert result.text == "Added hello.py."
    assert result.usage is not None
    # What the server reported over its two calls: 100 + 1200 in, 30 + 40 out.
    assert (result.usage.input_tokens, result.usage.output_tokens) == (1300, 70)
    expected = price(Usage(model=MODEL, input_tokens=1300, output_tokens=70)).cost_usd
    assert expected is not None and result.usage.cost_usd is not None
    assert abs(result.usage.cost_usd - expected) < Decimal("0.000001")
    assert models_asked(server) == {MODEL}


def test_planning_makes_no_edit(worktree: Path, tmp_path: Path, sandbox: Sandbox) -> None:
    with model_server(write_hello(worktree)) as server:
        result = claude(server, worktree, tmp_path / "job", sandbox, stage="plan")
    assert not (worktree / "hello.py").exists()
    assert result.usage is not None and result.usage.input_tokens > 0


def test_a_prompt_past_the_argument_limit_reaches_the_agent_whole(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    prompt = "Read all of this.\n" + "x" * 200_000 + "\nTHE END"
    with model_server([Text("Read it.")]) as server:
        result = claude(server, worktree, tmp_path / "job", sandbox, prompt=prompt)
    assert result.ok, result.error
    [request] = server.message_requests()
    assert "THE END" in str(request["body"]["messages"])


def test_a_budget_stops_the_agent_between_its_calls(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    costly = ToolCall(
        "Write",
        {"file_path": str(worktree / "a.py"), "content": "a = 1\n"},
        input_tokens=200_000,
        output_tokens=2_000,
    )
    with model_server([costly, Text("never reached")]) as server:
        result = claude(server, worktree, tmp_path / "job", sandbox, budget=Decimal("0.10"))
    assert result.over_budget and not result.ok
    assert result.usage is not None and result.usage.input_tokens >= 200_000
    assert len(server.message_requests()) == 1  # stopped before its second call


def test_a_budget_stops_the_agent_in_the_middle_of_a_slow_answer(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    # The call's input alone ($0.60 at $3 per million) is over the budget: gaffer reads it
    # from the stream's first event and stops the agent while the answer still trickles.
    slow = Text("word " * 40, input_tokens=200_000, pieces=40, seconds_between=0.25)
    with model_server([slow]) as server:
        result = claude(server, worktree, tmp_path / "job", sandbox, budget=Decimal("0.10"))
        server.wait_until_streams_end()
    assert result.over_budget and not result.ok
    assert result.usage is not None and result.usage.input_tokens == 200_000
    assert len(server.message_requests()) == 1
    assert server.streams_cut == 1  # the answer was never read to its end


def test_a_rate_limit_parks_the_job_with_the_servers_reset(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    limited = Refusal(429, "rate limited", {"retry-after": "40"})
    with model_server([limited]) as server:
        result = claude(server, worktree, tmp_path / "job", sandbox)
    assert not result.ok
    assert result.quota is not None
    # At least the server's wait; Claude Code adds its own jitter (up to a quarter more).
    assert result.quota.retry_after_s is not None and 40 <= result.quota.retry_after_s <= 60
    assert len(server.message_requests()) == 1  # not retried for minutes


def test_a_refused_key_fails_at_once_with_a_readable_reason(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    with model_server([Refusal(401, "invalid x-api-key")]) as server:
        result = claude(server, worktree, tmp_path / "job", sandbox)
    assert not result.ok and result.quota is None
    assert result.error is not None
    assert result.error.startswith("Claude Code's API credentials were refused (401")
    assert len(server.message_requests()) <= 2
