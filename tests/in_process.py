"""An issue driven in this process: deliveries processed and jobs run here, as a worker would."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from bot.double.driver import IssueFlow
from bot.models import Delivery, Job, JobState, Plan, PlanState
from tasks.deliveries import process_delivery
from tasks.jobs import run_job

CONFIG = "checks:\n  - name: tests\n    run: 'true'\n    timeout: 30\n"
BODY = "```gaffer-script\nexecute:\n  - write: {path: fix.txt, content: ok}\n```\n"


@dataclass
class InProcess:
    """Drive a flow and do the worker's part synchronously after each step."""

    flow: IssueFlow
    wctx: object

    def settle(self) -> Plan:
        """Process every stored delivery and run every queued job until nothing is left."""
        while self._deliveries() or self._jobs():
            for delivery_id in self._deliveries():
                process_delivery(self.wctx, delivery_id=delivery_id)  # type: ignore[arg-type]
            for job_id in self._jobs():
                run_job(self.wctx, job_id=job_id)  # type: ignore[arg-type]
        plan = self.flow.plan()
        assert plan is not None
        return plan

    def accept(self, body: str, login: str = "maintainer") -> None:
        """Deliver a comment and handle it, leaving the jobs it queued unrun."""
        self.flow.comment(body, login=login)
        for delivery_id in self._deliveries():
            process_delivery(self.wctx, delivery_id=delivery_id)  # type: ignore[arg-type]

    def comment(self, body: str, login: str = "maintainer") -> Plan:
        self.flow.comment(body, login=login)
        return self.settle()

    def to_review(self) -> Plan:
        self.flow.label()
        self.settle()
        plan = self.comment("/approve")
        assert plan.state == PlanState.IN_REVIEW, plan.last_error
        return plan

    def _deliveries(self) -> list[int]:
        with self.wctx.db.session() as session:  # type: ignore[attr-defined]
            return list(session.scalars(select(Delivery.id).where(Delivery.processed_at.is_(None))))

    def _jobs(self) -> list[int]:
        with self.wctx.db.session() as session:  # type: ignore[attr-defined]
            # A parked job (held by a budget or a quota) waits: it is not runnable now.
            runnable = select(Job.id).where(
                Job.state == JobState.QUEUED, Job.parked_until.is_(None)
            )
            return list(session.scalars(runnable))
