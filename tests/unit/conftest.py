"""Fixtures the unit tests of the database-backed rules share."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.db import Database
from bot.models import Job, JobState, utcnow
from tests.support import add_plan


@pytest.fixture
def db(settings):
    database = Database(settings.database_url)
    yield database
    database.dispose()


@pytest.fixture
def jobs(db: Database) -> list[int]:
    """Four running jobs with live leases, of one plan."""
    with db.session() as session:
        plan = add_plan(session)
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
