"""`gaffer cost`: what the agents cost, by repository, stage, agent and day, and per merged PR."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from bot.models import Job, Plan, PlanState, Repository, aware
from bot.states import TERMINAL

ZERO = Decimal(0)


@dataclass(frozen=True)
class CostTotals:
    """What agents cost: totals by repository, stage, agent and day (UTC), and per merged PR
    with the waste of plans that ended unmerged spread over the merged ones."""

    by_repository: dict[str, Decimal]
    by_stage: dict[str, Decimal]
    by_agent: dict[str, Decimal]
    by_day: dict[str, Decimal]
    merged_prs: int
    spent_on_merged: Decimal
    waste: Decimal

    @property
    def total(self) -> Decimal:
        return sum(self.by_repository.values(), ZERO)

    @property
    def per_merged_pr(self) -> Decimal | None:
        if not self.merged_prs:
            return None
        return (self.spent_on_merged + self.waste) / self.merged_prs

    def to_json(self) -> dict[str, Any]:
        """The totals as JSON: dollars as strings, exact to the cent's hundredth."""

        def money(totals: dict[str, Decimal]) -> dict[str, str]:
            return {key: f"{usd:.4f}" for key, usd in totals.items()}

        per_pr = self.per_merged_pr
        return {
            "total_usd": f"{self.total:.4f}",
            "by_repository": money(self.by_repository),
            "by_stage": money(self.by_stage),
            "by_agent": money(self.by_agent),
            "by_day": money(self.by_day),
            "merged_prs": self.merged_prs,
            "spent_on_merged_usd": f"{self.spent_on_merged:.4f}",
            "waste_usd": f"{self.waste:.4f}",
            "per_merged_pr_usd": None if per_pr is None else f"{per_pr:.4f}",
        }


def cost_totals(
    session: Session,
    *,
    since: datetime | None = None,
    repository: str | None = None,
    repositories: Collection[str] | None = None,
) -> CostTotals:
    """Sum what the jobs cost: those created since a time, of one repository or of some
    (lower-case owner/name) when given."""
    query = (
        select(Job, Plan, Repository.full_name)
        .join(Plan, Plan.id == Job.plan_id)
        .join(Repository, Repository.id == Plan.repository_id)
    )
    if since is not None:
        query = query.where(Job.created_at >= since)
    if repository is not None:
        query = query.where(func.lower(Repository.full_name) == repository.lower())
    if repositories is not None:
        query = query.where(func.lower(Repository.full_name).in_(repositories))
    rows = session.execute(query).all()
    by_plan: dict[int, tuple[PlanState, Decimal]] = {}
    for job, plan, _name in rows:
        _, so_far = by_plan.get(plan.id, (plan.state, ZERO))
        by_plan[plan.id] = (plan.state, so_far + job.cost_usd)
    merged = [usd for state, usd in by_plan.values() if state == PlanState.MERGED]
    ended_unmerged = TERMINAL - {PlanState.MERGED}
    return CostTotals(
        by_repository=_sum((name, job.cost_usd) for job, _plan, name in rows),
        by_stage=_sum((job.stage, job.cost_usd) for job, _plan, _name in rows),
        by_agent=_sum((_agent(job), job.cost_usd) for job, _plan, _name in rows),
        by_day=_sum((_day(job), job.cost_usd) for job, _plan, _name in rows),
        merged_prs=len(merged),
        spent_on_merged=sum(merged, ZERO),
        waste=sum((usd for state, usd in by_plan.values() if state in ended_unmerged), ZERO),
    )


def cost_report(totals: CostTotals) -> str:
    """Render the totals as plain-text tables."""
    sections = [
        _table("By repository", totals.by_repository),
        _table("By stage", totals.by_stage),
        _table("By agent and model", totals.by_agent),
        _table("By day (UTC)", totals.by_day),
        _per_merged_pr(totals),
    ]
    return "\n\n".join(sections)


def _agent(job: Job) -> str:
    return f"{job.agent or 'no agent'} {job.model or ''}".strip()


def _day(job: Job) -> str:
    return f"{aware(job.created_at).astimezone(UTC):%Y-%m-%d}"


def _sum(pairs: Iterable[tuple[str, Decimal]]) -> dict[str, Decimal]:
    totals: dict[str, Decimal] = defaultdict(lambda: ZERO)
    for key, usd in pairs:
        totals[key] += usd
    return dict(sorted(totals.items()))


def _table(title: str, totals: dict[str, Decimal]) -> str:
    lines = [title] + [f"  {key:<40} ${usd:>12.4f}" for key, usd in totals.items()]
    return "\n".join(lines + [f"  {'total':<40} ${sum(totals.values(), ZERO):>12.4f}"])


def _per_merged_pr(totals: CostTotals) -> str:
    per_pr = totals.per_merged_pr
    shown = f"${per_pr:.4f}" if per_pr is not None else "no merged PRs yet"
    return (
        f"Per merged PR\n  merged PRs: {totals.merged_prs}   spent on them: "
        f"${totals.spent_on_merged:.4f}   waste on plans that ended unmerged: "
        f"${totals.waste:.4f}\n  cost per merged PR, waste included: {shown}"
    )
