"""`gaffer cost`: what the agents cost, by repository, stage and day, and per merged PR."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.models import Job, Plan, PlanState, Repository, aware
from bot.states import TERMINAL

ZERO = Decimal(0)


def cost_report(session: Session) -> str:
    """Render the totals as plain-text tables."""
    rows = session.execute(
        select(Job, Plan, Repository.full_name)
        .join(Plan, Plan.id == Job.plan_id)
        .join(Repository, Repository.id == Plan.repository_id)
    ).all()
    sections = [
        _table("By repository", _sum((name, job.cost_usd) for job, _plan, name in rows)),
        _table("By stage", _sum((job.stage, job.cost_usd) for job, _plan, _name in rows)),
        _table("By day (UTC)", _sum((_day(job), job.cost_usd) for job, _plan, _name in rows)),
        _per_merged_pr([(plan, job.cost_usd) for job, plan, _name in rows]),
    ]
    return "\n\n".join(sections)


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


def _per_merged_pr(costs: list[tuple[Plan, Decimal]]) -> str:
    by_state: dict[int, tuple[PlanState, Decimal]] = {}
    for plan, usd in costs:
        _, so_far = by_state.get(plan.id, (plan.state, ZERO))
        by_state[plan.id] = (plan.state, so_far + usd)
    merged = [usd for state, usd in by_state.values() if state == PlanState.MERGED]
    ended_unmerged = TERMINAL - {PlanState.MERGED}
    wasted = sum((usd for state, usd in by_state.values() if state in ended_unmerged), ZERO)
    spent = sum(merged, ZERO)
    per_pr = (spent + wasted) / len(merged) if merged else None
    shown = f"${per_pr:.4f}" if per_pr is not None else "no merged PRs yet"
    return (
        f"Per merged PR\n  merged PRs: {len(merged)}   spent on them: ${spent:.4f}   "
        f"waste on plans that ended unmerged: ${wasted:.4f}\n"
        f"  cost per merged PR, waste included: {shown}"
    )
