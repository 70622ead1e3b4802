"""The `gaffer` command's answers to an operator's mistakes: one line, no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from double.driver import wait_for
from tests.support import WebProcess


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


def test_every_bad_setting_is_named_at_once_before_anything_starts(env: dict[str, str]) -> None:
    bare = {key: value for key, value in env.items() if key not in {"APP_ID", "PRIVATE_KEY"}}
    refused = gaffer("run", env={**bare, "GAFFER_PORT": "abc", "GAFFER_LEASE_SECONDS": "1"})
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        "gaffer: 5 settings need fixing:",
        "  - WEBHOOK_SECRET is not set: gaffer refuses to accept unsigned webhooks. Set it to "
        "the App's webhook secret (a comma-separated list while rotating).",
        "  - GAFFER_PORT must be a whole number from 1 to 65535",
        "  - GAFFER_LEASE_SECONDS must be a whole number from 3 to 3600",
        "  - APP_ID is not set: the App's numeric id, from its settings page",
        "  - PRIVATE_KEY_PATH (or PRIVATE_KEY) is not set: the App's private key, the .pem "
        "file GitHub made for it",
    ]
    assert "listening" not in refused.stdout
    assert not (Path(env["GAFFER_HOME"]) / "gaffer.sqlite").exists()  # nothing was started


def test_a_worker_refuses_an_app_key_that_cannot_sign(env: dict[str, str]) -> None:
    worker = subprocess.run(
        [sys.executable, "-m", "tasks.worker", "github"],
        env={**env, "WEBHOOK_SECRET": "s", "APP_ID": "12", "PRIVATE_KEY": "not a key"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert worker.returncode == 2
    assert worker.stderr.strip() == (
        "gaffer worker: the private key (PRIVATE_KEY or PRIVATE_KEY_PATH) is not a PEM RSA "
        "private key: use the .pem file GitHub made for the App"
    )


@pytest.mark.parametrize(
    "moment",
    ["listening on", "agent@"],
    ids=["while-the-parts-start", "once-they-are-up"],
)
def test_ctrl_c_stops_gaffer_run_cleanly(
    env: dict[str, str], tmp_path: Path, private_key, moment: str
) -> None:
    """Ctrl-C in a terminal sends SIGINT to gaffer's process group: whether the parts are
    still importing or already serving, all stop, exit 0, and no traceback is printed."""
    key = tmp_path / "app.pem"
    key.write_text(private_key)
    running = WebProcess.start(
        {**env, "WEBHOOK_SECRET": "s", "APP_ID": "1", "PRIVATE_KEY_PATH": str(key)},
        tmp_path / "run.log",
        command="run",
    )
    wait_for(lambda: moment in running.log_path.read_text(), what=f"{moment!r} in the log")
    os.killpg(running.process.pid, signal.SIGINT)
    assert running.process.wait(timeout=30) == 0
    log = running.log_path.read_text()
    assert "Traceback" not in log
    if moment == "agent@":
        assert "Shutting down: Master" in log  # the web front stopped on its own, not killed
