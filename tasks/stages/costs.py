"""Record what agent runs cost, and hold or stop work that budgets and quotas do not allow."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import select, update

from bot.costs import candidate_spend, next_day, plan_spend, repository_spend_on, weakest
from bot.db import rows_changed
from bot.models import Candidate, Job, JobState, Plan, utcnow
from bot.queue import RUN_JOB
from bot.repo_config import RepoConfig
from tasks.agents.usage import Usage
from tasks.context import WorkerContext

# Without a reset time from the provider, try again after this long.
QUOTA_BACKOFF = timedelta(minutes=15)
# A parked job whose wait ends within this long is sent to the broker to run at its end.
RESEND_WITHIN = timedelta(minutes=20)


def add_usage(wctx: WorkerContext, job_id: int, usage: Usage | None) -> None:
    """Add one agent run's tokens and dollars to its job."""
    if usage is None:
        return
    with wctx.db.session() as session:
        job = session.get_one(Job, job_id)
        job.model = usage.model or job.model
        job.input_tokens += usage.input_tokens
        job.output_tokens += usage.output_tokens
        job.cache_read_tokens += usage.cache_read_tokens
        job.cache_write_tokens += usage.cache_write_tokens
        job.reasoning_tokens += usage.reasoning_tokens
        job.cost_usd += usage.cost_usd or Decimal(0)
        job.cost_source = weakest([job.cost_source, usage.cost_source])


def plan_budget(plan: Plan, config: RepoConfig) -> Decimal | None:
    """Return the plan's budget: its own (/budget) or the repository's default."""
    return plan.budget_usd if plan.budget_usd is not None else config.budget.plan_usd


def spend_left(wctx: WorkerContext, plan: Plan, config: RepoConfig, job: Job) -> Decimal | None:
    """Return how many dollars the job may still spend, or None without a budget: what is
    left of the plan's, or of a candidate's share of it."""
    with wctx.db.session() as session:
        if job.candidate is not None:
            share = session.scalar(
                select(Candidate.budget_usd).where(
                    Candidate.plan_id == plan.id, Candidate.number == job.candidate
                )
            )
            if share is None:
                return None
            return share - candidate_spend(session, plan.id, job.candidate)
        budget = plan_budget(plan, config)
        if budget is None:
            return None
        return Decimal(budget) - plan_spend(session, plan.id).usd


def daily_budget_reached(wctx: WorkerContext, plan: Plan, config: RepoConfig) -> bool:
    """Tell whether the repository has spent its daily budget today."""
    if config.budget.daily_usd is None:
        return False
    with wctx.db.session() as session:
        spent = repository_spend_on(session, plan.repository_id, utcnow())
    return spent >= config.budget.daily_usd


def park(wctx: WorkerContext, job_id: int, until: datetime, reason: str) -> bool:
    """Put a running job back in the queue, not to start before until.

    A short wait (a provider's rate limit) is sent to the broker to run when it ends; a
    long one (tomorrow's budget) is left to the reconciler, which sends a parked job once
    its time has come, so no broker holds a task for hours.
    """
    parked = _park(wctx, job_id, until, reason)
    wait = (until - utcnow()).total_seconds()
    if parked and wait <= RESEND_WITHIN.total_seconds():
        wctx.send_task(RUN_JOB, countdown=max(wait, 0.0), job_id=job_id)
    return parked


def _park(wctx: WorkerContext, job_id: int, until: datetime, reason: str) -> bool:
    with wctx.db.session() as session:
        parked = (
            update(Job)
            .where(
                Job.id == job_id, Job.lease_owner == wctx.worker_id, Job.state == JobState.RUNNING
            )
            .values(
                state=JobState.QUEUED,
                parked_until=until,
                parked_s=Job.parked_s + max((until - utcnow()).total_seconds(), 0.0),
                # Waiting is not a try: only a worker lost mid-job counts toward giving up.
                attempts=Job.attempts - 1,
                lease_owner=None,
                lease_expires_at=None,
                error=reason,
            )
        )
        return rows_changed(session, parked) == 1


def tomorrow() -> datetime:
    """Return the start of the next UTC day, when daily budgets begin again."""
    return next_day(utcnow())


def quota_reset(retry_after_s: float | None) -> datetime:
    """Return when to try again after a quota or rate limit."""
    wait = timedelta(seconds=retry_after_s) if retry_after_s else QUOTA_BACKOFF
    return utcnow() + wait
