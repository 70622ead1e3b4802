"""Agents that print what real CLIs print, defined in the server settings file."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import write_server_config

FAKES = Path(__file__).resolve().parents[1] / "fixtures" / "fake_agents"


@pytest.fixture
def server_config(tmp_path: Path) -> Path:
    agents = {
        name: {
            "command": ["{python}", str(FAKES / f"{script}.py"), "{prompt_file}"],
            "output": output,
        }
        for name, script, output in [
            ("claude-like", "claude_like", "claude-json"),
            ("codex-like", "codex_like", "codex-jsonl"),
            ("streaming-claude", "streaming_claude", "claude-json"),
        ]
    }
    agents["quota-hit"] = {
        "command": [
            "{python}",
            str(FAKES / "replay.py"),
            str(FAKES.parent / "agents" / "claude-usage-limit.json"),
            "1",
        ],
        "output": "claude-json",
    }
    # The fake CLIs live in the source tree, outside the sandbox's toolchain.
    return write_server_config(tmp_path / "gaffer-server.yml", agents, [FAKES.parent])
