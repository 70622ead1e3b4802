"""Carry out one candidate of a best-of-N plan (bot/candidates.py): its own agent, branch
and worktree, verified like any plan's work, without moving the plan until the last
candidate ends."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.candidates import ENDED, live_candidates
from bot.costs import candidate_spend
from bot.github import RepoClient
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
from tasks.checks.diffcheck import DiffReport, analyse, changed_files, plan_scope
from tasks.context import WorkerContext
from tasks.gitcmd import GitError
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

log = logging.getLogger(__name__)


def run_candidate(wctx: WorkerContext, job: Job) -> None:
    """Run one candidate through its agent, checks and fix rounds; the last to end moves
    the plan to review (or to failed when no candidate has a head to show).

    The candidate's end and the plan's move are written before the job is finished, so a
    worker lost in between leaves a job the reconciler resumes, and the resumed job, finding
    its candidate ended, only moves the plan.
    """
    plan = start_work(wctx, job)
    if plan is None:
        return
    number = job.candidate
    assert number is not None
    client = wctx.client(plan.installation_id, plan.repository.full_name)
    state: CandidateState | None = _state_of(wctx, plan.id, number)
    why = None
    if state not in ENDED:
        state, why = _run(wctx, job, plan, client, number)
    if state is None:
        return  # parked until its provider or budget allows
    with wctx.db.session() as session:
        settle_plan(session, plan.id)
    finish(wctx.db, job.id, wctx.worker_id, _JOB_STATE[state], why)
    publish_status(wctx.db, client, plan.id)


_JOB_STATE = {CandidateState.VERIFIED: JobState.DONE, CandidateState.FAILED: JobState.FAILED}


def _run(
    wctx: WorkerContext, job: Job, plan: Plan, client: RepoClient, number: int
) -> tuple[CandidateState | None, str | None]:
    """Work and verify; return how the candidate ended and why, or None when it parked."""
    try:
        _update(wctx, plan.id, number, state=CandidateState.RUNNING)
        publish_status(wctx.db, client, plan.id)
        config = fetch_repo_config(client, wctx.setting("defaults", None))
        with leased_worktree(wctx, plan, plan.base_sha or "", number) as worktree:
            space = workspace_for(wctx, job, plan, client, config, worktree)
            _on_branch(space, number)
            _work_and_verify(space, number)
        state, why = CandidateState.VERIFIED, None
    except Held as held:
        if park(wctx, job.id, held.until, str(held)) and held.tell:
            client.reply(plan.issue_number, f"gaffer is holding candidate c{number}: {held}")
        publish_status(wctx.db, client, plan.id)
        return None, None
    except Exception as error:  # noqa: BLE001 - the candidate fails; the others go on
        state = CandidateState.FAILED
        why = str(error) if isinstance(error, StopWork) else f"{type(error).__name__}: {error}"
    _ended(wctx, plan.id, number, state, why)
    return state, why


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
    head = _pushed(space, number)
    rounds = 0
    while True:
        _update(space.wctx, space.plan.id, number, head_sha=head, fix_rounds=rounds)
        _still_executing(space)
        verdict = verify(space, head)
        if verdict.green or rounds >= space.config.max_retries:
            return
        rounds += 1
        guidance = stage_guidance(space, ["fix"])
        agent_run(
            space, Stage.FIX, fix_prompt(guidance, space.issue, space.plan_text, verdict.failures)
        )
        head = _pushed(space, number)


def _pushed(space: Workspace, number: int) -> str:
    """Commit and push the candidate's work; a candidate that changed nothing has no diff
    to compare (and would share its head with every other that changed nothing)."""
    head = commit_and_push(space)
    if head == space.plan.base_sha:
        raise StopWork(f"candidate c{number}'s agent changed nothing")
    return head


def _still_executing(space: Workspace) -> None:
    with space.wctx.db.session() as session:
        state = session.scalar(select(Plan.state).where(Plan.id == space.plan.id))
    if state != PlanState.EXECUTING:
        raise StopWork(f"the plan is {state}; stopping")


def _state_of(wctx: WorkerContext, plan_id: int, number: int) -> CandidateState:
    with wctx.db.session() as session:
        return _candidate(session, plan_id, number).state


def _ended(
    wctx: WorkerContext, plan_id: int, number: int, state: CandidateState, error: str | None
) -> None:
    """End the candidate with what ranks it, in one write, so the plan never shows an ended
    candidate unmeasured."""
    with wctx.db.session() as session:
        plan = session.get_one(Plan, plan_id)
        candidate = _candidate(session, plan_id, number)
        head, base = candidate.head_sha, plan.base_sha or ""
        scope = session.scalar(
            select(PlanRevision.body).where(
                PlanRevision.plan_id == plan_id, PlanRevision.number == plan.approved_revision
            )
        )
    report = _diff(wctx, plan, base, head, scope or "")
    with wctx.db.session() as session:
        candidate = _candidate(session, plan_id, number)
        candidate.state, candidate.error = state, error
        _measure(session, candidate, report)


def _diff(
    wctx: WorkerContext, plan: Plan, base: str, head: str | None, plan_text: str
) -> DiffReport | None:
    """The candidate's diff against the plan's scope; None without a head or a readable diff
    (the candidate then ranks by what else is known)."""
    if head is None:
        return None
    mirror = mirror_path(wctx.settings.home, plan.repository.full_name)
    try:
        changes = changed_files(mirror, base, head)
    except GitError:
        log.warning("could not read the diff of plan %s's head %s", plan.id, head, exc_info=True)
        return None
    return analyse(changes, scope=plan_scope(plan_text), protected_paths=[], conflicts=[])


def _measure(session: Session, candidate: Candidate, report: DiffReport | None) -> None:
    """Keep what ranks the candidate: its checks, diff, cost and time."""
    plan_id, number = candidate.plan_id, candidate.number
    candidate.cost_usd = candidate_spend(session, plan_id, number)
    jobs = session.scalars(select(Job).where(Job.plan_id == plan_id, Job.candidate == number))
    candidate.seconds = sum(
        (aware(each.finished_at or utcnow()) - aware(each.started_at)).total_seconds()
        for each in jobs
        if each.started_at
    )
    if candidate.head_sha is None:
        return
    checks = session.scalars(
        select(CheckResult).where(
            CheckResult.plan_id == plan_id, CheckResult.head_sha == candidate.head_sha
        )
    ).all()
    candidate.checks_total = len(checks)
    candidate.checks_passed = sum(
        each.conclusion == "success"
        or (each.name in BUILT_IN_CHECKS and each.conclusion == "neutral")
        for each in checks
    )
    if report is not None:
        candidate.files_changed = report.files
        candidate.lines_changed = report.added + report.removed
        candidate.outside_scope = len(report.out_of_scope)


def settle_plan(session: Session, plan_id: int) -> None:
    """Once every candidate has ended, the plan waits in review with them ranked; with no
    candidate that has a head, it fails. The plan is locked, so of two candidates ending
    at once exactly one moves it."""
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


def candidate_lost(session: Session, plan_id: int, number: int, error: str) -> None:
    """A candidate whose worker was lost too often fails alone; the plan goes on with the
    others (and moves if it was the last)."""
    candidate = _candidate(session, plan_id, number)
    candidate.state, candidate.error = CandidateState.FAILED, error
    session.flush()
    settle_plan(session, plan_id)


def _candidate(session: Session, plan_id: int, number: int) -> Candidate:
    return session.scalars(
        select(Candidate).where(Candidate.plan_id == plan_id, Candidate.number == number)
    ).one()


def _update(wctx: WorkerContext, plan_id: int, number: int, **values: Any) -> None:
    with wctx.db.session() as session:
        candidate = _candidate(session, plan_id, number)
        for name, value in values.items():
            setattr(candidate, name, value)
