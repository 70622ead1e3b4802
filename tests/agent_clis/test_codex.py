"""Codex CLI, the real CLI (pinned in tests/agents), run as gaffer runs it.

The shipped `codex` definition runs through gaffer's `run_agent` in the sandbox against
the model server's Responses API on loopback, reached through `OPENAI_BASE_URL`, which
Codex itself ignores: gaffer passes it as Codex's `openai_base_url` setting.
"""

from __future__ import annotations

from pathlib import Path

from tasks.agents.definitions import AgentResult
from tasks.isolation.sandbox import Sandbox
from tests.agent_clis.conftest import (
    attempted,
    models_asked,
    only_the_model_server,
    run_cli,
    shell_edit,
)
from tests.model_server import ModelServer, Refusal, Reply, Text, model_server

MODEL = "gpt-5"


def codex(
    server: ModelServer, worktree: Path, job_dir: Path, sandbox: Sandbox, **options
) -> AgentResult:
    env = {"OPENAI_BASE_URL": f"{server.url}/v1", "OPENAI_API_KEY": "sk-test"}
    return run_cli("codex", env, worktree, job_dir, sandbox, model=MODEL, **options)


def write_hello() -> list[Reply]:
    """Codex's shell tool takes `cmd`; its last answer reports reasoning tokens apart."""
    run, _ = shell_edit("exec_command", argument="cmd")
    return [run, Text("Added hello.py.", input_tokens=1100, output_tokens=40, reasoning_tokens=12)]


def test_execute_lands_the_edit_and_counts_what_the_server_reported(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    with model_server(write_hello()) as server:
        result = codex(server, worktree, tmp_path / "job", sandbox)
    assert attempted(tmp_path / "job") == only_the_model_server(server)
    assert result.ok, result.error
    assert (worktree / "hello.py").read_text() == "print(1)\n"
    assert result.text.strip() == "Added hello.py."
    assert result.usage is not None
    assert (result.usage.input_tokens, result.usage.output_tokens) == (2000, 70)
    assert result.usage.reasoning_tokens == 12
    assert result.usage.cost_usd is not None and result.usage.cost_usd > 0
    assert models_asked(server) == {MODEL}


def test_planning_asks_the_model_and_makes_no_edit(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    with model_server([Text("1. Add hello.py.")]) as server:
        result = codex(server, worktree, tmp_path / "job", sandbox, stage="plan")
    assert result.ok, result.error
    assert result.text.strip() == "1. Add hello.py."
    assert not (worktree / "hello.py").exists()


def test_a_prompt_past_the_argument_limit_reaches_the_model_whole(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    prompt = "Read all of this.\n" + "x" * 200_000 + "\nTHE END"
    with model_server([Text("Read it.")]) as server:
        result = codex(server, worktree, tmp_path / "job", sandbox, prompt=prompt)
    assert result.ok, result.error
    asked = [r for r in server.requests if r["path"].startswith("/v1/responses") and r.get("body")]
    assert "THE END" in str(asked[0]["body"]["input"])


def test_a_rate_limit_parks_the_job_instead_of_minutes_of_retries(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    limited = Refusal(429, "Rate limit reached.", {"retry-after": "40"})
    with model_server([limited]) as server:
        result = codex(server, worktree, tmp_path / "job", sandbox)
    assert not result.ok and result.quota is not None
    assert result.error is not None and "rate limit" in result.error
    calls = [r for r in server.requests if r["method"] == "POST"]
    assert len(calls) == 1  # stopped at its first retry, not after minutes of them


def test_a_refused_key_fails_at_once_with_a_readable_reason(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    with model_server([Refusal(401, "invalid api key")]) as server:
        result = codex(server, worktree, tmp_path / "job", sandbox)
    assert not result.ok and result.quota is None
    assert result.error is not None
    assert result.error.startswith("the provider refused the agent's credentials")
    assert "invalid api key" in result.error
