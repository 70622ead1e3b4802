"""An issue driven in this process: deliveries processed and jobs run here, as a worker would."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import or_, select

from bot.models import Delivery, Job, JobState, Plan, PlanState, utcnow
from double.driver import IssueFlow
from tasks.deliveries import process_delivery
from tasks.jobs import run_job
from tests.support import deliver

CONFIG = "checks:\n  - name: tests\n    run: 'true'\n    timeout: 30\n"
BODY = "```gaffer-script\nexecute:\n  - write: {path: fix.txt, content: ok}\n```\n"


def pending_deliveries(wctx) -> list[int]:
    """Return the ids of stored deliveries no worker has processed yet."""
    with wctx.db.session() as session:
        return list(session.scalars(select(Delivery.id).where(Delivery.processed_at.is_(None))))


def process_stored(wctx) -> None:
    """Process every stored, unprocessed delivery here; leave the jobs they queue unrun."""
    for delivery_id in pending_deliveries(wctx):
        process_delivery(wctx, delivery_id=delivery_id)


def receive(wctx, client, event: str, payload: dict[str, Any], **options: Any) -> None:
    """Deliver a webhook and process it here, as the worker would."""
    deliver(client, event, payload, **options)
    process_stored(wctx)


def runnable_jobs(wctx) -> list[int]:
    """Return the queued jobs a worker would take now (a parked job waits until its time)."""
    with wctx.db.session() as session:
        due = or_(Job.parked_until.is_(None), Job.parked_until <= utcnow())
        runnable = select(Job.id).where(Job.state == JobState.QUEUED, due)
        return list(session.scalars(runnable))


def settle(wctx) -> None:
    """Process every stored delivery and run every queued job until nothing is left."""
    while pending_deliveries(wctx) or runnable_jobs(wctx):
        process_stored(wctx)
        for job_id in runnable_jobs(wctx):
            run_job(wctx, job_id=job_id)


def the_plan(wctx) -> Plan:
    """Return the only plan in the database."""
    with wctx.db.session() as session:
        [plan] = session.scalars(select(Plan)).all()
        return plan


@dataclass
class InProcess:
    """Drive a flow and do the worker's part synchronously after each step."""

    flow: IssueFlow
    wctx: object

    def settle(self) -> Plan:
        """Process every stored delivery and run every queued job until nothing is left."""
        settle(self.wctx)
        plan = self.flow.plan()
        assert plan is not None
        return plan

    def accept(self, body: str, login: str = "maintainer") -> None:
        """Deliver a comment and handle it, leaving the jobs it queued unrun."""
        self.flow.comment(body, login=login)
        process_stored(self.wctx)

    def comment(self, body: str, login: str = "maintainer") -> Plan:
        self.flow.comment(body, login=login)
        return self.settle()

    def to_review(self) -> Plan:
        self.flow.label()
        self.settle()
        plan = self.comment("/approve")
        assert plan.state == PlanState.IN_REVIEW, plan.last_error
        return plan
