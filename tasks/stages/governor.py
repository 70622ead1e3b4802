"""One quota governor per provider account, shared by every worker through the database.

An account is warm while its provider has answered one of its runs within WARM_FOR: its
jobs start their agents at once. On a cold account one job goes first, the probe, and the
others wait for its answer, so a burst against an account already at its limit costs one
refused run, not one per agent slot.

The first run that meets its provider's limit holds the account until the reset the
provider named; a job of that account about to start meanwhile parks until then instead of
spending a run on a refusal. After the reset one job probes again, the same way.

The waiters go as soon as the probe is heard from: at its first answer in its output
stream, when its run ends without a refusal, or once it has run PROBE_TRUST without one (a
refusal comes back within seconds). An answer clears the hold and wakes the waiters at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, delete, exists, or_, select, update
from sqlalchemy.orm import Session

from bot.db import Database, insert_missing, rows_changed
from bot.models import Job, JobState, ProviderAnswer, ProviderHold, aware, utcnow
from tasks.agents.definitions import AgentSpec

WARM_FOR = timedelta(minutes=10)
# The others look again this often while the probe runs (an answer wakes them sooner); a
# probe that has run PROBE_TRUST unrefused lets them go; a probe whose job no longer runs,
# or silent for longer than PROBE_GRACE, is replaced by whoever looks next.
WAIT_FOR_PROBE = timedelta(seconds=5)
PROBE_TRUST = timedelta(seconds=20)
PROBE_GRACE = timedelta(minutes=15)
KEY_SUFFIXES = ("_API_KEY", "_KEY", "_TOKEN")
WAITING_FOR_PROBE = "probe:"
COLD = "no answer heard from the provider lately"


@dataclass(frozen=True)
class Wait:
    """The job may not run its agent yet: until when, why, and whether to say so on the issue."""

    until: datetime
    reason: str
    tell: bool = True


def account_of(spec: AgentSpec, env: Mapping[str, str]) -> str:
    """The provider account an agent's runs count against: the env name of the key it is
    given and a digest of the key, so agents sharing a key share its limit."""
    for name in spec.env:
        if name.endswith(KEY_SUFFIXES) and env.get(name):
            return f"{name}:{hashlib.sha256(env[name].encode()).hexdigest()[:12]}"
    return f"agent:{spec.name}"


def probe_key(account: str) -> str:
    """What a job waiting for the account's probe records in `jobs.waiting_on`."""
    return f"{WAITING_FOR_PROBE}{account}"


def admit(db: Database, account: str, job_id: int) -> Wait | None:
    """None when the job may run its agent now; otherwise how long it waits, and why. A job
    waiting for the probe is marked so that the probe's answer wakes it."""
    key = probe_key(account)
    with db.session() as session:
        wait = _wait(session, account, job_id, utcnow())
        waiting = wait is not None and not wait.tell
        # Read first: most jobs are not marked and stay so, and need not write.
        if (session.scalar(select(Job.waiting_on).where(Job.id == job_id)) == key) != waiting:
            marked = update(Job).where(Job.id == job_id).values(waiting_on=key if waiting else None)
            session.execute(marked.execution_options(synchronize_session=False))
    return wait


def _wait(session: Session, account: str, job_id: int, now: datetime) -> Wait | None:
    hold = session.get(ProviderHold, account)
    if hold is None:
        if _warm(session, account, now):
            return None
        insert_missing(
            session, ProviderHold, account=account, until=now, reason=COLD, updated_at=now
        )
    elif aware(hold.until) > now:
        return Wait(
            aware(hold.until),
            f"its provider account is at its limit ({hold.reason}, met by job "
            f"{hold.job_id}); no agent of that account starts before "
            f"{aware(hold.until):%Y-%m-%d %H:%M:%S} UTC",
        )
    if _claim_probe(session, account, job_id, now) or _trusted(session, account, now):
        return None
    probe = session.scalar(select(ProviderHold.probe_job_id).where(ProviderHold.account == account))
    finding = " answers" if hold is None or hold.job_id is None else "'s limit has reset"
    return Wait(
        now + WAIT_FOR_PROBE, f"job {probe} is finding whether the provider{finding}", tell=False
    )


def _warm(session: Session, account: str, now: datetime) -> bool:
    heard = session.get(ProviderAnswer, account)
    return heard is not None and aware(heard.answered_at) > now - WARM_FOR


def _probe_running(now: datetime) -> ColumnElement[bool]:
    """The account's probe job is running under a live lease (a dead worker's is not)."""
    return exists(
        select(Job.id).where(
            Job.id == ProviderHold.probe_job_id,
            Job.state == JobState.RUNNING,
            Job.lease_expires_at >= now,
        )
    )


def _claim_probe(session: Session, account: str, job_id: int, now: datetime) -> bool:
    """Make the job the account's probe, unless another is probing; True if it is the probe."""
    claim = (
        update(ProviderHold)
        .where(
            ProviderHold.account == account,
            or_(
                ProviderHold.probe_job_id.is_(None),
                ProviderHold.probe_job_id == job_id,
                ProviderHold.probe_until < now,
                ~_probe_running(now),
            ),
        )
        .values(probe_job_id=job_id, probe_until=now + PROBE_GRACE, probe_since=now)
        # The claim is decided by the database, not by the row already read into the session.
        .execution_options(synchronize_session=False)
    )
    return rows_changed(session, claim) == 1


def _trusted(session: Session, account: str, now: datetime) -> bool:
    """Tell whether the account's probe has run for PROBE_TRUST without being refused."""
    trusted = select(ProviderHold.account).where(
        ProviderHold.account == account,
        ProviderHold.probe_since <= now - PROBE_TRUST,
        _probe_running(now),
    )
    return session.scalar(trusted) is not None


def limit_met(db: Database, account: str, job_id: int, until: datetime, reason: str) -> None:
    """Hold the account until the provider's reset (the latest heard, when runs disagree)."""
    now = utcnow()
    with db.session() as session:
        hold = None
        while hold is None:  # an answer elsewhere may delete the row between the two
            insert_missing(
                session, ProviderHold, account=account, until=until, reason=reason, updated_at=now
            )
            hold = session.get(ProviderHold, account, with_for_update=True)
        if hold.job_id is None or aware(hold.until) <= until:
            hold.until, hold.reason, hold.job_id = until, reason[:500], job_id
        hold.probe_job_id, hold.probe_until, hold.probe_since = None, None, None
        hold.updated_at = now


def answered(db: Database, account: str) -> list[int]:
    """The provider answered a run: the account is warm and not at its limit. Return the
    jobs that waited for its probe, now due, for the caller to send at once."""
    now = utcnow()
    with db.session() as session:
        insert_missing(session, ProviderAnswer, account=account, answered_at=now)
        heard = update(ProviderAnswer).where(ProviderAnswer.account == account)
        session.execute(heard.values(answered_at=now))
        session.execute(delete(ProviderHold).where(ProviderHold.account == account))
        return _due_now(session, account, now)


def let_go(db: Database, account: str, job_id: int) -> list[int]:
    """The job's run ended unheard (not started, or stopped): if it was the probe, another
    job may take its place. Return the jobs that waited for it, now due."""
    with db.session() as session:
        freed = (
            update(ProviderHold)
            .where(ProviderHold.account == account, ProviderHold.probe_job_id == job_id)
            .values(probe_job_id=None, probe_until=None, probe_since=None)
            .execution_options(synchronize_session=False)
        )
        if rows_changed(session, freed) == 0:
            return []
        return _due_now(session, account, utcnow())


def _due_now(session: Session, account: str, now: datetime) -> list[int]:
    """End the park of the jobs waiting for the account's probe; the seconds they were set
    to wait and will not are taken off their parked time."""
    waiting = (
        Job.state == JobState.QUEUED,
        Job.waiting_on == probe_key(account),
        Job.parked_until > now,
        # A job parked for longer (its daily budget, say) waits for that, not for the probe.
        Job.parked_until <= now + WAIT_FOR_PROBE,
    )
    parked = session.execute(select(Job.id, Job.parked_until).where(*waiting)).all()
    woken = []
    for job_id, until in parked:
        unused = (aware(until) - now).total_seconds() if until else 0.0
        due = (
            update(Job)
            .where(Job.id == job_id, *waiting)
            .values(parked_until=now, parked_s=Job.parked_s - unused)
            .execution_options(synchronize_session=False)
        )
        if rows_changed(session, due) == 1:
            woken.append(job_id)
    return woken
