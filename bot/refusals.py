"""Limit gaffer's replies to one user on one issue: after a few, only a reaction.

A refusal (or an answer to `/help`, `/status`, `/cost`) is a comment on the issue. Anyone
who can comment can send hundreds of commands, and each reply would cost GitHub calls,
notify every watcher and spend gaffer's secondary rate limit. So gaffer replies to at most
REPLIES_PER_WINDOW of one user's commands on one issue within WINDOW; it marks the rest
with the QUIET_REACTION only. A command gaffer acts on is never limited.

The count is read from the command receipts in the database, so it holds across workers;
two workers handling that user's comments at the same instant may each send one more.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from bot.models import CommandReceipt, utcnow

REPLIES_PER_WINDOW = 3
WINDOW = timedelta(minutes=10)
QUIET_REACTION = "confused"


class Outcome(StrEnum):
    """How gaffer answered a command it did not act on (CommandReceipt.outcome)."""

    REFUSED = "refused"  # a reply saying why not
    ANSWERED = "answered"  # a reply to /help, /status or /cost
    QUIETED = "quieted"  # only the QUIET_REACTION: the replies for the window were spent


def may_reply(session: Session, receipt: CommandReceipt, now: datetime | None = None) -> bool:
    """Tell whether gaffer may still reply to the receipt's writer on its issue."""
    since = (now or utcnow()) - WINDOW
    replied = session.scalar(
        select(func.count())
        .select_from(CommandReceipt)
        .where(
            CommandReceipt.repository_id == receipt.repository_id,
            CommandReceipt.issue_number == receipt.issue_number,
            CommandReceipt.actor == receipt.actor,
            CommandReceipt.outcome.in_([Outcome.REFUSED.value, Outcome.ANSWERED.value]),
            CommandReceipt.created_at >= since,
        )
    )
    return (replied or 0) < REPLIES_PER_WINDOW
