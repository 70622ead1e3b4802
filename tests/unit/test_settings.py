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
