"""Settings read from the environment: defaults, and a refusal that says what to fix."""

from __future__ import annotations

import pytest

from bot.settings import Settings, SettingsError
from tasks.recovery.machine import reap_every_s

BASE = {"WEBHOOK_SECRET": "s3cret", "GAFFER_HOME": "/tmp/gaffer-settings-test"}


def test_the_lease_defaults_to_a_minute_and_can_be_set() -> None:
    assert Settings.from_env(BASE).lease_seconds == 60
    assert Settings.from_env({**BASE, "GAFFER_LEASE_SECONDS": "15"}).lease_seconds == 15


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("2", id="a lease under three seconds is refused"),
        pytest.param("3601", id="a lease over an hour is refused"),
        pytest.param("ten", id="a lease that is not a number is refused"),
        pytest.param("-5", id="a negative lease is refused"),
    ],
)
def test_a_bad_lease_stops_gaffer_from_starting(raw: str) -> None:
    with pytest.raises(SettingsError, match="GAFFER_LEASE_SECONDS"):
        Settings.from_env({**BASE, "GAFFER_LEASE_SECONDS": raw})


@pytest.mark.parametrize(
    ("raw", "every_s"),
    [
        pytest.param(300, 300.0, id="reaping every 300 seconds"),
        pytest.param(0.5, 0.5, id="reaping every half second"),
        pytest.param(None, None, id="null turns the machine's reaper off"),
    ],
)
def test_the_machine_reaper_interval_is_read(raw, every_s) -> None:
    assert reap_every_s(raw) == every_s


@pytest.mark.parametrize("raw", [0, -1, "often", True])
def test_a_bad_reaper_interval_is_refused(raw) -> None:
    with pytest.raises(ValueError, match="reap_every_s"):
        reap_every_s(raw)


@pytest.mark.parametrize(
    ("limits", "why"),
    [
        pytest.param("{repository: 0}", "limits.repository must be a whole number", id="zero"),
        pytest.param("{account: two}", "limits.account must be a whole number", id="words"),
        pytest.param(
            "{repositories: 2}", "limits.repositories must be a mapping", id="not by name"
        ),
        pytest.param("{accounts: {K: -1}}", "limits.accounts must be a mapping", id="a bad one"),
        pytest.param("{machines: 2}", "limits may set only", id="an unknown limit"),
    ],
)
def test_a_bad_concurrency_limit_stops_gaffer_from_starting(tmp_path, limits, why) -> None:
    config = tmp_path / "gaffer.yml"
    config.write_text(f"limits: {limits}\n")
    with pytest.raises(SettingsError, match=why):
        Settings.from_env({**BASE, "GAFFER_CONFIG": str(config)})


def test_concurrency_limits_are_read(tmp_path) -> None:
    config = tmp_path / "gaffer.yml"
    config.write_text("limits: {repository: 2, accounts: {ANTHROPIC_API_KEY: 1}}\n")
    read = Settings.from_env({**BASE, "GAFFER_CONFIG": str(config)}).server_config["limits"]
    assert read == {"repository": 2, "accounts": {"ANTHROPIC_API_KEY": 1}}
