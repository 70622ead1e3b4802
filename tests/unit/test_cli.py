"""The `gaffer` command's answers to an operator's mistakes: one line, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def gaffer(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A shell with a fresh gaffer home, no servers and no WEBHOOK_SECRET."""
    unset = {"WEBHOOK_SECRET", "DATABASE_URL", "BROKER_URL", "GAFFER_CONFIG", "GAFFER_PORT"}
    kept = {name: value for name, value in os.environ.items() if name not in unset}
    return {**kept, "GAFFER_HOME": str(tmp_path / "home")}


def test_gaffer_cost_needs_no_webhook_secret_and_asks_for_the_migration_first(
    env: dict[str, str],
) -> None:
    before = gaffer("cost", env=env)
    assert before.returncode == 1
    assert "has no gaffer tables yet; run `gaffer db upgrade`" in before.stderr
    assert "Traceback" not in before.stderr
    assert gaffer("db", "upgrade", env=env).returncode == 0
    after = gaffer("cost", env=env)
    assert after.returncode == 0, after.stderr
    assert "By repository" in after.stdout


def test_a_port_that_is_not_a_number_is_refused_in_one_line(env: dict[str, str]) -> None:
    refused = gaffer("web", env={**env, "WEBHOOK_SECRET": "s", "GAFFER_PORT": "abc"})
    assert refused.returncode == 2
    assert refused.stderr.strip() == "gaffer: GAFFER_PORT must be a whole number from 1 to 65535"


def test_serving_webhooks_still_needs_the_secret(env: dict[str, str]) -> None:
    refused = gaffer("web", env=env)
    assert refused.returncode == 2
    assert refused.stderr.startswith("gaffer: WEBHOOK_SECRET is not set")
