"""`/metrics` for Prometheus, read from the database when scraped.

Every count comes from the rows gaffer keeps anyway (deliveries, command receipts, the audit
log, jobs, check results), so one scrape of any web process shows what every process and
machine did, survives restarts, and needs no shared metrics store. Counters count rows that
only ever grow; gauges read the present (plans by state, the queue, busy slots, parked jobs).
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector
from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from bot.db import Database
from bot.models import (
    AuditEvent,
    CheckResult,
    CommandReceipt,
    Delivery,
    Job,
    JobState,
    Plan,
    Repository,
    aware,
    utcnow,
)


class GafferCollector(Collector):
    """Collect gaffer's metrics from its database at each scrape."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[Metric]:
        with self.db.session() as session:
            yield from _deliveries(session)
            yield _commands(session)
            yield _transitions(session)
            yield _plans(session)
            yield from _jobs(session)
            yield from _spend(session)
            yield _checks(session)


def _deliveries(session: Session) -> Iterator[Metric]:
    outcome = case(
        (Delivery.processed_at.is_not(None), "processed"),
        (Delivery.error.is_not(None), "failing"),
        else_="waiting",
    )
    family = CounterMetricFamily(
        "gaffer_deliveries",
        "Webhook deliveries stored, by event and outcome (processed, failing, waiting)",
        labels=["source", "event", "outcome"],
    )
    yield _counted(session, family, Delivery.source, Delivery.event, outcome)


def _commands(session: Session) -> Metric:
    family = CounterMetricFamily(
        "gaffer_commands",
        "Slash commands seen, by name and outcome (done, answered, refused, quieted)",
        labels=["command", "outcome"],
    )
    outcome = func.coalesce(CommandReceipt.outcome, "done")
    return _counted(session, family, CommandReceipt.command, outcome)


def _transitions(session: Session) -> Metric:
    family = CounterMetricFamily(
        "gaffer_plan_transitions",
        "Plan state changes, by the state left and the state entered",
        labels=["from_state", "to_state"],
    )
    entered = AuditEvent.to_state.is_not(None)
    return _counted(session, family, AuditEvent.from_state, AuditEvent.to_state, where=entered)


def _counted(
    session: Session, family: CounterMetricFamily, *columns: Any, where: Any = None
) -> CounterMetricFamily:
    """Add to family the number of rows for each combination of the columns' values."""
    query = select(*columns, func.count()).group_by(*columns)
    if where is not None:
        query = query.where(where)
    for *values, count in session.execute(query):
        family.add_metric(["" if value is None else str(value) for value in values], count)
    return family


def _plans(session: Session) -> Metric:
    family = GaugeMetricFamily("gaffer_plans", "Plans by state now", labels=["state"])
    for state, count in session.execute(select(Plan.state, func.count()).group_by(Plan.state)):
        family.add_metric([state.value], count)
    return family


def _jobs(session: Session) -> Iterator[Metric]:
    durations = SummaryMetricFamily(
        "gaffer_job_duration_seconds",
        "Finished jobs' time from start to end, by stage and agent",
        labels=["stage", "agent"],
    )
    finished = session.execute(
        select(Job.stage, Job.agent, Job.started_at, Job.finished_at).where(
            Job.started_at.is_not(None), Job.finished_at.is_not(None)
        )
    )
    sums: dict[tuple[str, str], tuple[int, float]] = {}
    for stage, agent, started, ended in finished:
        assert started is not None and ended is not None  # selected so
        key = (stage, agent or "")
        count, total = sums.get(key, (0, 0.0))
        sums[key] = (count + 1, total + (aware(ended) - aware(started)).total_seconds())
    for (stage, agent), (count, total) in sorted(sums.items()):
        durations.add_metric([stage, agent], count_value=count, sum_value=total)
    yield durations
    queued = GaugeMetricFamily("gaffer_queue_depth", "Jobs waiting for a worker", labels=["stage"])
    busy = GaugeMetricFamily("gaffer_slots_busy", "Jobs running now", labels=["stage"])
    for stage, state, count in session.execute(
        select(Job.stage, Job.state, func.count())
        .where(Job.state.in_((JobState.QUEUED, JobState.RUNNING)), Job.parked_until.is_(None))
        .group_by(Job.stage, Job.state)
    ):
        (queued if state == JobState.QUEUED else busy).add_metric([stage], count)
    yield queued
    yield busy
    parked = session.scalar(
        select(func.count()).where(Job.parked_until.is_not(None), Job.parked_until > utcnow())
    )
    yield GaugeMetricFamily(
        "gaffer_jobs_parked", "Jobs waiting for a provider's quota to reset", value=parked or 0
    )


def _spend(session: Session) -> Iterator[Metric]:
    dollars = CounterMetricFamily(
        "gaffer_agent_cost_usd",
        "What agents cost, by repository and agent",
        labels=["repository", "agent"],
    )
    tokens = CounterMetricFamily(
        "gaffer_agent_tokens",
        "Tokens agents used, by repository, agent and kind",
        labels=["repository", "agent", "kind"],
    )
    kinds = {
        "input": Job.input_tokens,
        "output": Job.output_tokens,
        "cache_read": Job.cache_read_tokens,
        "cache_write": Job.cache_write_tokens,
        "reasoning": Job.reasoning_tokens,
    }
    rows = session.execute(
        select(
            Repository.full_name,
            Job.agent,
            func.sum(Job.cost_usd),
            *(func.sum(column) for column in kinds.values()),
        )
        .join(Plan, Plan.id == Job.plan_id)
        .join(Repository, Repository.id == Plan.repository_id)
        .where(Job.agent.is_not(None))
        .group_by(Repository.full_name, Job.agent)
    )
    for repository, agent, cost, *counts in rows:
        dollars.add_metric([repository, agent or ""], float(Decimal(cost or 0)))
        for kind, count in zip(kinds, counts, strict=True):
            tokens.add_metric([repository, agent or "", kind], int(count or 0))
    yield dollars
    yield tokens


def _checks(session: Session) -> Metric:
    family = CounterMetricFamily(
        "gaffer_check_runs",
        "Verifications recorded, by check and conclusion",
        labels=["check", "conclusion"],
    )
    conclusion = func.coalesce(CheckResult.conclusion, "pending")
    return _counted(session, family, CheckResult.name, conclusion)
