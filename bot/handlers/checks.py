"""GitHub's "Re-run" on gaffer's checks: run them again on the commit under review."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import select

from bot.context import Context
from bot.event_router import Router
from bot.models import Plan, PlanState, Stage
from bot.plans import add_job
from bot.queue import RUN_JOB

router = Router()

# gaffer's check runs carry `gaffer-<plan id>-<check>-<sha>` (tasks/checks/checkruns.py).
_OURS = re.compile(r"^gaffer-(?P<plan>\d+)-")


@router.register("check_run", "rerequested")
def check_run_rerequested(ctx: Context, payload: dict[str, Any]) -> None:
    """Re-run the plan's checks when someone asks to re-run one of gaffer's check runs."""
    run = payload["check_run"]
    ours = _OURS.match(str(run.get("external_id") or ""))
    if ours is not None and _by_gaffer(ctx, run):
        plan = ctx.session.get(Plan, int(ours["plan"]))
        _recheck(ctx, payload, plan, str(run.get("head_sha") or ""))


@router.register("check_suite", "rerequested")
def check_suite_rerequested(ctx: Context, payload: dict[str, Any]) -> None:
    """Re-run the plan's checks when someone asks to re-run gaffer's whole check suite."""
    suite, repo = payload["check_suite"], payload["repository"]
    if not _by_gaffer(ctx, suite):
        return  # another App's suite on the same commit
    head_sha = str(suite.get("head_sha") or "")
    plan = ctx.session.scalars(
        select(Plan)
        .where(Plan.repository_id == repo["id"], Plan.head_sha == head_sha)
        .order_by(Plan.id.desc())
    ).first()
    _recheck(ctx, payload, plan, head_sha)


def _by_gaffer(ctx: Context, made: dict[str, Any]) -> bool:
    """Tell whether a check run or suite is this App's (one naming no App is taken as such)."""
    app = (made.get("app") or {}).get("id")
    return app is None or ctx.settings.app_id is None or str(app) == str(ctx.settings.app_id)


def _recheck(ctx: Context, payload: dict[str, Any], plan: Plan | None, head_sha: str) -> None:
    repo = payload["repository"]
    if plan is None or plan.repository_id != repo["id"] or plan.head_sha != head_sha:
        return  # not a commit gaffer is checking: another App's suite, or an older push
    if plan.state != PlanState.IN_REVIEW:
        sender = (payload.get("sender") or {}).get("login", "someone")
        client = ctx.github(payload["installation"]["id"], repo["full_name"])
        reply = (
            f"@{sender} asked to re-run gaffer's checks on `{head_sha[:12]}`, but they run "
            f"again only while the plan is `in_review`; it is `{plan.state.value}`."
        )
        issue_number = plan.issue_number
        ctx.after_commit(lambda: client.reply(issue_number, reply))
        return
    # Keyed by the delivery: each click runs the checks once, however often GitHub sends it.
    job = add_job(ctx.session, plan, Stage.RECHECK, f"recheck-{ctx.delivery}")
    if job is not None:
        ctx.session.flush()
        ctx.enqueue(RUN_JOB, job_id=job.id)
