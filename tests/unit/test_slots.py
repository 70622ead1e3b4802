"""Concurrency limits: which scopes a job counts against, and slots taken once, on the
database every worker shares."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from bot.db import Database
from bot.models import Job, JobState, Plan, Repository, utcnow
from tasks.slots import Scope, give_back, scopes_of, take, where_it_stands

ACCOUNT = "ANTHROPIC_API_KEY:0123456789ab"


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        pytest.param({}, [], id="no limits"),
        pytest.param(
            {"repository": 2},
            [("repository:octo/widgets", "octo/widgets", 2)],
            id="every repository",
        ),
        pytest.param(
            {"repository": 2, "repositories": {"Octo/Widgets": 1}},
            [("repository:octo/widgets", "octo/widgets", 1)],
            id="a repository's own limit wins, whatever its case",
        ),
        pytest.param(
            {"account": 3, "accounts": {"ANTHROPIC_API_KEY": 1}},
            [(f"account:{ACCOUNT}", "ANTHROPIC_API_KEY", 1)],
            id="an account by its key's name",
        ),
        pytest.param({"accounts": {"OPENAI_API_KEY": 1}}, [], id="another key's limit"),
    ],
)
def test_the_scopes_a_job_counts_against(limits, expected) -> None:
    found = scopes_of(limits, "octo/widgets", ACCOUNT)
    assert [(s.key, s.label, s.limit) for s in found] == expected


@pytest.mark.parametrize("limit", [0, "2", True])
def test_a_limit_that_is_not_a_whole_number_above_zero_is_refused(limit) -> None:
    with pytest.raises(ValueError, match="whole number"):
        scopes_of({"repository": limit}, "octo/widgets", None)


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


SCOPE = Scope("repository:octo/widgets", "octo/widgets", 2)


def test_a_full_scope_is_refused_until_a_slot_is_given_back(db: Database, jobs) -> None:
    first, second, third, _ = jobs
    assert take(db, first, [SCOPE]) is None
    assert take(db, second, [SCOPE]) is None
    assert take(db, third, [SCOPE]) == SCOPE
    give_back(db, first)
    assert take(db, third, [SCOPE]) is None


def test_taking_again_keeps_one_slot(db: Database, jobs) -> None:
    first, second, *_ = jobs
    assert take(db, first, [SCOPE]) is None
    assert take(db, first, [SCOPE]) is None  # a task the broker sent twice
    assert take(db, second, [SCOPE]) is None


def test_a_slot_whose_job_lost_its_lease_is_free_again(db: Database, jobs) -> None:
    first, second, third, _ = jobs
    take(db, first, [SCOPE])
    take(db, second, [SCOPE])
    with db.session() as session:  # the first job's worker died
        lapsed = utcnow() - timedelta(seconds=1)
        session.execute(update(Job).where(Job.id == first).values(lease_expires_at=lapsed))
    assert take(db, third, [SCOPE]) is None


def test_a_job_refused_in_one_scope_holds_no_slot_in_another(db: Database, jobs) -> None:
    first, second, *_ = jobs
    narrow = Scope("account:x", "x", 1)
    assert take(db, first, [narrow]) is None
    assert take(db, second, [SCOPE, narrow]) == narrow
    assert take(db, jobs[2], [SCOPE]) is None and take(db, jobs[3], [SCOPE]) is None


def test_a_waiting_job_is_told_its_place_in_line(db: Database, jobs) -> None:
    first, second, third, fourth = jobs
    scope = Scope("repository:octo/widgets", "octo/widgets", 1)
    take(db, first, [scope])
    with db.session() as session:
        waiting = (
            update(Job)
            .where(Job.id.in_([second, third]))
            .values(state=JobState.QUEUED, waiting_on=scope.key)
        )
        session.execute(waiting)
    assert where_it_stands(db, fourth, scope) == "3rd in line for octo/widgets (1 running, limit 1)"
