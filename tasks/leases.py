"""Job leases: one live worker owns a job; a dead worker's lease runs out."""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import and_, case, or_, update

from bot.db import Database, rows_changed
from bot.models import Job, JobState, utcnow

LEASE = timedelta(seconds=60)


def claim(db: Database, job_id: int, owner: str, lease: timedelta = LEASE) -> bool:
    """Take the job if it is queued or its owner's lease ran out; return whether we did."""
    now = utcnow()
    with db.session() as session:
        taken = rows_changed(
            session,
            update(Job)
            .where(
                Job.id == job_id,
                or_(
                    and_(
                        Job.state == JobState.QUEUED,
                        or_(Job.parked_until.is_(None), Job.parked_until <= now),
                    ),
                    and_(Job.state == JobState.RUNNING, Job.lease_expires_at < now),
                ),
            )
            .values(
                state=JobState.RUNNING,
                lease_owner=owner,
                lease_expires_at=now + lease,
                attempts=Job.attempts + 1,
                started_at=now,
            ),
        )
    return taken == 1


def renew(db: Database, job_id: int, owner: str, lease: timedelta = LEASE) -> bool:
    """Extend our lease; False means the job was taken from us or ended."""
    mine = (Job.id == job_id, Job.lease_owner == owner, Job.state == JobState.RUNNING)
    with db.session() as session:
        extended = update(Job).where(*mine).values(lease_expires_at=utcnow() + lease)
        return rows_changed(session, extended) == 1


def finish(
    db: Database, job_id: int, owner: str, state: JobState, error: str | None = None
) -> bool:
    """Close our job with its outcome; a job cancelled meanwhile stays cancelled."""
    outcome = case((Job.state == JobState.CANCELLED, Job.state), else_=state)
    with db.session() as session:
        closed = (
            update(Job)
            .where(
                Job.id == job_id,
                Job.lease_owner == owner,
                Job.state.in_([JobState.RUNNING, JobState.CANCELLED]),
            )
            .values(state=outcome, error=error, finished_at=utcnow(), lease_expires_at=None)
        )
        return rows_changed(session, closed) == 1


def is_cancelled(db: Database, job_id: int) -> bool:
    with db.session() as session:
        return session.get_one(Job, job_id, populate_existing=True).state == JobState.CANCELLED


class Heartbeat:
    """Renew a lease in the background while the job runs."""

    def __init__(self, db: Database, job_id: int, owner: str, lease: timedelta = LEASE) -> None:
        self._args = (db, job_id, owner, lease)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        interval = self._args[3].total_seconds() / 3
        while not self._stop.wait(interval):
            renew(*self._args)
