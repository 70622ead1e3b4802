"""Write a plan: the agent reads the default branch in a read-only worktree and answers."""

from __future__ import annotations

import os
from pathlib import Path

from bot.models import Job, JobState, Plan, PlanRevision, PlanState
from bot.plans import advance
from bot.states import Event
from bot.status import publish_status
from tasks.agents import AgentResult, load_agents, run_agent
from tasks.context import WorkerContext
from tasks.leases import finish, is_cancelled
from tasks.prompts import IssueText, plan_prompt
from tasks.worktrees import ensure_mirror, readonly_worktree, resolve_ref


def run_planning(wctx: WorkerContext, job: Job) -> None:
    """Draft the plan's next revision and post it on the issue."""
    with wctx.db.session() as session:
        plan = session.get_one(Plan, job.plan_id)
        full_name = plan.repository.full_name
        previous = plan.revisions[-1].body if plan.revisions else None
    if plan.state != PlanState.PLANNING:
        finish(wctx.db, job.id, wctx.worker_id, JobState.CANCELLED, "plan is no longer planning")
        return
    client = wctx.client(plan.installation_id, full_name)
    issue, comments = client.issue_thread(plan.issue_number)
    prompt = plan_prompt(
        IssueText(plan.issue_number, issue.title or "", issue.body or "", comments),
        previous=previous if job.feedback else None,
        feedback=job.feedback,
    )
    result = _draft(wctx, plan, job, client.repo.default_branch, prompt)
    _record(wctx, plan, job, result)
    publish_status(wctx.db, client, plan.id)


def job_dir(wctx: WorkerContext, job: Job) -> Path:
    """Return the folder that keeps one job's prompt and logs."""
    path = wctx.settings.home / "jobs" / str(job.plan_id) / f"{job.id}-{job.stage}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _draft(wctx: WorkerContext, plan: Plan, job: Job, branch: str, prompt: str) -> AgentResult:
    token = wctx.github_app.token(plan.installation_id)
    mirror = ensure_mirror(wctx.settings.home, plan.repository.full_name, plan.clone_url, token)
    spec = load_agents(wctx.setting("agents", None))[plan.agent or wctx.settings.default_agent]
    with readonly_worktree(mirror, resolve_ref(mirror, branch), wctx.settings.home) as worktree:
        return run_agent(
            spec,
            stage=job.stage,
            prompt=prompt,
            workdir=worktree,
            job_dir=job_dir(wctx, job),
            model=plan.model,
            timeout_s=float(wctx.setting("agent_timeout_s", 3600)),
            idle_timeout_s=float(wctx.setting("agent_idle_timeout_s", 600)),
            source_env=os.environ,
            should_stop=lambda: is_cancelled(wctx.db, job.id),
        )


def _record(wctx: WorkerContext, plan: Plan, job: Job, result: AgentResult) -> None:
    text = result.text.strip()
    with wctx.db.session() as session:
        plan = session.get_one(Plan, plan.id, populate_existing=True)
        if result.ok and text:
            number = plan.current_revision + 1
            # Only a plan still in `planning` takes the revision: a cancelled one keeps nothing.
            if advance(session, plan, Event.PLAN_POSTED, actor="gaffer", current_revision=number):
                session.add(
                    PlanRevision(plan_id=plan.id, number=number, body=text, feedback=job.feedback)
                )
        else:
            error = result.error or "the agent finished without writing a plan"
            advance(
                session, plan, Event.PLAN_FAILED, actor="gaffer", reason=error, last_error=error
            )
    ok = result.ok and bool(text)
    finish(wctx.db, job.id, wctx.worker_id, JobState.DONE if ok else JobState.FAILED, result.error)
