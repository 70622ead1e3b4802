"""OpenCode, the real CLI (pinned in tests/agents), run as gaffer runs it.

The shipped `opencode` definition runs through gaffer's `run_agent` in the sandbox against
the model server's Messages API on loopback, reached through `ANTHROPIC_BASE_URL`.
"""

from __future__ import annotations

from pathlib import Path

from tasks.agents.definitions import AgentResult
from tasks.isolation.sandbox import Sandbox
from tests.agent_clis.conftest import attempted, only_the_model_server, run_cli, shell_edit
from tests.model_server import ModelServer, Refusal, Text, model_server

MODEL = "anthropic/claude-sonnet-4-5"


def opencode(
    server: ModelServer, worktree: Path, job_dir: Path, sandbox: Sandbox, **options
) -> AgentResult:
    env = {"ANTHROPIC_BASE_URL": f"{server.url}/v1", "ANTHROPIC_API_KEY": "sk-ant-test"}
    return run_cli("opencode", env, worktree, job_dir, sandbox, model=MODEL, **options)


def test_execute_lands_the_edit_and_counts_what_the_server_reported(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    with model_server(shell_edit("bash", description="write hello.py")) as server:
        result = opencode(server, worktree, tmp_path / "job", sandbox)
    # OpenCode also starts a background install of its plugin package into its config
    # folder, which has no switch; the sandbox refuses it and the run goes on without it.
    assert attempted(tmp_path / "job", "allowed") == only_the_model_server(server)
    assert len(attempted(tmp_path / "job", "refused")) <= 1
    assert result.ok, result.error
    assert (worktree / "hello.py").read_text() == "print(1)\n"
    assert result.text.strip() == "Added hello.py."
    assert result.usage is not None
    assert (result.usage.input_tokens, result.usage.output_tokens) == (2000, 70)
    # One call per step: no extra call to title the session.
    assert len(server.message_requests()) == 2


def test_planning_makes_no_edit(worktree: Path, tmp_path: Path, sandbox: Sandbox) -> None:
    with model_server(
        [*shell_edit("bash", description="write hello.py")[:1], Text("1. Add hello.py.")]
    ) as server:
        result = opencode(server, worktree, tmp_path / "job", sandbox, stage="plan")
    assert not (worktree / "hello.py").exists()
    assert result.usage is not None and result.usage.input_tokens > 0


def test_a_prompt_past_the_argument_limit_reaches_the_model_whole(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    prompt = "Read all of this.\n" + "x" * 200_000 + "\nTHE END"
    with model_server([Text("Read it.")]) as server:
        result = opencode(server, worktree, tmp_path / "job", sandbox, prompt=prompt)
    assert result.ok, result.error
    assert "THE END" in str(server.message_requests()[0]["body"]["messages"])


def test_a_refused_key_fails_with_the_providers_words(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    with model_server([Refusal(401, "invalid x-api-key")]) as server:
        result = opencode(server, worktree, tmp_path / "job", sandbox)
    assert not result.ok and result.quota is None
    assert result.error is not None and result.error.endswith("OpenCode failed: invalid x-api-key")
