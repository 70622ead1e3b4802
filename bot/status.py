"""Keep the issue's status comment and state label in step with the database."""

from __future__ import annotations

from sqlalchemy import select, update

from bot.costs import plan_spend
from bot.db import Database
from bot.github import RepoClient
from bot.models import CheckResult, Plan, PlanRevision
from bot.render import Verification, status_comment


def publish_status(db: Database, client: RepoClient, plan_id: int, rounds: int = 3) -> None:
    """Render the plan as it stands and make the issue show it."""
    with db.session() as session:
        plan = session.get_one(Plan, plan_id)
        text = session.scalar(
            select(PlanRevision.body).where(
                PlanRevision.plan_id == plan_id, PlanRevision.number == plan.current_revision
            )
        )
        checks = session.scalars(
            select(CheckResult)
            .where(CheckResult.plan_id == plan_id, CheckResult.head_sha == plan.head_sha)
            .order_by(CheckResult.id)
        ).all()
        spend = plan_spend(session, plan_id)
        body = status_comment(plan, text, _verification(client, plan, list(checks)), spend)
        known_id, number, state = plan.status_comment_id, plan.issue_number, plan.state
    if known_id is None:
        _create_once(db, client, plan_id, number, body)
    elif (comment_id := client.upsert_status(number, body, known_id)) != known_id:
        # Someone deleted the comment, and it was posted again.
        with db.session() as session:
            session.execute(
                update(Plan).where(Plan.id == plan_id).values(status_comment_id=comment_id)
            )
    client.set_state_label(number, state.value)
    # A transition that committed while this was written would leave the issue showing
    # the older state (this writer's label landing last): show the newer one.
    with db.session() as session:
        moved = session.get_one(Plan, plan_id, populate_existing=True).state != state
    if moved and rounds > 1:
        publish_status(db, client, plan_id, rounds - 1)


def _create_once(db: Database, client: RepoClient, plan_id: int, number: int, body: str) -> None:
    # Two workers publishing a new plan's first status would each look, find nothing and
    # post. A no-op write locks the plan's row (the whole database on SQLite) until commit,
    # so the second waits, then reads the first one's comment id and edits it.
    with db.session() as session:
        session.execute(update(Plan).where(Plan.id == plan_id).values(version=Plan.version))
        plan = session.get_one(Plan, plan_id, populate_existing=True)
        plan.status_comment_id = client.upsert_status(number, body, plan.status_comment_id)


def _verification(client: RepoClient, plan: Plan, checks: list[CheckResult]) -> Verification | None:
    if not plan.head_sha:
        return None
    web = str(client.repo.html_url)
    compare = f"{web}/compare/{plan.base_sha}...{plan.head_sha}" if plan.base_sha else None
    pr = f"{web}/pull/{plan.pr_number}" if plan.pr_number else None
    return Verification(checks, compare, pr)
