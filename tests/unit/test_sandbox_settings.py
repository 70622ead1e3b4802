"""The server's `sandbox:` setting and the egress an agent's definition allows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.agents.definitions import AgentConfigError, egress_of, parse_agent
from tasks.isolation.sandbox import SandboxConfig, SandboxConfigError


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(None, SandboxConfig(), id="left out: the sandbox with its defaults"),
        pytest.param("none", SandboxConfig(enabled=False), id="none: no isolation"),
        pytest.param(
            {"uid": 62000, "read_only": ["/opt/node"], "pids": 100},
            SandboxConfig(uid=62000, gid=62000, read_only=(Path("/opt/node"),), pids=100),
            id="a uid of its own, its group the same unless given",
        ),
        pytest.param({"cpu_s": None}, SandboxConfig(cpu_s=None), id="null lifts a limit"),
    ],
)
def test_the_sandbox_setting_reads(raw, expected: SandboxConfig) -> None:
    assert SandboxConfig.from_setting(raw) == expected


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        pytest.param("off", "sandbox must be `none` or a mapping", id="a word other than none"),
        pytest.param({"uid": 0}, "sandbox.uid must be a positive", id="root as the sandbox uid"),
        pytest.param({"pids": "many"}, "sandbox.pids must be", id="a count that is not one"),
        pytest.param({"read_only": "/opt"}, "must be a list of paths", id="one path, not a list"),
        pytest.param({"network": "all"}, "unknown keys network", id="an unknown key"),
    ],
)
def test_a_bad_sandbox_setting_is_refused_saying_why(raw, says: str) -> None:
    with pytest.raises(SandboxConfigError, match=says):
        SandboxConfig.from_setting(raw)


def test_an_agent_with_a_malformed_egress_host_is_refused() -> None:
    with pytest.raises(AgentConfigError, match="agent 'x': `egress`"):
        parse_agent("x", {"command": ["x"], "egress": ["api.example.com:https"]})


def test_an_agent_reaches_its_listed_hosts_and_the_endpoint_its_env_names() -> None:
    spec = parse_agent("x", {"command": ["x"], "egress": ["api.anthropic.com"]})
    env = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8081", "ANTHROPIC_API_KEY": "k" * 20}
    assert egress_of(spec, env) == ["api.anthropic.com", "127.0.0.1:8081"]
