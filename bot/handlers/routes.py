"""Compose the feature handlers into one router: which event and action goes where."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.context import Asker, Context, Facts
from bot.event_router import Router
from bot.handlers import checks, comments, installations, issues, jam, pulls, reviews
from bot.jam.report import JAM_CREATED

ROUTER = Router()
for _module in (installations, issues, comments, pulls, reviews, checks, jam):
    ROUTER.include(_module.router)


# What each event's handlers need from GitHub, asked before the delivery's transaction.
GATHER: dict[str, Callable[[dict[str, Any], Asker], Facts]] = {
    "issues": issues.gather,
    "issue_comment": comments.gather,
    "pull_request_review": reviews.gather,
    "pull_request_review_comment": reviews.gather,
    JAM_CREATED: jam.gather,
}


def gather(event: str, payload: dict[str, Any], ask: Asker) -> Facts:
    """Ask GitHub what the event's handlers will need; call it with no transaction open."""
    asks = GATHER.get(event)
    return asks(payload, ask) if asks else Facts()


def handles(event: str, action: str | None) -> bool:
    """Tell whether any handler wants this event and action."""
    return bool(ROUTER.handlers_for(event, action))


def dispatch(ctx: Context, event: str, payload: dict[str, Any]) -> None:
    """Run every handler registered for the event's name and action."""
    for handler in ROUTER.handlers_for(event, payload.get("action")):
        handler(ctx, payload)
