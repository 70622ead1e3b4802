"""Change a plan's state in one place, by compare-and-swap, with an audit trail."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from bot.db import rows_changed
from bot.memory import plan_ended
from bot.models import AuditEvent, Job, JobState, Plan, PlanPart, PlanState, utcnow
from bot.repo_config import RepoConfig
from bot.states import TERMINAL, Event, next_state


def active_key(repository_id: int, issue_number: int) -> str:
    """Return the key that makes one issue hold at most one active plan."""
    return f"{repository_id}#{issue_number}"


def advance(
    session: Session,
    plan: Plan,
    event: Event,
    *,
    actor: str,
    reason: str | None = None,
    **changes: Any,
) -> bool:
    """Move plan by event if it applies and nobody moved it first; return whether it moved."""
    target = next_state(plan.state, event)
    if target is None:
        return False
    values = {"state": target, "version": plan.version + 1, **changes}
    if target in TERMINAL:
        values["active_key"] = None
    elif plan.state in TERMINAL:
        values["active_key"] = active_key(plan.repository_id, plan.issue_number)
    moved = rows_changed(
        session,
        update(Plan)
        .where(Plan.id == plan.id, Plan.version == plan.version)
        .values(**values)
        .execution_options(synchronize_session=False),
    )
    if moved != 1:
        return False
    session.add(
        AuditEvent(
            plan_id=plan.id,
            actor=actor,
            action=event.value,
            from_state=plan.state.value,
            to_state=target.value,
            reason=reason,
        )
    )
    session.refresh(plan)
    if target in TERMINAL:
        plan_ended(session, plan)
    return True


def active_plan(session: Session, repository_id: int, issue_number: int) -> Plan | None:
    """Return the issue's active plan, if it has one."""
    key = active_key(repository_id, issue_number)
    return session.scalars(select(Plan).where(Plan.active_key == key)).one_or_none()


def latest_plan(session: Session, repository_id: int, issue_number: int) -> Plan | None:
    """Return the issue's most recent plan, active or ended."""
    return session.scalars(
        select(Plan)
        .where(Plan.repository_id == repository_id, Plan.issue_number == issue_number)
        .order_by(Plan.id.desc())
        .limit(1)
    ).one_or_none()


def new_plan(
    config: RepoConfig,
    default_agent: str | None,
    *,
    repository_id: int,
    installation_id: int,
    issue: dict[str, Any],
    clone_url: str,
    priority: int,
) -> Plan:
    """A plan for the issue (as GitHub renders it), with its repository's settings."""
    return Plan(
        repository_id=repository_id,
        installation_id=installation_id,
        issue_number=issue["number"],
        issue_title=issue.get("title") or "",
        issue_author=(issue.get("user") or {}).get("login", ""),
        clone_url=clone_url,
        agent=config.agent or default_agent,
        model=config.model,
        budget_usd=config.budget.plan_usd,
        priority=priority,
        concurrency=config.concurrency,
    )


def start_plan(session: Session, plan: Plan) -> bool:
    """Insert a new plan unless the issue already has an active one; return whether it did."""
    plan.active_key = active_key(plan.repository_id, plan.issue_number)
    plan.state = PlanState.PLANNING
    try:
        with session.begin_nested():
            session.add(plan)
    except IntegrityError:
        return False
    return True


def add_job(session: Session, plan: Plan, stage: str, key: str, **fields: Any) -> Job | None:
    """Queue a job once: a second job with the same key for the plan is not created. It
    runs the plan's agent and model unless fields name its own (a candidate's)."""
    fields = {"agent": plan.agent, "model": plan.model, **fields}
    job = Job(plan_id=plan.id, stage=stage, key=key, **fields)
    try:
        with session.begin_nested():
            session.add(job)
    except IntegrityError:
        return None
    return job


# What a job waiting for a plan (its scope's overlap, or a part's merge) records in
# `jobs.waiting_on`, before the plan's id.
WAITING_FOR_PLAN = "plan:"


def waiting_key(plan_id: int) -> str:
    return f"{WAITING_FOR_PLAN}{plan_id}"


def wake_waiting(session: Session, plan_ids: list[int]) -> list[int]:
    """End the park of the queued jobs waiting for any of these plans, and return them, to
    be sent at once now that one has moved."""
    keys = [waiting_key(plan_id) for plan_id in plan_ids]
    waiting = (Job.state == JobState.QUEUED, Job.waiting_on.in_(keys))
    ids = list(session.scalars(select(Job.id).where(*waiting)))
    session.execute(
        update(Job)
        .where(Job.id.in_(ids), *waiting)
        # Due now: claimable, and sent again by the reconciler should this message be lost.
        .values(parked_until=utcnow())
        .execution_options(synchronize_session=False)
    )
    return ids


def parent_of(session: Session, plan: Plan) -> int | None:
    """The split plan this plan's issue is a part of, if any."""
    parent = split_parent(session, plan.repository_id, plan.issue_number)
    return parent.id if parent is not None else None


def parts_all_merged(session: Session, parent_id: int) -> list[int] | None:
    """The issue numbers of a split plan's parts once every part's plan has merged, or None."""
    parent = session.get_one(Plan, parent_id)
    numbers = list(
        session.scalars(
            select(PlanPart.issue_number)
            .where(PlanPart.plan_id == parent_id)
            .order_by(PlanPart.number)
        )
    )
    for number in numbers:
        child = number and latest_plan(session, parent.repository_id, number)
        if not child or child.state != PlanState.MERGED:
            return None
    return [number for number in numbers if number]


def split_parent(session: Session, repository_id: int, issue_number: int) -> Plan | None:
    """The split plan whose part this issue is, if any."""
    parent_id = session.scalar(
        select(PlanPart.plan_id)
        .join(Plan, Plan.id == PlanPart.plan_id)
        .where(Plan.repository_id == repository_id, PlanPart.issue_number == issue_number)
        .order_by(PlanPart.id.desc())
        .limit(1)
    )
    return session.get(Plan, parent_id) if parent_id is not None else None


def inherit_from_parent(session: Session, plan: Plan) -> None:
    """A part's plan answers to its parent's issue author (the bot opened the part's issue,
    so `allow_self_approval` would otherwise not hold) and keeps the parent's priority."""
    parent = split_parent(session, plan.repository_id, plan.issue_number)
    if parent is not None:
        plan.issue_author = parent.issue_author
        if parent.priority is not None:
            plan.priority = parent.priority
