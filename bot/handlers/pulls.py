"""Pull requests: a merged or closed gaffer PR ends its plan; anyone else's PR is ignored."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from bot.context import Context
from bot.db import Database
from bot.event_router import Router
from bot.github import RepoClient, is_gaffers_pull
from bot.models import Notice, Plan
from bot.plans import advance
from bot.queue import CLEANUP
from bot.render import foreign_pull_note
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


@router.register("pull_request", "opened")
@router.register("pull_request", "reopened")
@router.register("pull_request", "edited")
def pull_request_on_plan_branch(ctx: Context, payload: dict[str, Any]) -> None:
    """Note once on the issue that a PR from a plan's branch, not gaffer's own, is ignored."""
    pull, repo = payload["pull_request"], payload["repository"]
    head_ref = (pull.get("head") or {}).get("ref")
    plan = ctx.session.scalars(
        select(Plan).where(
            Plan.repository_id == repo["id"],
            Plan.branch == head_ref,
            Plan.active_key.is_not(None),
        )
    ).one_or_none()
    if plan is None or plan.pr_number == pull["number"]:
        return
    client = ctx.github(payload["installation"]["id"], repo["full_name"])
    plan_id, issue_number = plan.id, plan.issue_number
    base = repo.get("default_branch") or ""
    ctx.after_commit(
        lambda: _note_foreign_pull(ctx.db, client, plan_id, issue_number, pull, repo["id"], base)
    )


def _note_foreign_pull(
    db: Database,
    client: RepoClient,
    plan_id: int,
    issue_number: int,
    pull: dict[str, Any],
    repo_id: int,
    base: str,
) -> None:
    # Asked after the commit: knowing gaffer's bot may take a call to GitHub.
    branch = pull["head"]["ref"]
    ours = is_gaffers_pull(
        pull, bot_login=client.bot_login(), repo_id=repo_id, branch=branch, base=base
    )
    if ours or not _first_notice(db, plan_id, f"pull:{pull['number']}"):
        return
    author = (pull.get("user") or {}).get("login", "unknown")
    head_label = pull["head"].get("label") or branch
    note = foreign_pull_note(pull["number"], author, head_label, pull["base"]["ref"])
    client.reply(issue_number, note)


def _first_notice(db: Database, plan_id: int, key: str) -> bool:
    """Record a notice for the plan; False when it was recorded before (by any event)."""
    try:
        with db.session() as session:
            session.add(Notice(plan_id=plan_id, key=key))
    except IntegrityError:
        return False
    return True
