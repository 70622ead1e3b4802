"""Concurrency limits that hold across every worker and machine, set in GAFFER_CONFIG:

    limits:
      repository: 2                     # agent jobs running at once in one repository
      repositories: {octo/widgets: 1}   # one repository's own, over `repository`
      account: 3                        # agent jobs running at once on one provider account
      accounts: {ANTHROPIC_API_KEY: 2}  # by the key's env name, over `account`

A repository may set its own `concurrency` in .github/gaffer.yml (a plan keeps the value
it began with, as it keeps its agent); the lower of it and the server's limit holds.

Before its agent starts, a job takes a slot in every limited scope, and it gives them back
when it ends or parks. A scope's slots are rows of `slots`, taken by compare-and-swap, so
two workers never hold one slot; a slot whose job stopped running or lost its lease is free
again. A job that finds a scope full waits in the queue and looks again, and the status
comment says where it stands: "2nd in line for ANTHROPIC_API_KEY (2 running, limit 2)".

The line is kept by priority (a plan's `gaffer: pN` label, or its repository's `priority`),
then by fair share (the repository with fewer jobs running in the scope first), then by
age: a free slot goes to the first in line, never to a newcomer behind it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, exists, func, or_, select, update

from bot.db import Database, insert_missing, rows_changed
from bot.models import Job, JobState, Plan, Slot, Stage, utcnow
from bot.queue import RUN_JOB
from bot.repo_config import DEFAULT_PRIORITY
from bot.status import publish_status
from tasks.context import WorkerContext
from tasks.stages.costs import park
from tasks.stages.governor import account_of
from tasks.stages.stage_agent import NoAgent, agent_of

LIMITED_STAGES = frozenset({Stage.PLAN, Stage.REVISE, Stage.EXECUTE, Stage.REWORK})
LOOK_AGAIN = timedelta(seconds=3)
STILL_WAITING = LOOK_AGAIN * 10


@dataclass(frozen=True)
class Scope:
    """What one limit counts: its key in `slots`, the name people read, and the limit."""

    key: str
    label: str
    limit: int


def scopes_of(
    limits: Mapping[str, Any],
    repository: str,
    account: str | None,
    repository_own: int | None = None,
) -> list[Scope]:
    """The limited scopes a job of this repository and provider account runs under; a
    repository's own `concurrency` (its .github/gaffer.yml) counts when it is the lower."""
    found = []
    per_repository = _limit(limits, "repositories", repository.lower(), "repository")
    if repository_own is not None:
        per_repository = min(per_repository or repository_own, repository_own)
    if per_repository is not None:
        found.append(Scope(f"repository:{repository.lower()}", repository, per_repository))
    if account is not None:
        key_name = account.split(":", 1)[0]
        per_account = _limit(limits, "accounts", key_name, "account")
        if per_account is not None:
            found.append(Scope(f"account:{account}", key_name, per_account))
    return found


def _limit(limits: Mapping[str, Any], table: str, name: str, default: str) -> int | None:
    own = {str(key).lower(): value for key, value in (limits.get(table) or {}).items()}
    value = own.get(name.lower(), limits.get(default))
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"limits in GAFFER_CONFIG: {table} or {default} must be a whole number ≥ 1"
        )
    return value


def take(db: Database, job_id: int, scopes: list[Scope]) -> Scope | None:
    """Take a slot in every scope and return None, or give back all and return the first
    scope that is full, or has jobs waiting ahead of this one."""
    give_back(db, job_id)
    with db.session() as session:
        for scope in scopes:
            for number in range(scope.limit):
                insert_missing(session, Slot, scope=scope.key, number=number)
    for scope in scopes:
        if _line(db, scope, job_id)[0] != job_id or not _take_one(db, scope, job_id):
            give_back(db, job_id)
            return scope
    return None


def _line(db: Database, scope: Scope, job_id: int) -> list[int]:
    """The jobs waiting under the scope, this one among them, first first: the most urgent
    priority, then the repository with the fewest running there (fair share), then the
    oldest. A waiting job looks again every few seconds; one silent for long is not waiting."""
    now = utcnow()
    with db.session() as session:
        waiting = session.execute(
            select(Job.id, Plan.repository_id, Plan.priority)
            .join(Plan, Plan.id == Job.plan_id)
            .where(
                or_(
                    Job.id == job_id,
                    and_(
                        Job.waiting_on == scope.key,
                        # A waiter a worker has taken up to look again is still in line.
                        Job.state.in_((JobState.QUEUED, JobState.RUNNING)),
                        Job.parked_until >= now - STILL_WAITING,
                    ),
                )
            )
        ).all()
        running = dict(
            session.execute(
                select(Plan.repository_id, func.count(Slot.number))
                .join(Job, Job.id == Slot.job_id)
                .join(Plan, Plan.id == Job.plan_id)
                .where(
                    Slot.scope == scope.key,
                    Job.state == JobState.RUNNING,
                    Job.lease_expires_at >= now,
                )
                .group_by(Plan.repository_id)
            ).all()
        )
    ranked = sorted(
        waiting,
        key=lambda job: (
            DEFAULT_PRIORITY if job.priority is None else job.priority,
            running.get(job.repository_id, 0),
            job.id,
        ),
    )
    return [job.id for job in ranked]


def _take_one(db: Database, scope: Scope, job_id: int) -> bool:
    now = utcnow()
    live = exists(
        select(Job.id).where(
            Job.id == Slot.job_id, Job.state == JobState.RUNNING, Job.lease_expires_at >= now
        )
    )
    for number in range(scope.limit):
        with db.session() as session:
            taking = (
                update(Slot)
                .where(
                    Slot.scope == scope.key,
                    Slot.number == number,
                    or_(Slot.job_id.is_(None), ~live),
                )
                .values(job_id=job_id, claimed_at=now)
                .execution_options(synchronize_session=False)
            )
            if rows_changed(session, taking) == 1:
                return True
    return False


def give_back(db: Database, job_id: int) -> None:
    """Free every slot the job holds."""
    with db.session() as session:
        freed = update(Slot).where(Slot.job_id == job_id).values(job_id=None, claimed_at=None)
        session.execute(freed.execution_options(synchronize_session=False))


def hand_on(wctx: WorkerContext, job_id: int) -> None:
    """Free the ended job's slots and send the first in line of each scope it held at once,
    instead of at its next look."""
    with wctx.db.session() as session:
        held = session.scalars(select(Slot.scope).where(Slot.job_id == job_id).distinct()).all()
    give_back(wctx.db, job_id)
    for key in held:
        first = next(iter(_line(wctx.db, Scope(key, key, 0), job_id=0)), None)
        if first is None:
            continue
        with wctx.db.session() as session:  # still in line (not parked long ago), claimable now
            session.execute(
                update(Job)
                .where(Job.id == first, Job.state == JobState.QUEUED)
                .values(parked_until=utcnow())
                .execution_options(synchronize_session=False)
            )
        wctx.send_task(RUN_JOB, job_id=first)


def where_it_stands(db: Database, job_id: int, scope: Scope) -> str:
    """The job's place in line for a full scope, for the status comment."""
    now = utcnow()
    place = _line(db, scope, job_id).index(job_id) + 1
    with db.session() as session:
        running = session.scalar(
            select(func.count(Slot.number))
            .join(Job, Job.id == Slot.job_id)
            .where(
                Slot.scope == scope.key,
                and_(Job.state == JobState.RUNNING, Job.lease_expires_at >= now),
            )
        )
    return f"{_ordinal(place)} in line for {scope.label} ({running} running, limit {scope.limit})"


def mark_waiting(db: Database, job_id: int, waiting_on: str | None) -> None:
    """Record what the job waits for (a limit's scope, an overlapping plan); once it waits
    for nothing, its work starts now (for lead times, the wait is not machine time)."""
    started = {} if waiting_on else {"started_at": utcnow()}
    with db.session() as session:
        session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(waiting_on=waiting_on, **started)
            .execution_options(synchronize_session=False)
        )


def _ordinal(number: int) -> str:
    suffix = (
        "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    )
    return f"{number}{suffix}"


def wait_for_slots(wctx: WorkerContext, job: Job) -> bool:
    """Take the job's slots, or park it to look again and say where it stands; True if parked."""
    if job.stage not in LIMITED_STAGES:
        return False
    limits = wctx.setting("limits", None) or {}
    with wctx.db.session() as session:
        plan = session.get_one(Plan, job.plan_id)
    if not limits and plan.concurrency is None:
        return False
    try:
        account: str | None = account_of(agent_of(wctx, plan, job), os.environ)
    except NoAgent:
        account = None  # the stage says so on the issue; no account to count it against
    scopes = scopes_of(limits, plan.repository.full_name, account, plan.concurrency)
    full = take(wctx.db, job.id, scopes)
    mark_waiting(wctx.db, job.id, full.key if full else None)
    if full is None:
        return False
    stands = f"queued: {where_it_stands(wctx.db, job.id, full)}"
    if park(wctx, job.id, utcnow() + LOOK_AGAIN, stands) and stands != job.error:
        publish_status(
            wctx.db, wctx.client(plan.installation_id, plan.repository.full_name), plan.id
        )
    return True
