"""What the costs page shows beside the dollars: where each merged plan's lead time went,
and how often each agent's first diff passed its checks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from bot.models import AuditEvent, CheckResult, Job, Plan, PlanState, Repository, aware
from bot.repo_config import DIFF_CHECK


@dataclass(frozen=True)
class LeadTime:
    """A merged plan's time from label to merge: machines working, jobs parked on a quota
    or budget, and the rest, which is time spent waiting for people."""

    plan_id: int
    reference: str
    total_s: float
    machine_s: float
    parked_s: float

    @property
    def people_s(self) -> float:
        return max(self.total_s - self.machine_s - self.parked_s, 0.0)


@dataclass(frozen=True)
class FirstPass:
    """Of the diffs an agent and model wrote, how many passed every check the first time."""

    agent: str
    verified: int
    passed: int

    @property
    def rate(self) -> float:
        return self.passed / self.verified if self.verified else 0.0


def lead_times(session: Session, repositories: Collection[str]) -> list[LeadTime]:
    """The merged plans of these repositories, oldest merge first."""
    merges = session.execute(
        select(Plan, Repository.full_name, func.min(AuditEvent.created_at))
        .join(Repository, Repository.id == Plan.repository_id)
        .join(AuditEvent, AuditEvent.plan_id == Plan.id)
        .where(
            Plan.state == PlanState.MERGED,
            AuditEvent.to_state == PlanState.MERGED.value,
            func.lower(Repository.full_name).in_(repositories),
        )
        .group_by(Plan.id, Repository.full_name)
        .order_by(func.min(AuditEvent.created_at))
    ).all()
    jobs = _jobs_by_plan(session, [plan.id for plan, _, _ in merges])
    return [
        LeadTime(
            plan.id,
            f"{name}#{plan.issue_number}",
            _seconds(plan.created_at, merged_at),
            sum(_seconds(job.started_at, job.finished_at) for job in jobs[plan.id]),
            sum(job.parked_s for job in jobs[plan.id]),
        )
        for plan, name, merged_at in merges
    ]


def first_pass(session: Session, repositories: Collection[str]) -> list[FirstPass]:
    """Per agent and model: plans whose first verified head passed all of its checks."""
    rows = session.execute(
        select(CheckResult, Plan.agent, Plan.model)
        .join(Plan, Plan.id == CheckResult.plan_id)
        .join(Repository, Repository.id == Plan.repository_id)
        .where(
            CheckResult.name != DIFF_CHECK,
            CheckResult.conclusion.is_not(None),
            func.lower(Repository.full_name).in_(repositories),
        )
        .order_by(CheckResult.id)
    ).all()
    first_head: dict[int, str] = {}
    outcome: dict[int, tuple[str, bool]] = {}
    for check, agent, model in rows:
        head = first_head.setdefault(check.plan_id, check.head_sha)
        if check.head_sha != head:
            continue
        _, passed = outcome.get(check.plan_id, ("", True))
        name = f"{agent or 'default agent'} {model or ''}".strip()
        outcome[check.plan_id] = (name, passed and check.conclusion == "success")
    return _tally(outcome.values())


def _tally(outcomes: Iterable[tuple[str, bool]]) -> list[FirstPass]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for agent, passed in outcomes:
        counts[agent][0] += 1
        counts[agent][1] += passed
    return [FirstPass(agent, *counted) for agent, counted in sorted(counts.items())]


def _jobs_by_plan(session: Session, plan_ids: list[int]) -> dict[int, list[Job]]:
    found: dict[int, list[Job]] = defaultdict(list)
    for job in session.scalars(select(Job).where(Job.plan_id.in_(plan_ids))):
        found[job.plan_id].append(job)
    return found


def _seconds(start: datetime | None, end: datetime | None) -> float:
    if start is None or end is None:
        return 0.0
    return max((aware(end) - aware(start)).total_seconds(), 0.0)
