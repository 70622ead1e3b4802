"""The agents a plan may choose: the shipped definitions and the server's own."""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

AGENTS_FILE = Path(__file__).resolve().parent.parent / "config" / "agents.yml"
# Keys whose entries a settings file adds to a shipped agent's, name by name.
MERGED_BY_NAME = ("set_env", "home_files", "env_args")


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
    # Read, not validated: tasks/agents/definitions.py refuses a malformed one when it is used.
    shipped = shipped_definitions()
    extra = server_config.get("agents") or {}
    return merge_definitions(shipped, extra if isinstance(extra, Mapping) else {})


def shipped_definitions(path: Path = AGENTS_FILE) -> Any:
    """Return a copy of path's agent definitions, parsed once while the file is unchanged."""
    stat = path.stat()
    return copy.deepcopy(_parsed(path, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=8)
def _parsed(path: Path, _mtime_ns: int, _size: int) -> Any:
    return yaml.safe_load(path.read_text()) or {}


def merge_definitions(shipped: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Lay the server settings' agents over the shipped ones.

    An entry with a `command` replaces the shipped agent of its name whole; one without
    changes only the keys it gives (`base_url:`, `memory_mb:`, ...), and adds to the
    shipped `set_env:`, `home_files:` and `env_args:` name by name.
    """
    merged = dict(shipped)
    for name, raw in extra.items():
        amends = isinstance(raw, Mapping) and "command" not in raw and name in shipped
        merged[name] = _amended(shipped[name], raw) if amends else raw
    return merged


def _amended(shipped: Mapping[str, Any], change: Mapping[str, Any]) -> dict[str, Any]:
    amended = {**shipped, **change}
    for key in MERGED_BY_NAME:
        if isinstance(shipped.get(key), Mapping) and isinstance(change.get(key), Mapping):
            amended[key] = {**shipped[key], **change[key]}
    return amended
