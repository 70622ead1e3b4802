"""What the operator sees of plans and jobs, as JSON-ready data: the REST API (bot/api.py)
and the CLI (`gaffer plans`, `gaffer show`, `gaffer logs`) read the same shapes."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from bot.costs import plan_spend
from bot.models import (
    Approval,
    AuditEvent,
    CheckResult,
    Job,
    Plan,
    PlanRevision,
    PlanState,
    Repository,
    aware,
)

MAX_LISTED = 500


class Unknown(LookupError):
    """What was asked for is not in the database; the message says what."""


def plans(
    session: Session, *, repository: str | None = None, state: str | None = None
) -> list[dict[str, Any]]:
    """The newest plans first, of one repository and in one state when given."""
    query = select(Plan).join(Repository).order_by(Plan.id.desc()).limit(MAX_LISTED)
    if repository is not None:
        query = query.where(func.lower(Repository.full_name) == repository.lower())
    if state is not None:
        if state not in {each.value for each in PlanState}:
            raise Unknown(f"there is no plan state {state!r}")
        query = query.where(Plan.state == PlanState(state))
    return [_plan_row(session, plan) for plan in session.scalars(query)]


def find_plan(session: Session, reference: str) -> Plan:
    """The latest plan of `owner/repo#N`."""
    repository, _, number = reference.rpartition("#")
    if not repository or not number.isdigit():
        raise Unknown(f"{reference!r} is not owner/repo#number")
    plan = session.scalars(
        select(Plan)
        .join(Repository)
        .where(
            func.lower(Repository.full_name) == repository.lower(),
            Plan.issue_number == int(number),
        )
        .order_by(Plan.id.desc())
    ).first()
    if plan is None:
        raise Unknown(f"gaffer has no plan for {reference}")
    return plan


def plan_detail(session: Session, plan_id: int) -> dict[str, Any]:
    """One plan with its revisions, approvals, jobs, checks and timeline."""
    plan = session.get(Plan, plan_id)
    if plan is None:
        raise Unknown(f"there is no plan {plan_id}")
    of_plan = {"plan_id": plan.id}
    revisions = session.scalars(select(PlanRevision).filter_by(**of_plan).order_by("number"))
    approvals = session.scalars(select(Approval).filter_by(**of_plan).order_by(Approval.id))
    jobs = session.scalars(select(Job).filter_by(**of_plan).order_by(Job.id))
    checks = session.scalars(select(CheckResult).filter_by(**of_plan).order_by(CheckResult.id))
    events = session.scalars(select(AuditEvent).filter_by(**of_plan).order_by(AuditEvent.id))
    return {
        **_plan_row(session, plan),
        "branch": plan.branch,
        "base_sha": plan.base_sha,
        "head_sha": plan.head_sha,
        "approved_revision": plan.approved_revision,
        "last_error": plan.last_error,
        "revisions": [
            {
                "number": each.number,
                "created_at": _time(each.created_at),
                "feedback": each.feedback,
                "body": each.body,
                "lessons": each.memory or [],
            }
            for each in revisions
        ],
        "approvals": [
            {
                "kind": each.kind,
                "revision": each.revision,
                "sha": each.sha,
                "approver": each.approver,
                "at": _time(each.created_at),
                "voided_at": _time(each.voided_at),
            }
            for each in approvals
        ],
        "jobs": [job_row(each) for each in jobs],
        "checks": [
            {
                "name": each.name,
                "head_sha": each.head_sha,
                "conclusion": each.conclusion,
                "title": each.title,
                "url": each.html_url,
            }
            for each in checks
        ],
        "timeline": [
            {
                "at": _time(each.created_at),
                "actor": each.actor,
                "action": each.action,
                "from_state": each.from_state,
                "to_state": each.to_state,
                "reason": each.reason,
            }
            for each in events
        ],
    }


def job_row(job: Job) -> dict[str, Any]:
    """One job: what ran, on what, for how long, at what cost."""
    return {
        "id": job.id,
        "plan_id": job.plan_id,
        "stage": job.stage,
        "state": job.state.value,
        "agent": job.agent,
        "model": job.model,
        "attempts": job.attempts,
        "tokens": {
            "input": job.input_tokens,
            "output": job.output_tokens,
            "cache_read": job.cache_read_tokens,
            "cache_write": job.cache_write_tokens,
            "reasoning": job.reasoning_tokens,
        },
        "cost_usd": f"{job.cost_usd:.6f}",
        "cost_source": job.cost_source,
        "parked_until": _time(job.parked_until),
        "parked_s": round(job.parked_s, 1),
        "error": job.error,
        "created_at": _time(job.created_at),
        "started_at": _time(job.started_at),
        "finished_at": _time(job.finished_at),
        "inputs": job.inputs,
    }


def job(session: Session, job_id: int) -> Job:
    found = session.get(Job, job_id)
    if found is None:
        raise Unknown(f"there is no job {job_id}")
    return found


def job_folder(home: Path, found: Job) -> Path:
    """Where a job's prompt and logs are kept, under GAFFER_HOME of the machine that ran it."""
    return home / "jobs" / str(found.plan_id) / f"{found.id}-{found.stage}"


def job_logs(home: Path, found: Job) -> list[Path]:
    """The job's logs (its agent's runs, then each check), oldest first."""
    folder = job_folder(home, found)
    if not folder.is_dir():
        raise Unknown(
            f"job {found.id}'s logs are not on this machine: they are kept under GAFFER_HOME "
            "where its worker ran"
        )
    return sorted(folder.glob("*.log"), key=lambda path: (path.stat().st_mtime, path.name))


def _plan_row(session: Session, plan: Plan) -> dict[str, Any]:
    return {
        "id": plan.id,
        "repository": plan.repository.full_name,
        "issue": plan.issue_number,
        "title": plan.issue_title,
        "state": plan.state.value,
        "revision": plan.current_revision,
        "agent": plan.agent,
        "pr": plan.pr_number,
        "cost_usd": f"{plan_spend(session, plan.id).usd:.4f}",
        "created_at": _time(plan.created_at),
        "updated_at": _time(plan.updated_at),
    }


def _time(moment: datetime | None) -> str | None:
    return aware(moment).isoformat() if moment else None
