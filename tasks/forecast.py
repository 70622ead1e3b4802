"""Conflict forecast: approved plans whose file scopes meet do not execute at once.

A plan's revision names the files it will change (its Scope section, paths or globs),
stored with the revision when it is written. Before an agent edits a repository, its job
looks at the jobs that came before it there: an execute or rework job of another plan,
still queued or running, whose approved scope meets this plan's, holds it back until
that job ends. Either plan approved with `/approve parallel` is held by none and holds
none; a plan that states no scope cannot be forecast and is not held.

Only earlier jobs (lower ids) hold a job, so two plans never wait for each other, and
two workers looking at once agree on which goes first. A part of a split plan also waits
for the parts it comes after (`(after N)`, bot/parts.py) to be merged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from bot.models import (
    Approval,
    ApprovalKind,
    Candidate,
    Job,
    JobState,
    Plan,
    PlanPart,
    PlanRevision,
    PlanState,
    Stage,
    utcnow,
)
from bot.plans import WAITING_FOR_PLAN, latest_plan, parent_of, waiting_key, wake_waiting
from bot.queue import RUN_JOB
from bot.status import publish_status
from tasks.checks.diffcheck import path_matches
from tasks.context import WorkerContext
from tasks.slots import mark_waiting
from tasks.stages.costs import park

EDITING_STAGES = frozenset({Stage.EXECUTE, Stage.REWORK})
# A job waiting for a plan is sent again when that plan's editing job ends or its pull
# request merges (wake_waiters, and bot/handlers/pulls.py); this is only the fallback.
WAIT_AGAIN = timedelta(seconds=60)
_WILDCARD = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Approved:
    """What a plan was approved to change, and whether it may run beside others."""

    scope: tuple[str, ...]
    parallel: bool


@dataclass(frozen=True)
class Blocker:
    """The plan a job waits for, and the words that say why."""

    plan_id: int
    why: str

    @property
    def key(self) -> str:
        return waiting_key(self.plan_id)

    def __str__(self) -> str:
        return f"queued: {self.why}"


def _meeting(issue_number: int, mine: str, theirs: str) -> str:
    where = f"`{mine}`" if mine == theirs else f"`{mine}` and `{theirs}`"
    return (
        f"waits for #{issue_number}, whose scope meets this plan's at {where}; "
        "`/approve parallel` lets them run together"
    )


def scopes_meet(mine: Sequence[str], theirs: Sequence[str]) -> tuple[str, str] | None:
    """The first pair of entries that could name one file, or None when none could."""
    for one in mine:
        for other in theirs:
            if entries_meet(one, other):
                return one, other
    return None


def entries_meet(one: str, other: str) -> bool:
    """Could a path match both? Exact for a plain path against anything; for two globs,
    they meet unless their fixed leading folders part ways (`src/a/*` and `docs/*`)."""
    if not _WILDCARD.search(one):
        return path_matches(other, one) or path_matches(one, other)
    if not _WILDCARD.search(other):
        return path_matches(one, other)
    mine, theirs = _fixed_folders(one), _fixed_folders(other)
    shorter = min(len(mine), len(theirs))
    return mine[:shorter] == theirs[:shorter]


def _fixed_folders(glob: str) -> list[str]:
    """The folders before a glob's first wildcard; a glob with no slash may be anywhere."""
    glob = glob.strip().removeprefix("./").lstrip("/")
    if "/" not in glob.rstrip("/"):
        return []
    fixed = glob[: _WILDCARD.search(glob).start()]  # type: ignore[union-attr]
    return fixed.split("/")[:-1]


def approved(session: Session, plan: Plan) -> Approved:
    """The approved revision's scope, and whether its approval said `parallel`."""
    revision = session.scalar(
        select(PlanRevision).where(
            PlanRevision.plan_id == plan.id, PlanRevision.number == plan.approved_revision
        )
    )
    parallel = session.scalar(
        select(Approval.parallel)
        .where(
            Approval.plan_id == plan.id,
            Approval.kind == ApprovalKind.PLAN,
            Approval.revision == plan.approved_revision,
            Approval.voided_at.is_(None),
        )
        .order_by(Approval.id.desc())
        .limit(1)
    )
    return Approved(tuple(revision.scope or ()) if revision else (), bool(parallel))


def blocker_of(session: Session, job: Job) -> Blocker | None:
    """What holds the job back: an earlier part of its split not merged yet, or the earlier
    editing job of another plan whose scope meets this one's; None when nothing does."""
    plan = session.get_one(Plan, job.plan_id)
    return _earlier_part(session, plan) or _overlapping(session, plan, job)


def _earlier_part(session: Session, plan: Plan) -> Blocker | None:
    """A part waits for the parts it comes after (`(after N)`) to be merged."""
    parent_id = parent_of(session, plan)
    if parent_id is None:
        return None
    parts = {
        part.number: part
        for part in session.scalars(select(PlanPart).where(PlanPart.plan_id == parent_id))
    }
    mine = next(part for part in parts.values() if part.issue_number == plan.issue_number)
    for number in mine.after:
        earlier = parts[number].issue_number
        done = earlier and latest_plan(session, plan.repository_id, earlier)
        if not done or done.state != PlanState.MERGED:
            child = done.id if done else parent_id
            return Blocker(
                child, f"part {mine.number} executes once part {number} (#{earlier}) is merged"
            )
    return None


def _overlapping(session: Session, plan: Plan, job: Job) -> Blocker | None:
    mine = approved(session, plan)
    if not mine.scope or mine.parallel:
        return None
    earlier = session.execute(
        select(Plan)
        .join(Job, Job.plan_id == Plan.id)
        .where(
            Plan.repository_id == plan.repository_id,
            Plan.id != plan.id,
            Job.stage.in_(EDITING_STAGES),
            Job.state.in_((JobState.QUEUED, JobState.RUNNING)),
            Job.id < job.id,
        )
        .order_by(Job.id)
    ).scalars()
    for other in earlier.unique():
        if _earlier_part(session, other) is not None:
            continue  # it waits for parts to merge, not to edit: it holds nobody meanwhile
        theirs = approved(session, other)
        meet = None if theirs.parallel else scopes_meet(mine.scope, theirs.scope)
        if meet:
            return Blocker(other.id, _meeting(other.issue_number, *meet))
    return None


def wait_for_scope(wctx: WorkerContext, job: Job) -> bool:
    """Hold an editing job back while an earlier plan with a meeting scope executes;
    True if it was parked to look again (and the status comment says for what)."""
    if job.stage not in EDITING_STAGES:
        return False
    with wctx.db.session() as session:
        blocker = blocker_of(session, job)
        plan = session.get_one(Plan, job.plan_id)
    if blocker is None:
        if job.waiting_on and job.waiting_on.startswith(WAITING_FOR_PLAN):
            mark_waiting(wctx.db, job.id, None)  # its wait is over: its work starts now
        if job.stage == Stage.EXECUTE and plan.branch is None and _comes_after(wctx, plan):
            _rebase(wctx, plan)
        return False
    mark_waiting(wctx.db, job.id, blocker.key)
    stands = str(blocker)
    if park(wctx, job.id, utcnow() + WAIT_AGAIN, stands) and stands != job.error:
        publish_status(
            wctx.db, wctx.client(plan.installation_id, plan.repository.full_name), plan.id
        )
    return True


def _comes_after(wctx: WorkerContext, plan: Plan) -> bool:
    with wctx.db.session() as session:
        parent_id = parent_of(session, plan)
        return parent_id is not None and bool(
            session.scalar(
                select(PlanPart.after).where(
                    PlanPart.plan_id == parent_id, PlanPart.issue_number == plan.issue_number
                )
            )
        )


def _rebase(wctx: WorkerContext, plan: Plan) -> None:
    """A part that waited for earlier parts starts from the default branch they merged
    into, not from the one its approval saw (only before its branch exists: a resumed job
    goes on from its pushed branch)."""
    head = wctx.client(plan.installation_id, plan.repository.full_name).default_branch_sha()
    started = select(Candidate.id).where(
        Candidate.plan_id == plan.id, Candidate.branch.is_not(None)
    )
    with wctx.db.session() as session:
        session.execute(
            update(Plan)
            # Nor once a candidate has a branch: its diff is measured against this base.
            .where(Plan.id == plan.id, Plan.branch.is_(None), ~exists(started))
            .values(base_sha=head)
            .execution_options(synchronize_session=False)
        )


def wake_waiters(wctx: WorkerContext, job: Job) -> None:
    """An editing job that ended no longer holds anyone: send the jobs waiting for its plan
    now rather than at their next look."""
    if job.stage not in EDITING_STAGES:
        return
    with wctx.db.session() as session:
        if session.scalar(select(Job.state).where(Job.id == job.id)) == JobState.QUEUED:
            return  # parked: it still holds them
        waiting = wake_waiting(session, [job.plan_id])
    for job_id in waiting:
        wctx.send_task(RUN_JOB, job_id=job_id)
