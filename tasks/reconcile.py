"""Re-derive what should be happening: resend the outbox, requeue jobs whose worker died."""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import or_, select, update

from bot.models import Delivery, Job, JobState, utcnow
from bot.queue import PROCESS_DELIVERY, RUN_JOB
from tasks.context import WorkerContext

log = logging.getLogger(__name__)

# A delivery or job left this long without progress is sent again; duplicates are harmless
# because processing is idempotent, so the delay only bounds how late recovery starts.
STALE = timedelta(minutes=2)
MAX_DELIVERY_ATTEMPTS = 8
MAX_JOB_ATTEMPTS = 3


def reconcile(wctx: WorkerContext) -> None:
    """Run every recovery pass once."""
    resend_outbox(wctx)
    requeue_orphaned_jobs(wctx)


def resend_outbox(wctx: WorkerContext, stale: timedelta = STALE) -> int:
    """Enqueue deliveries that were stored but never processed; return how many."""
    cutoff = utcnow() - stale
    with wctx.db.session() as session:
        ids = session.scalars(
            select(Delivery.id).where(
                Delivery.processed_at.is_(None),
                Delivery.attempts < MAX_DELIVERY_ATTEMPTS,
                or_(Delivery.enqueued_at.is_(None), Delivery.enqueued_at < cutoff),
            )
        ).all()
    for delivery_id in ids:
        wctx.send_task(PROCESS_DELIVERY, delivery_id=delivery_id)
        with wctx.db.session() as session:
            session.get_one(Delivery, delivery_id).enqueued_at = utcnow()
    return len(ids)


def requeue_orphaned_jobs(wctx: WorkerContext) -> int:
    """Put jobs whose lease ran out back in the queue, or fail them after too many tries."""
    now = utcnow()
    with wctx.db.session() as session:
        session.execute(
            update(Job)
            .where(
                Job.state == JobState.RUNNING,
                Job.lease_expires_at < now,
                Job.attempts >= MAX_JOB_ATTEMPTS,
            )
            .values(state=JobState.FAILED, error="the worker died too many times", finished_at=now)
        )
        ids = session.scalars(
            select(Job.id).where(
                or_(
                    Job.state == JobState.RUNNING,
                    Job.state == JobState.QUEUED,
                ),
                or_(Job.lease_expires_at < now, Job.created_at < now - STALE),
            )
        ).all()
    for job_id in ids:
        wctx.send_task(RUN_JOB, job_id=job_id)
    return len(ids)
