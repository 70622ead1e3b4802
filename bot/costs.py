"""What plans and repositories have spent, summed from their jobs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from bot.models import Job, Plan

# A sum is only as good as its weakest part.
_STRENGTH = {"estimated": 0, "computed": 1, "agent": 2}


@dataclass(frozen=True)
class Spend:
    usd: Decimal
    source: str | None  # the weakest source among the parts; None when nothing ran

    def __str__(self) -> str:
        return f"${self.usd:.4f}" + (f" ({self.source})" if self.source else "")


def weakest(sources: Sequence[str | None]) -> str | None:
    """Return the least reliable of the cost sources given."""
    known = [s for s in sources if s]
    return min(known, key=lambda s: _STRENGTH.get(s, 0)) if known else None


def plan_spend(session: Session, plan_id: int) -> Spend:
    """Return what the plan's jobs have cost so far."""
    return _spend(session.scalars(select(Job).where(Job.plan_id == plan_id)).all())


def candidate_spend(session: Session, plan_id: int, number: int) -> Decimal:
    """Return what one candidate of a best-of-N plan has cost so far."""
    jobs = session.scalars(select(Job).where(Job.plan_id == plan_id, Job.candidate == number))
    return _spend(jobs.all()).usd


def _spend(jobs: Sequence[Job]) -> Spend:
    return Spend(
        sum((j.cost_usd for j in jobs), Decimal(0)),
        weakest([j.cost_source for j in jobs]),
    )


def plan_jobs(session: Session, plan_id: int) -> list[Job]:
    """Return the plan's jobs, oldest first."""
    return list(session.scalars(select(Job).where(Job.plan_id == plan_id).order_by(Job.id)))


def day_start(moment: datetime) -> datetime:
    """Return the start of moment's UTC day."""
    return datetime.combine(moment.date(), time(0), tzinfo=moment.tzinfo)


def next_day(moment: datetime) -> datetime:
    return day_start(moment) + timedelta(days=1)


def repository_spend_on(session: Session, repository_id: int, moment: datetime) -> Decimal:
    """Return what the repository's jobs cost during moment's UTC day."""
    total = session.scalar(
        select(func.coalesce(func.sum(Job.cost_usd), 0))
        .join(Plan, Plan.id == Job.plan_id)
        .where(
            Plan.repository_id == repository_id,
            Job.created_at >= day_start(moment),
            Job.created_at < next_day(moment),
        )
    )
    return Decimal(total or 0)
