"""Pull requests: a merged or closed gaffer PR ends its plan; anyone else's PR is ignored."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from bot import memory
from bot.context import Context
from bot.db import Database
from bot.event_router import Router
from bot.github import RepoClient, is_gaffers_pull
from bot.models import AuditEvent, Notice, Plan, PlanState, aware, utcnow
from bot.plans import advance, parent_of, parts_all_merged, wake_waiting
from bot.queue import CLEANUP, RUN_JOB
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
        if pull.get("merged"):
            _hear_revert(ctx, payload)
        return
    event = Event.PR_MERGED if pull.get("merged") else Event.PR_CLOSED
    sender = (payload.get("sender") or {}).get("login", "unknown")
    if advance(ctx.session, plan, event, actor=sender):
        ctx.publish_status(plan.installation_id, repo["full_name"], plan.id)
        ctx.enqueue(CLEANUP, plan_id=plan.id)
        if event == Event.PR_MERGED:
            _finish_parent(ctx, plan, repo["full_name"])
            # Parts that wait for this one to merge (or for its parent, before it had a plan).
            parent = parent_of(ctx.session, plan)
            for job_id in wake_waiting(ctx.session, [plan.id, *([parent] if parent else [])]):
                ctx.enqueue(RUN_JOB, job_id=job_id)


def _finish_parent(ctx: Context, part: Plan, full_name: str) -> None:
    """The last part of a split plan merged: the parent is done, and its issue closes (and
    so on up, when the parent was itself a part)."""
    parent_id = parent_of(ctx.session, part)
    if parent_id is None:
        return
    # Two parts merging at once: the second to lock the parent sees the first one merged.
    ctx.session.execute(select(Plan.id).where(Plan.id == parent_id).with_for_update())
    parent = ctx.session.get_one(Plan, parent_id, populate_existing=True)
    merged = parts_all_merged(ctx.session, parent_id)
    if merged is None or not advance(ctx.session, parent, Event.PARTS_MERGED, actor="gaffer"):
        return
    ctx.publish_status(parent.installation_id, full_name, parent.id)
    client = ctx.github(parent.installation_id, full_name)
    listed = ", ".join(f"#{number}" for number in merged)
    number = parent.issue_number
    ctx.after_commit(lambda: client.reply(number, f"Every part was merged ({listed}): closing."))
    ctx.after_commit(lambda: client.close_issue(number))
    _finish_parent(ctx, parent, full_name)


# The body GitHub's "Revert" button writes: "Reverts owner/repo#12".
_REVERTS = re.compile(r"^Reverts (?P<repo>[\w.-]+/[\w.-]+)#(?P<number>\d+)", re.MULTILINE)
REVERT_WITHIN = timedelta(days=7)


def _hear_revert(ctx: Context, payload: dict[str, Any]) -> None:
    """A merged revert of gaffer's pull request within REVERT_WITHIN of its merge is a
    lesson its plan proposes; whoever merged the revert could write, so is heard."""
    pull, repo = payload["pull_request"], payload["repository"]
    found = _REVERTS.search(pull.get("body") or "")
    if found is None or found["repo"].lower() != repo["full_name"].lower():
        return
    reverted = ctx.session.scalars(
        select(Plan).where(
            Plan.repository_id == repo["id"],
            Plan.pr_number == int(found["number"]),
            Plan.state == PlanState.MERGED,
        )
    ).one_or_none()
    if reverted is None:
        return
    merged_at = ctx.session.scalar(
        select(func.max(AuditEvent.created_at)).where(
            AuditEvent.plan_id == reverted.id, AuditEvent.action == Event.PR_MERGED.value
        )
    )
    if merged_at is None or utcnow() - aware(merged_at) > REVERT_WITHIN:
        return
    why = _REVERTS.sub("", pull.get("body") or "").strip()
    memory.hear(
        ctx.session,
        reverted,
        kind="revert",
        text=f"PR #{reverted.pr_number} was reverted by #{pull['number']} "
        f"“{pull.get('title') or ''}”" + (f": {why}" if why else "."),
        author=(payload.get("sender") or {}).get("login", "unknown"),
        origin=f"revert:{pull['id']}",
        source_url=pull.get("html_url"),
        revision=reverted.approved_revision,
        diff_sha=reverted.head_sha,
    )
    ctx.publish_status(reverted.installation_id, repo["full_name"], reverted.id)


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
