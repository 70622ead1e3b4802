"""Clean up after a plan ends: its worktree, and its branch unless work could still resume."""

from __future__ import annotations

from bot.models import Plan, PlanState
from tasks.context import WorkerContext
from tasks.worktrees import WorktreePool, mirror_path, plan_key

# A failed plan may be retried from its pushed branch; every other ending frees it.
_KEEP_BRANCH = frozenset({PlanState.FAILED})


def cleanup_plan(wctx: WorkerContext, *, plan_id: int) -> None:
    """Drop the plan's worktree on this worker and its branch on GitHub."""
    with wctx.db.session() as session:
        plan = session.get_one(Plan, plan_id)
    mirror = mirror_path(wctx.settings.home, plan.repository.full_name)
    if (mirror / "HEAD").exists():
        WorktreePool(wctx.settings.home, plan.repository.full_name, mirror).discard(
            plan_key(plan.id)
        )
    if plan.branch and plan.state not in _KEEP_BRANCH:
        wctx.client(plan.installation_id, plan.repository.full_name).delete_branch(plan.branch)
