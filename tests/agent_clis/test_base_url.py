"""Each shipped CLI finds its model where the operator's `base_url` setting says.

The worker's environment holds the agent's key and no endpoint: the model server's URL is
given only as `base_url` in the server settings, which each definition maps to its CLI's
own way (an env name, and for Codex its config setting).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.isolation.sandbox import Sandbox
from tests.agent_clis.conftest import attempted, only_the_model_server, run_cli
from tests.model_server import Text, model_server

# agent: (model, its key, the path after the server's address its API starts at)
CLIS = {
    "claude": ("claude-sonnet-4-5", {"ANTHROPIC_API_KEY": "sk-ant-test"}, ""),
    "codex": ("gpt-5", {"OPENAI_API_KEY": "sk-test"}, "/v1"),
    "gemini": ("gemini-2.5-pro", {"GEMINI_API_KEY": "test-key"}, ""),
    "aider": ("openai/gpt-4.1", {"OPENAI_API_KEY": "sk-test"}, "/v1"),
    "opencode": ("anthropic/claude-sonnet-4-5", {"ANTHROPIC_API_KEY": "sk-ant-test"}, "/v1"),
}


@pytest.mark.parametrize("agent", list(CLIS))
def test_the_operators_base_url_is_where_the_agent_asks(
    agent: str, worktree: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    model, key, api = CLIS[agent]
    with model_server([Text("1. Add hello.py.")]) as server:
        settings = {agent: {"base_url": server.url + api}}
        result = run_cli(
            agent,
            key,
            worktree,
            tmp_path / "job",
            sandbox,
            model=model,
            stage="plan",
            settings=settings,
        )
    assert result.ok, result.error
    assert result.text.strip().endswith("1. Add hello.py.")
    assert attempted(tmp_path / "job", "allowed") == only_the_model_server(server)
