"""app.yml subscribes to what gaffer handles, and gaffer handles what app.yml subscribes to."""

from __future__ import annotations

from pathlib import Path

import yaml

from bot.handlers.routes import ROUTER
from bot.jam.report import JAM_CREATED
from double.app import APP_EVENTS

APP_YML = Path(__file__).resolve().parents[2] / "app.yml"
# Sent to every GitHub App whatever it subscribes to; jam.dev's events come on their own hook.
ALWAYS_SENT = {"installation", "installation_repositories"}


def subscribed() -> set[str]:
    return set(yaml.safe_load(APP_YML.read_text())["default_events"])


def test_every_subscribed_event_has_a_handler_and_every_handled_event_is_subscribed() -> None:
    assert ROUTER.events() - ALWAYS_SENT - {JAM_CREATED} == subscribed()


def test_the_double_sends_what_app_yml_subscribes_to() -> None:
    assert set(APP_EVENTS) == subscribed()
