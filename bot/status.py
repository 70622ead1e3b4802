"""Keep the issue's status comment and state label in step with the database."""

from __future__ import annotations

from sqlalchemy import select, update

from bot.db import Database
from bot.github import RepoClient
from bot.models import Plan, PlanRevision
from bot.render import status_comment


def publish_status(db: Database, client: RepoClient, plan_id: int) -> None:
    """Render the plan as it stands and make the issue show it."""
    with db.session() as session:
        plan = session.get_one(Plan, plan_id)
        text = session.scalar(
            select(PlanRevision.body).where(
                PlanRevision.plan_id == plan_id, PlanRevision.number == plan.current_revision
            )
        )
        body = status_comment(plan, text)
        known_id, number, state = plan.status_comment_id, plan.issue_number, plan.state
    comment_id = client.upsert_status(number, body, known_id)
    if comment_id != known_id:
        with db.session() as session:
            session.execute(
                update(Plan).where(Plan.id == plan_id).values(status_comment_id=comment_id)
            )
    client.set_state_label(number, state.value)
