"""Fixtures the unit tests of the database-backed rules share."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.db import Database
from bot.models import Job, JobState, Plan, Repository, utcnow


@pytest.fixture
def db(settings):
    database = Database(settings.database_url)
    yield database
    database.dispose()


@pytest.fixture
def jobs(db: Database) -> list[int]:
    """Four running jobs with live leases, of one plan."""
    with db.session() as session:
        session.add(Repository(id=1, full_name="octo/widgets"))
        plan = Plan(
            repository_id=1,
            installation_id=1,
            issue_number=1,
            issue_title="t",
            issue_author="a",
            clone_url="/x",
        )
        session.add(plan)
        session.flush()
        made = [
            Job(
                plan_id=plan.id,
                stage="plan",
                key=f"plan:{n}",
                state=JobState.RUNNING,
                lease_expires_at=utcnow() + timedelta(minutes=1),
            )
            for n in range(4)
        ]
        session.add_all(made)
        session.flush()
        return [job.id for job in made]
