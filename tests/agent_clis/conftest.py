"""What every real-CLI test needs: the pinned CLIs, a sandbox that shows them, a worktree."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bot.settings import Settings
from tasks.agents.definitions import AgentResult, load_agents, run_agent
from tasks.isolation.sandbox import Sandbox
from tests.model_server import ModelServer, Reply, Text, ToolCall

# Installed by `make test`: the npm CLIs in node_modules, aider in a virtualenv of its own.
CLIS = Path(__file__).resolve().parent.parent / "agents"
CLI_PATH = f"{CLIS / 'node_modules' / '.bin'}:{CLIS / 'aider' / 'bin'}"


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    """The worker's sandbox, with the pinned CLIs readable inside it."""
    settings = Settings.from_env({"WEBHOOK_SECRET": "s", "GAFFER_HOME": str(tmp_path / "home")})
    shown = {"sandbox": {"read_only": [str(CLIS)]}}
    return Sandbox.from_settings(dataclasses.replace(settings, server_config=shown), {})


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    path = tmp_path / "worktree"
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "README.md").write_text("# widgets\n")
    return path


def run_cli(
    agent: str,
    env: dict[str, str],
    worktree: Path,
    job_dir: Path,
    sandbox: Sandbox,
    *,
    model: str,
    stage: str = "execute",
    prompt: str = "Add hello.py.",
    budget: Decimal | None = None,
    settings: dict[str, Any] | None = None,
) -> AgentResult:
    """Run a shipped agent as gaffer's stage runner does, with the pinned CLIs on PATH
    (settings: the server settings' `agents:`)."""
    return run_agent(
        load_agents(settings)[agent],
        stage=stage,
        prompt=prompt,
        workdir=worktree,
        job_dir=job_dir,
        model=model,
        timeout_s=120,
        idle_timeout_s=60,
        source_env={"PATH": f"{CLI_PATH}:{os.environ['PATH']}", **env},
        spend_limit_usd=budget,
        sandbox=sandbox,
    )


def models_asked(server: ModelServer) -> set[str]:
    return {r["body"].get("model") for r in server.requests if r.get("body")}


def attempted(job_dir: Path, verdict: str = "") -> set[str]:
    """Return every host:port the run tried to reach (its egress log), or those with one
    verdict (`allowed`, `refused`)."""
    log = job_dir / "egress.log"
    lines = log.read_text().split("\n") if log.exists() else []
    return {
        line.split()[1].rstrip(":") for line in lines if line.strip() and line.startswith(verdict)
    }


def only_the_model_server(server: ModelServer) -> set[str]:
    return {server.url.removeprefix("http://")}


def shell_edit(tool: str, argument: str = "command", **extra: str) -> list[Reply]:
    """Replies in which the model runs its CLI's shell tool to write hello.py, then answers."""
    arguments = {argument: "printf 'print(1)\\n' > hello.py", **extra}
    return [
        ToolCall(tool, arguments, input_tokens=900, output_tokens=30),
        Text("Added hello.py.", input_tokens=1100, output_tokens=40),
    ]
