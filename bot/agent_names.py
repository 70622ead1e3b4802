"""The agents a plan may choose: the shipped definitions and the server's own."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

AGENTS_FILE = Path(__file__).resolve().parent.parent / "config" / "agents.yml"


def agent_names(server_config: Mapping[str, Any]) -> list[str]:
    """List the configured agent names, shipped ones first."""
    shipped = yaml.safe_load(AGENTS_FILE.read_text()) or {}
    extra = server_config.get("agents") or {}
    return list(dict.fromkeys([*shipped, *extra]))
