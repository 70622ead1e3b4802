"""Concurrency limits: which scopes a job counts against, and slots taken once, on the
database every worker shares."""

from __future__ import annotations

import zlib
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


@pytest.mark.parametrize(
    ("limits", "own", "expected"),
    [
        pytest.param({}, 1, 1, id="the repository's own alone"),
        pytest.param({"repository": 3}, 1, 1, id="the repository's lower own"),
        pytest.param({"repository": 1}, 5, 1, id="the server's lower limit"),
    ],
)
def test_a_repositorys_own_concurrency_counts_when_it_is_the_lower(limits, own, expected) -> None:
    [scope] = scopes_of(limits, "octo/widgets", None, own)
    assert (scope.key, scope.limit) == ("repository:octo/widgets", expected)


@pytest.mark.parametrize("limit", [0, "2", True])
def test_a_limit_that_is_not_a_whole_number_above_zero_is_refused(limit) -> None:
    with pytest.raises(ValueError, match="whole number"):
        scopes_of({"repository": limit}, "octo/widgets", None)


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
            .values(state=JobState.QUEUED, waiting_on=scope.key, parked_until=utcnow())
        )
        session.execute(waiting)
    assert where_it_stands(db, fourth, scope) == "3rd in line for octo/widgets (1 running, limit 1)"


ACCOUNT_SCOPE = Scope(f"account:{ACCOUNT}", "ANTHROPIC_API_KEY", 2)


def job_of(db: Database, repository: str, priority: int | None, *, waiting: bool) -> int:
    """A job of a new plan in the repository: running (just claimed), or waiting in the
    account's line, having looked a moment ago."""
    with db.session() as session:
        repo = session.query(Repository).filter_by(full_name=repository).one_or_none()
        if repo is None:
            repo = Repository(id=zlib.crc32(repository.encode()), full_name=repository)
            session.add(repo)
        plan = Plan(
            repository_id=repo.id,
            installation_id=1,
            issue_number=1,
            issue_title="t",
            issue_author="a",
            clone_url="/x",
            priority=priority,
        )
        session.add(plan)
        session.flush()
        job = Job(
            plan_id=plan.id,
            stage="execute",
            key="execute:r1",
            state=JobState.QUEUED if waiting else JobState.RUNNING,
            lease_expires_at=utcnow() + timedelta(minutes=1),
            waiting_on=ACCOUNT_SCOPE.key if waiting else None,
            parked_until=utcnow() if waiting else None,
        )
        session.add(job)
        session.flush()
        return job.id


def test_a_free_slot_goes_to_the_more_urgent_job_waiting_not_to_a_newcomer(db: Database) -> None:
    urgent = job_of(db, "octo/widgets", 0, waiting=True)
    newcomer = job_of(db, "octo/widgets", 2, waiting=False)
    assert take(db, newcomer, [ACCOUNT_SCOPE]) == ACCOUNT_SCOPE
    assert where_it_stands(db, newcomer, ACCOUNT_SCOPE).startswith("2nd in line")
    assert take(db, urgent, [ACCOUNT_SCOPE]) is None


def test_an_urgent_newcomer_goes_before_older_jobs_waiting(db: Database) -> None:
    job_of(db, "octo/widgets", None, waiting=True)  # the repository's default priority
    urgent = job_of(db, "octo/widgets", 1, waiting=False)
    assert take(db, urgent, [ACCOUNT_SCOPE]) is None


def test_of_two_waiting_the_repository_with_fewer_running_goes_first(db: Database) -> None:
    busy = job_of(db, "octo/widgets", 2, waiting=False)
    assert take(db, busy, [ACCOUNT_SCOPE]) is None  # octo/widgets runs one on the account
    older = job_of(db, "octo/widgets", 2, waiting=True)
    newer = job_of(db, "octo/gadgets", 2, waiting=True)
    assert where_it_stands(db, newer, ACCOUNT_SCOPE).startswith("1st in line")
    assert where_it_stands(db, older, ACCOUNT_SCOPE).startswith("2nd in line")
    assert take(db, older, [ACCOUNT_SCOPE]) == ACCOUNT_SCOPE
    assert take(db, newer, [ACCOUNT_SCOPE]) is None


def test_a_job_that_stopped_looking_holds_no_place_in_line(db: Database) -> None:
    gone = job_of(db, "octo/widgets", 0, waiting=True)
    with db.session() as session:  # its worker died while it waited, long ago
        long_ago = utcnow() - timedelta(minutes=5)
        session.execute(update(Job).where(Job.id == gone).values(parked_until=long_ago))
    newcomer = job_of(db, "octo/widgets", 2, waiting=False)
    assert take(db, newcomer, [ACCOUNT_SCOPE]) is None
