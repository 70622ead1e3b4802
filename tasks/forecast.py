"""Conflict forecast: approved plans whose file scopes meet do not execute at once.

A plan's revision names the files it will change (its Scope section, paths or globs),
stored with the revision when it is written. Before an agent edits a repository, its job
looks at the jobs that came before it there: an execute or rework job of another plan,
still queued or running, whose approved scope meets this plan's, holds it back until
that job ends. Either plan approved with `/approve parallel` is held by none and holds
none; a plan that states no scope cannot be forecast and is not held.

Only earlier jobs (lower ids) hold a job, so two plans never wait for each other, and
two workers looking at once agree on which goes first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.models import Approval, ApprovalKind, Job, JobState, Plan, PlanRevision, Stage, utcnow
from bot.status import publish_status
from tasks.checks.diffcheck import path_matches
from tasks.context import WorkerContext
from tasks.slots import LOOK_AGAIN, mark_waiting
from tasks.stages.costs import park

EDITING_STAGES = frozenset({Stage.EXECUTE, Stage.REWORK})
_WILDCARD = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Approved:
    """What a plan was approved to change, and whether it may run beside others."""

    scope: tuple[str, ...]
    parallel: bool


@dataclass(frozen=True)
class Blocker:
    """The plan a job waits for, and where their scopes meet."""

    plan_id: int
    issue_number: int
    mine: str
    theirs: str

    @property
    def key(self) -> str:
        return f"plan:{self.plan_id}"

    def __str__(self) -> str:
        where = (
            f"`{self.mine}`" if self.mine == self.theirs else f"`{self.mine}` and `{self.theirs}`"
        )
        return (
            f"queued: waits for #{self.issue_number}, whose scope meets this plan's at "
            f"{where}; `/approve parallel` lets them run together"
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
    """The earlier editing job of another plan whose scope meets this one's, if any."""
    plan = session.get_one(Plan, job.plan_id)
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
        theirs = approved(session, other)
        meet = None if theirs.parallel else scopes_meet(mine.scope, theirs.scope)
        if meet:
            return Blocker(other.id, other.issue_number, *meet)
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
        if job.waiting_on and job.waiting_on.startswith("plan:"):
            mark_waiting(wctx.db, job.id, None)  # its wait is over: its work starts now
        return False
    mark_waiting(wctx.db, job.id, blocker.key)
    stands = str(blocker)
    if park(wctx, job.id, utcnow() + LOOK_AGAIN, stands) and stands != job.error:
        publish_status(
            wctx.db, wctx.client(plan.installation_id, plan.repository.full_name), plan.id
        )
    return True
