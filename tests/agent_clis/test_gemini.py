"""Gemini CLI, the real CLI (pinned in tests/agents), run as gaffer runs it.

The shipped `gemini` definition runs through gaffer's `run_agent` in the sandbox against
the model server's generateContent API on loopback, reached through
`GOOGLE_GEMINI_BASE_URL`; its auth type comes from the settings file gaffer writes into
the run's home.
"""

from __future__ import annotations

from pathlib import Path

from tasks.agents.definitions import AgentResult
from tasks.isolation.sandbox import Sandbox
from tests.agent_clis.conftest import attempted, only_the_model_server, run_cli, shell_edit
from tests.model_server import ModelServer, Refusal, Text, model_server

MODEL = "gemini-2.5-pro"


def gemini(
    server: ModelServer, worktree: Path, job_dir: Path, sandbox: Sandbox, **options
) -> AgentResult:
    env = {"GOOGLE_GEMINI_BASE_URL": server.url, "GEMINI_API_KEY": "test-key"}
    return run_cli("gemini", env, worktree, job_dir, sandbox, model=MODEL, **options)


def test_execute_lands_the_edit_and_counts_what_the_server_reported(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    with model_server(shell_edit("run_shell_command", description="write hello.py")) as server:
        result = gemini(server, worktree, tmp_path / "job", sandbox)
    assert attempted(tmp_path / "job") == only_the_model_server(server)
    assert result.ok, result.error
    assert (worktree / "hello.py").read_text() == "print(1)\n"
    assert result.text.strip() == "Added hello.py."
    assert result.usage is not None
    assert (result.usage.input_tokens, result.usage.output_tokens) == (2000, 70)
    assert result.usage.cost_usd is not None and result.usage.cost_usd > 0
    assert all(MODEL in r["path"] for r in server.requests if ":countTokens" not in r["path"])


def test_planning_makes_no_edit(worktree: Path, tmp_path: Path, sandbox: Sandbox) -> None:
    with model_server(
        [
            *shell_edit("run_shell_command", description="write hello.py")[:1],
            Text("1. Add hello.py."),
        ]
    ) as server:
        result = gemini(server, worktree, tmp_path / "job", sandbox, stage="plan")
    assert not (worktree / "hello.py").exists()
    assert result.usage is not None and result.usage.input_tokens > 0


def test_a_prompt_past_the_argument_limit_reaches_the_model_whole(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    prompt = "Read all of this.\n" + "x" * 200_000 + "\nTHE END"
    with model_server([Text("Read it.")]) as server:
        result = gemini(server, worktree, tmp_path / "job", sandbox, prompt=prompt)
    assert result.ok, result.error
    assert "THE END" in str(server.requests[-1]["body"]["contents"])


def test_a_rate_limit_parks_the_job_with_the_servers_wait(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    limited = Refusal(429, "Rate limit reached. Please try again in 40s.")
    with model_server([limited]) as server:
        result = gemini(server, worktree, tmp_path / "job", sandbox)
    assert not result.ok and result.quota is not None
    assert result.quota.retry_after_s == 40
    assert len([r for r in server.requests if ":countTokens" not in r["path"]]) == 1


def test_a_refused_key_fails_with_the_providers_words(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    with model_server([Refusal(401, "API key not valid.")]) as server:
        result = gemini(server, worktree, tmp_path / "job", sandbox)
    assert not result.ok and result.quota is None
    assert result.error is not None and result.error.endswith(
        "Gemini CLI failed: API key not valid."
    )
