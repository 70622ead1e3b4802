"""The agents a plan may choose: the shipped definitions and the server's own."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

AGENTS_FILE = Path(__file__).resolve().parent.parent / "config" / "agents.yml"


def agent_names(server_config: Mapping[str, Any]) -> list[str]:
    """List the configured agent names, shipped ones first."""
    return list(_definitions(server_config))


def agent_env_names(server_config: Mapping[str, Any]) -> list[str]:
    """List the environment names any configured agent may read, once each."""
    names = [
        name
        for definition in _definitions(server_config).values()
        if isinstance(definition, Mapping) and isinstance(definition.get("env"), list)
        for name in definition["env"]
        if isinstance(name, str)
    ]
    return list(dict.fromkeys(names))


def _definitions(server_config: Mapping[str, Any]) -> dict[str, Any]:
    # Read, not validated: tasks/agents.py refuses a malformed definition when it is used.
    # A server's agent replaces a shipped one of the same name whole.
    shipped = yaml.safe_load(AGENTS_FILE.read_text()) or {}
    extra = server_config.get("agents") or {}
    return {**shipped, **(extra if isinstance(extra, Mapping) else {})}
