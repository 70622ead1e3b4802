"""Clean up after a plan ends, or after a reviewer picked one of its candidates: worktrees,
and branches unless work could still resume from them."""

from __future__ import annotations

from sqlalchemy import select

from bot.models import Candidate, CandidateState, Plan, PlanState
from bot.states import TERMINAL
from tasks.context import WorkerContext
from tasks.worktrees import WorktreePool, mirror_path, plan_key

# A failed plan may be retried from its pushed branches; every other ending frees them.
_KEEP_BRANCH = frozenset({PlanState.FAILED})


def cleanup_plan(wctx: WorkerContext, *, plan_id: int) -> None:
    """Drop, on this worker and on GitHub, what the plan no longer needs: everything once it
    has ended, and the candidates a reviewer did not pick while it goes on."""
    with wctx.db.session() as session:
        plan = session.get_one(Plan, plan_id)
        candidates = session.scalars(select(Candidate).where(Candidate.plan_id == plan_id)).all()
    ended = plan.state in TERMINAL
    free_branches = ended and plan.state not in _KEEP_BRANCH
    keys = [plan_key(plan.id)] if ended else []
    branches = [plan.branch] if plan.branch and free_branches else []
    for candidate in candidates:
        if ended or candidate.state == CandidateState.DROPPED:
            keys.append(plan_key(plan.id, candidate.number))
        dropped = candidate.state == CandidateState.DROPPED or free_branches
        if candidate.branch and dropped and candidate.branch != plan.branch:
            branches.append(candidate.branch)
    mirror = mirror_path(wctx.settings.home, plan.repository.full_name)
    if (mirror / "HEAD").exists():
        pool = WorktreePool(wctx.settings.home, plan.repository.full_name, mirror)
        for key in keys:
            pool.discard(key)
    client = wctx.client(plan.installation_id, plan.repository.full_name)
    for branch in branches:
        client.delete_branch(branch)
