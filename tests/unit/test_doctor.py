"""`gaffer doctor` from outside: what passes, and each broken part named with its fix."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bot.db import Database
from bot.heartbeats import RECONCILER, SCHEDULER, record_heartbeat
from bot.settings import Settings
from tests.conftest import APP_ID
from tests.support import WEBHOOK_SECRET


@pytest.fixture
def env(settings: Settings, github_server: str) -> dict[str, str]:
    """A worker's environment on this test's backend, against the GitHub double."""
    return {
        **os.environ,
        "WEBHOOK_SECRET": WEBHOOK_SECRET,
        "GAFFER_DEFAULT_AGENT": "script",
        "GAFFER_HOME": str(settings.home),
        "DATABASE_URL": settings.database_url,
        "BROKER_URL": settings.broker_url,
        "GITHUB_API_URL": github_server,
        "APP_ID": str(APP_ID),
        "PRIVATE_KEY": settings.private_key or "",
    }


def doctor(env: dict[str, str]) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "doctor"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout.splitlines()


def named(lines: list[str]) -> dict[str, str]:
    """Each check's line by the check's name."""
    return {line[5:].split(":", 1)[0]: line for line in lines if line[:4] in ("ok  ", "FAIL")}


def test_a_healthy_gaffer_passes_every_check(env: dict[str, str], settings: Settings) -> None:
    database = Database(settings.database_url)
    record_heartbeat(database, SCHEDULER)
    record_heartbeat(database, RECONCILER)
    database.dispose()
    status, lines = doctor(env)
    assert status == 0, lines
    found = named(lines)
    assert list(found) == [
        "settings",
        "database",
        "broker",
        "github",
        "scheduler",
        "sandbox",
        "agents",
    ]
    assert all(line.startswith("ok  ") for line in found.values())
    assert f"(id {APP_ID})" in found["github"]
    assert f"script ({sys.executable}" in found["agents"]


def test_each_broken_part_is_named_with_its_fix(env: dict[str, str]) -> None:
    broken = {
        **env,
        "BROKER_URL": "redis://127.0.0.1:1/0",
        "APP_ID": str(APP_ID + 1),
        "GAFFER_DEFAULT_AGENT": "claude",
        "PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin",
    }
    status, lines = doctor(broken)
    assert status == 1
    found = named(lines)
    assert found["settings"].startswith("ok  ") and found["database"].startswith("ok  ")
    text = "\n".join(lines)
    assert "FAIL broker: redis://127.0.0.1:1/0 cannot be reached" in text
    assert "fix: start Redis or fix BROKER_URL" in text
    assert f"FAIL github: cannot sign in to {env['GITHUB_API_URL']} as App {APP_ID + 1}" in text
    assert "fix: check that APP_ID and the private key belong to the same App" in text
    assert "FAIL scheduler: scheduler never ran, reconciler never ran" in text
    assert "fix: run exactly one `github` worker with `--beat`" in text
    assert "FAIL agents: the CLI of claude is not on PATH" in text


def test_a_broken_setting_stops_the_examination_there(env: dict[str, str]) -> None:
    status, lines = doctor({**env, "GAFFER_PORT": "abc"})
    assert status == 1
    assert lines == [
        "FAIL settings: GAFFER_PORT must be a whole number from 1 to 65535",
        "      fix: set or correct the values named",
    ]
