"""Pull requests: a merged or closed gaffer PR ends its plan."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from bot.context import Context
from bot.models import Plan
from bot.plans import advance
from bot.queue import CLEANUP
from bot.router import Router
from bot.states import Event

router = Router()


@router.register("pull_request", "closed")
def pull_request_closed(ctx: Context, payload: dict[str, Any]) -> None:
    """Move the PR's plan to merged or closed, and clean up after it."""
    pull, repo = payload["pull_request"], payload["repository"]
    plan = ctx.session.scalars(
        select(Plan).where(Plan.repository_id == repo["id"], Plan.pr_number == pull["number"])
    ).one_or_none()
    if plan is None:
        return
    event = Event.PR_MERGED if pull.get("merged") else Event.PR_CLOSED
    sender = (payload.get("sender") or {}).get("login", "unknown")
    if advance(ctx.session, plan, event, actor=sender):
        ctx.publish_status(plan.installation_id, repo["full_name"], plan.id)
        ctx.enqueue(CLEANUP, plan_id=plan.id)
