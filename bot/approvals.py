"""The rule for approving a plan's diff, one copy for the `/approve-diff` command and for the
job that opens the pull request, which asks again before it acts."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.models import CheckResult, Plan, PlanState
from bot.repo_config import BUILT_IN_CHECKS, RepoConfig


def diff_rule_problem(
    session: Session, plan: Plan, config: RepoConfig, approver: str
) -> str | None:
    """Say why approver may not approve the plan's diff now, or None when they may."""
    if plan.state != PlanState.IN_REVIEW or not plan.head_sha:
        return (
            f"The diff is not ready for approval: the plan is `{plan.state.value}`. "
            "`/approve-diff` applies once the checks have run and the plan is `in_review`."
        )
    if config.require_green and not checks_green(session, plan):
        return "The checks on the head are not all green, and `require_green` is on."
    if approver.lower() == plan.issue_author.lower() and not config.allow_self_approval:
        return "The issue's author may not approve its diff (`allow_self_approval` is off)."
    return None


def checks_green(session: Session, plan: Plan) -> bool:
    """Tell whether every check on the plan's head succeeded (the diff check may be neutral)."""
    results = session.scalars(
        select(CheckResult).where(
            CheckResult.plan_id == plan.id, CheckResult.head_sha == plan.head_sha
        )
    ).all()
    return bool(results) and all(
        r.conclusion == "success" or (r.name in BUILT_IN_CHECKS and r.conclusion == "neutral")
        for r in results
    )
