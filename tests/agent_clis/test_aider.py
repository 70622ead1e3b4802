"""aider, the real CLI (pinned in tests/agents), run as gaffer runs it.

The shipped `aider` definition runs through gaffer's `run_agent` in the sandbox against the
model server's Chat Completions API on loopback, reached through `OPENAI_API_BASE`.
"""

from __future__ import annotations

from pathlib import Path

from tasks.agents.definitions import AgentResult
from tasks.isolation.sandbox import Sandbox
from tests.agent_clis.conftest import attempted, models_asked, only_the_model_server, run_cli
from tests.model_server import ModelServer, Refusal, Text, model_server

MODEL = "openai/gpt-4.1"
EDIT = (
    "I'll add it.\n\nhello.py\n```python\n<<<<<<< SEARCH\n=======\nprint(1)\n>>>>>>> REPLACE\n```\n"
)


def aider(
    server: ModelServer, worktree: Path, job_dir: Path, sandbox: Sandbox, **options
) -> AgentResult:
    env = {"OPENAI_API_BASE": f"{server.url}/v1", "OPENAI_API_KEY": "sk-test"}
    return run_cli("aider", env, worktree, job_dir, sandbox, model=MODEL, **options)


def test_execute_lands_the_edit_and_counts_what_the_server_reported(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    with model_server([Text(EDIT, input_tokens=1500, output_tokens=60)]) as server:
        result = aider(server, worktree, tmp_path / "job", sandbox)
    assert attempted(tmp_path / "job") == only_the_model_server(server)
    assert result.ok, result.error
    assert (worktree / "hello.py").read_text() == "print(1)\n"
    assert result.usage is not None
    assert (result.usage.input_tokens, result.usage.output_tokens) == (1500, 60)
    assert result.usage.cost_usd is not None and result.usage.cost_usd > 0
    assert models_asked(server) == {"gpt-4.1"}


def test_planning_makes_no_edit_and_posts_no_banner(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    answer = "## Plan\n\n1. Add hello.py."
    with model_server([Text(answer)]) as server:
        result = aider(server, worktree, tmp_path / "job", sandbox, stage="plan")
    assert result.ok, result.error
    assert result.text.strip() == answer
    assert not (worktree / "hello.py").exists()


def test_a_refused_key_fails_at_once_with_the_providers_words(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    with model_server([Refusal(401, "invalid api key")]) as server:
        result = aider(server, worktree, tmp_path / "job", sandbox)
    assert not result.ok and result.quota is None
    assert result.error is not None
    assert result.error.startswith("the provider refused the agent's credentials")


def test_a_rate_limit_parks_the_job_with_the_wait_the_provider_gave(
    worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    message = "Rate limit reached for gpt-4.1 on tokens per min. Please try again in 20s."
    limited = Refusal(429, message, {"retry-after": "20"})
    with model_server([limited]) as server:
        result = aider(server, worktree, tmp_path / "job", sandbox)
    assert not result.ok
    assert result.quota is not None and result.quota.retry_after_s == 20
    assert len(server.requests) == 1  # not retried behind gaffer's back
