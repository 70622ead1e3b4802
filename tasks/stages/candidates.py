"""Carry out one candidate of a best-of-N plan (bot/candidates.py): its own agent, branch
and worktree, verified like any plan's work, without moving the plan until the last
candidate ends."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.candidates import ENDED, live_candidates
from bot.costs import candidate_spend
from bot.models import (
    Candidate,
    CandidateState,
    CheckResult,
    Job,
    JobState,
    Plan,
    PlanRevision,
    PlanState,
    Stage,
    aware,
    utcnow,
)
from bot.plans import advance
from bot.repo_config import BUILT_IN_CHECKS, fetch_repo_config
from bot.states import Event
from bot.status import publish_status
from tasks.checks.diffcheck import analyse, changed_files, plan_scope
from tasks.context import WorkerContext
from tasks.leases import finish
from tasks.stages.costs import park
from tasks.stages.execution import (
    StopWork,
    agent_run,
    branch_name,
    commit_and_push,
    leased_worktree,
    pushed_head,
    stage_guidance,
    start_work,
    workspace_for,
)
from tasks.stages.prompts import execute_prompt, fix_prompt
from tasks.stages.stage_agent import Held
from tasks.stages.verification import verify
from tasks.stages.workspace import Workspace
from tasks.worktrees import create_branch, mirror_path


def run_candidate(wctx: WorkerContext, job: Job) -> None:
    """Run one candidate through its agent, checks and fix rounds; the last to end moves
    the plan to review (or to failed when no candidate has a head to show)."""
    plan = start_work(wctx, job)
    if plan is None:
        return
    number = job.candidate
    assert number is not None
    client = wctx.client(plan.installation_id, plan.repository.full_name)
    _update(wctx, plan.id, number, state=CandidateState.RUNNING)
    publish_status(wctx.db, client, plan.id)
    try:
        config = fetch_repo_config(client, wctx.setting("defaults", None))
        with leased_worktree(wctx, plan, plan.base_sha or "", number) as worktree:
            space = workspace_for(wctx, job, plan, client, config, worktree)
            _on_branch(space, number)
            _work_and_verify(space, number)
        finish(wctx.db, job.id, wctx.worker_id, JobState.DONE)
        _ended(wctx, plan.id, number, CandidateState.VERIFIED)
    except Held as held:
        if park(wctx, job.id, held.until, str(held)) and held.tell:
            client.reply(plan.issue_number, f"gaffer is holding candidate c{number}: {held}")
        publish_status(wctx.db, client, plan.id)
        return
    except Exception as error:  # noqa: BLE001 - the candidate fails; the others go on
        why = str(error) if isinstance(error, StopWork) else f"{type(error).__name__}: {error}"
        finish(wctx.db, job.id, wctx.worker_id, JobState.FAILED, why)
        _ended(wctx, plan.id, number, CandidateState.FAILED, why)
    _last_one_moves_the_plan(wctx, plan.id)
    publish_status(wctx.db, client, plan.id)


def _on_branch(space: Workspace, number: int) -> None:
    """Check out the candidate's branch: its pushed head when it has one (a resumed or
    retried candidate goes on from it), else a new branch at the plan's base."""
    plan = space.plan
    branch = f"{branch_name(plan.issue_number, plan.issue_title)}-c{number}"
    start = pushed_head(space.mirror, branch) or plan.base_sha or ""
    create_branch(space.worktree, branch, start)
    _update(space.wctx, plan.id, number, branch=branch)
    # The workspace's plan is this job's own copy: committing and pushing go to the branch.
    plan.branch = branch


def _work_and_verify(space: Workspace, number: int) -> None:
    prompt = execute_prompt(
        stage_guidance(space, ["execute"]), space.issue, space.plan_text, feedback=None
    )
    agent_run(space, Stage.EXECUTE, prompt)
    head = commit_and_push(space)
    rounds = 0
    while True:
        _still_executing(space)
        _update(space.wctx, space.plan.id, number, head_sha=head, fix_rounds=rounds)
        verdict = verify(space, head)
        if verdict.green or rounds >= space.config.max_retries:
            return
        rounds += 1
        guidance = stage_guidance(space, ["fix"])
        agent_run(
            space, Stage.FIX, fix_prompt(guidance, space.issue, space.plan_text, verdict.failures)
        )
        head = commit_and_push(space)


def _still_executing(space: Workspace) -> None:
    with space.wctx.db.session() as session:
        state = session.scalar(select(Plan.state).where(Plan.id == space.plan.id))
    if state != PlanState.EXECUTING:
        raise StopWork(f"the plan is {state}; stopping")


def _ended(
    wctx: WorkerContext, plan_id: int, number: int, state: CandidateState, error: str | None = None
) -> None:
    """End the candidate with what ranks it: its checks, diff, cost and time, kept in the
    same write as its end, so the plan never shows an ended candidate unmeasured."""
    with wctx.db.session() as session:
        plan = session.get_one(Plan, plan_id)
        candidate = _candidate(session, plan_id, number)
        candidate.state, candidate.error = state, error
        jobs = select(Job).where(Job.plan_id == plan_id, Job.candidate == number)
        candidate.cost_usd = candidate_spend(session, plan_id, number)
        candidate.seconds = sum(
            (aware(each.finished_at or utcnow()) - aware(each.started_at)).total_seconds()
            for each in session.scalars(jobs)
            if each.started_at
        )
        head = candidate.head_sha
        if head is None:
            return
        checks = session.scalars(
            select(CheckResult).where(CheckResult.plan_id == plan_id, CheckResult.head_sha == head)
        ).all()
        candidate.checks_total = len(checks)
        candidate.checks_passed = sum(
            each.conclusion == "success"
            or (each.name in BUILT_IN_CHECKS and each.conclusion == "neutral")
            for each in checks
        )
        scope = session.scalar(
            select(PlanRevision.body).where(
                PlanRevision.plan_id == plan_id, PlanRevision.number == plan.approved_revision
            )
        )
        mirror = mirror_path(wctx.settings.home, plan.repository.full_name)
        report = analyse(
            changed_files(mirror, plan.base_sha or "", head),
            scope=plan_scope(scope or ""),
            protected_paths=[],
            conflicts=[],
        )
        candidate.files_changed = report.files
        candidate.lines_changed = report.added + report.removed
        candidate.outside_scope = len(report.out_of_scope)


def _last_one_moves_the_plan(wctx: WorkerContext, plan_id: int) -> None:
    """Once every candidate has ended, the plan waits in review with them ranked; with no
    candidate that has a head, it fails. The plan is locked, so of two candidates ending
    at once exactly one moves it."""
    with wctx.db.session() as session:
        session.execute(select(Plan.id).where(Plan.id == plan_id).with_for_update())
        plan = session.get_one(Plan, plan_id, populate_existing=True)
        candidates = live_candidates(session, plan_id)
        if plan.state != PlanState.EXECUTING or not all(c.state in ENDED for c in candidates):
            return
        if any(each.head_sha for each in candidates):
            advance(session, plan, Event.CANDIDATES_READY, actor="gaffer")
            return
        why = "no candidate finished: " + "; ".join(
            f"c{each.number}: {each.error}" for each in candidates
        )
        advance(session, plan, Event.WORK_FAILED, actor="gaffer", reason=why, last_error=why)


def _candidate(session: Session, plan_id: int, number: int) -> Candidate:
    return session.scalars(
        select(Candidate).where(Candidate.plan_id == plan_id, Candidate.number == number)
    ).one()


def _update(wctx: WorkerContext, plan_id: int, number: int, **values: Any) -> None:
    with wctx.db.session() as session:
        candidate = _candidate(session, plan_id, number)
        for name, value in values.items():
            setattr(candidate, name, value)
