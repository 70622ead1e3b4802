"""Compose the feature handlers into one router: which event and action goes where."""

from __future__ import annotations

from typing import Any

from bot.context import Context
from bot.event_router import Router
from bot.handlers import checks, comments, installations, issues, jam, pulls

ROUTER = Router()
for _module in (installations, issues, comments, pulls, checks, jam):
    ROUTER.include(_module.router)


def handles(event: str, action: str | None) -> bool:
    """Tell whether any handler wants this event and action."""
    return bool(ROUTER.handlers_for(event, action))


def dispatch(ctx: Context, event: str, payload: dict[str, Any]) -> None:
    """Run every handler registered for the event's name and action."""
    for handler in ROUTER.handlers_for(event, payload.get("action")):
        handler(ctx, payload)
