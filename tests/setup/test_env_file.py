"""`gaffer` reads `.env` from the directory it starts in; the environment's values win."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def gaffer_cost(cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    kept = {k: v for k, v in os.environ.items() if k not in {"GAFFER_LOG_FORMAT", "GAFFER_HOME"}}
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", "cost"],
        cwd=cwd,
        env={**kept, "PYTHONPATH": str(ROOT), "GAFFER_HOME": str(cwd / "home"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("environment", "read"),
    [
        pytest.param({}, "from-the-file", id="a value only in .env is read"),
        pytest.param(
            {"GAFFER_LOG_FORMAT": "from-the-shell"},
            "from-the-shell",
            id="a value the environment sets wins over .env",
        ),
    ],
)
def test_gaffer_reads_env_from_its_directory(
    tmp_path: Path, environment: dict[str, str], read: str
) -> None:
    (tmp_path / ".env").write_text("GAFFER_LOG_FORMAT=from-the-file\n")
    refused = gaffer_cost(tmp_path, **environment)
    assert refused.returncode == 2
    assert refused.stderr.strip() == f"gaffer: GAFFER_LOG_FORMAT must be text or json, not {read!r}"
