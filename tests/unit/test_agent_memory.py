"""An agent's memory limit: read from its definition, applied to its run, named when it fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tasks.agents.definitions import AgentConfigError, load_agents, parse_agent, run_agent

COMMAND = ["{python}", "-c", "x = bytearray(400 * 1024 * 1024); print('allocated')"]
SERVER_DEFAULT_MB = 4096


@pytest.mark.parametrize(
    ("definition", "limit_mb"),
    [
        pytest.param({}, SERVER_DEFAULT_MB, id="left out: the server's default"),
        pytest.param({"memory_mb": 512}, 512, id="a number of MB"),
        pytest.param({"memory_mb": None}, None, id="null: no limit"),
    ],
)
def test_an_agents_memory_limit_comes_from_its_definition(definition, limit_mb):
    spec = parse_agent("hog", {"command": COMMAND, **definition})
    assert spec.memory_limit_mb(SERVER_DEFAULT_MB) == limit_mb


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(0, id="zero"),
        pytest.param(-1, id="negative"),
        pytest.param("4G", id="text"),
        pytest.param(True, id="a boolean"),
        pytest.param(1.5, id="a fraction"),
    ],
)
def test_a_bad_memory_limit_is_refused_with_its_agents_name(value):
    with pytest.raises(AgentConfigError, match="agent 'hog': `memory_mb` must be a positive"):
        parse_agent("hog", {"command": COMMAND, "memory_mb": value})


def test_the_shipped_agents_take_the_servers_default():
    limits = {spec.memory_limit_mb(SERVER_DEFAULT_MB) for spec in load_agents().values()}
    assert limits == {SERVER_DEFAULT_MB}


def run_hog(tmp_path: Path, memory_mb: int | None):
    workdir = tmp_path / "worktree"
    workdir.mkdir()
    return run_agent(
        parse_agent("hog", {"command": COMMAND}),
        stage="execute",
        prompt="use a lot of memory",
        workdir=workdir,
        job_dir=tmp_path / "job",
        model=None,
        timeout_s=30,
        idle_timeout_s=None,
        source_env={"PATH": os.environ["PATH"]},
        memory_mb=memory_mb,
    )


def test_an_agent_over_its_memory_limit_fails_saying_so(tmp_path):
    result = run_hog(tmp_path, memory_mb=100)
    assert not result.ok
    assert result.error is not None
    assert result.error.startswith(
        "agent 'hog' ran out of memory (its limit is 100 MB) and exited with code 1"
    )
    assert "MemoryError" in result.error


def test_an_agent_without_a_limit_may_use_what_it_needs(tmp_path):
    result = run_hog(tmp_path, memory_mb=None)
    assert result.ok, result.error
    assert result.text.strip() == "allocated"
