"""Carry out an approved plan: the agent works on its branch; gaffer commits, pushes, verifies."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bot.github import RepoClient
from bot.memory import Offered
from bot.models import Job, JobState, Plan, PlanRevision, PlanState, Stage
from bot.plans import advance
from bot.render import denied_calls
from bot.repo_config import RepoConfig, fetch_repo_config
from bot.snapshots import Snapshot, revision_snapshot
from bot.states import Event
from bot.status import publish_status
from tasks.agents.definitions import AgentResult
from tasks.context import WorkerContext
from tasks.leases import finish
from tasks.stages.costs import park
from tasks.stages.guidance import Guidance, for_execution, record_inputs
from tasks.stages.prompts import execute_prompt, fix_prompt
from tasks.stages.stage_agent import Held, Stopped, agent_of, run_stage_agent
from tasks.stages.verification import verify
from tasks.stages.workspace import Teller, Workspace
from tasks.worktrees import (
    WorktreePool,
    create_branch,
    ensure_mirror,
    mirror_path,
    plan_key,
    push_branch,
    repair_gitfile,
    resolve_ref,
    worktree_git,
)


class StopWork(Exception):
    """The job cannot go on; the message is what the issue is told."""


def branch_name(issue_number: int, title: str) -> str:
    """Return the plan branch: gaffer/<issue>-<slug of the title>."""
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40].strip("-")
    return f"gaffer/{issue_number}-{slug or 'plan'}"


def run_execution(wctx: WorkerContext, job: Job) -> None:
    """Run the execute (or rework) stage of a plan through verification."""
    plan = start_work(wctx, job)
    if plan is None:
        return
    client = wctx.client(plan.installation_id, plan.repository.full_name)
    # Its own client: a GitHub client is not to be shared between threads.
    teller = Teller(wctx.db, wctx.client(plan.installation_id, plan.repository.full_name), plan.id)
    shown = False
    try:
        config = fetch_repo_config(client, wctx.setting("defaults", None))
        # A first start has no pushed branch to find, so a fetch a moment ago will do. A
        # plan's branch is saved (_prepare) before anything can park the job, so a resumed
        # or parked job is known by it even where parking set its attempts back.
        first = job.attempts <= 1 and plan.branch is None
        with leased_worktree(wctx, plan, plan.base_sha or "", first_start=first) as worktree:
            space = _prepare(wctx, job, plan, client, config, worktree)
            space.teller = teller
            _work_and_verify(space)
        finish(wctx.db, job.id, wctx.worker_id, JobState.DONE)
        shown = True  # by the plan's last move, which published what there is to show
    except Held as held:
        # The plan stays `executing`; the job waits in the queue and starts from the branch.
        if park(wctx, job.id, held.until, str(held)) and held.tell:
            client.reply(plan.issue_number, f"gaffer is holding the work: {held}")
    except StopWork as stop:
        _fail(wctx, job, plan.id, str(stop))
    except Exception as error:  # noqa: BLE001 - any fault fails the job by policy, said on the issue
        _fail(wctx, job, plan.id, f"{type(error).__name__}: {error}")
    finally:
        teller.wait()
        if not shown:
            publish_status(wctx.db, client, plan.id)


def run_recheck(wctx: WorkerContext, job: Job) -> None:
    """Run the plan's checks again on the commit under review (GitHub's "Re-run").

    The check runs and their results are updated in place; the plan stays in review, so
    checks that now fail hold `/approve-diff` back as any red check does.
    """
    with wctx.db.session() as session:
        plan = session.get_one(Plan, job.plan_id)
    if plan.state != PlanState.IN_REVIEW or not plan.head_sha:
        finish(wctx.db, job.id, wctx.worker_id, JobState.CANCELLED, "the plan left review")
        return
    client = wctx.client(plan.installation_id, plan.repository.full_name)
    try:
        config = fetch_repo_config(client, wctx.setting("defaults", None))
        with leased_worktree(wctx, plan, plan.head_sha) as worktree:
            verify(workspace_for(wctx, job, plan, client, config, worktree), plan.head_sha)
        finish(wctx.db, job.id, wctx.worker_id, JobState.DONE)
    except Exception as error:  # noqa: BLE001 - said on the issue; the plan stays in review
        finish(wctx.db, job.id, wctx.worker_id, JobState.FAILED, f"{type(error).__name__}: {error}")
        client.reply(plan.issue_number, f"gaffer could not re-run the checks: {error}")
    finally:
        publish_status(wctx.db, client, plan.id)


def start_work(wctx: WorkerContext, job: Job) -> Plan | None:
    with wctx.db.session() as session:
        plan = session.get_one(Plan, job.plan_id)
        # A resumed job finds its plan already executing; anything else has moved on.
        if plan.state == PlanState.APPROVED and not advance(
            session, plan, Event.WORK_STARTED, actor="gaffer"
        ):
            session.refresh(plan)  # another candidate's job may have started it first
        if plan.state == PlanState.EXECUTING:
            return plan
    finish(wctx.db, job.id, wctx.worker_id, JobState.CANCELLED, "the plan is not executing")
    return None


@contextmanager
def leased_worktree(
    wctx: WorkerContext,
    plan: Plan,
    base_sha: str,
    candidate: int | None = None,
    *,
    first_start: bool = False,
) -> Iterator[Path]:
    """Lease a clean worktree at base_sha from the repository's pool for the job's length
    (each candidate of a best-of-N plan has its own). A job's first start shares a fetch
    made a moment ago (ensure_mirror); any other start fetches, to find its pushed branch."""
    key = plan_key(plan.id, candidate)
    pool = _pool(wctx, plan, base_sha if first_start else None)
    try:
        yield pool.acquire(key, base_sha)
    finally:
        pool.release(key)


def _pool(wctx: WorkerContext, plan: Plan, having: str | None) -> WorktreePool:
    token = wctx.github_app.token(plan.installation_id)
    home, name = wctx.settings.home, plan.repository.full_name
    return worktree_pool(
        wctx, plan, ensure_mirror(home, name, plan.clone_url, token, having=having)
    )


def worktree_pool(wctx: WorkerContext, plan: Plan, mirror: Path) -> WorktreePool:
    """The plan's repository's pool of warm worktrees on this machine."""
    size = int(wctx.setting("worktree_pool_size", 3))
    return WorktreePool(wctx.settings.home, plan.repository.full_name, mirror, size=size)


def _prepare(
    wctx: WorkerContext,
    job: Job,
    plan: Plan,
    client: RepoClient,
    config: RepoConfig,
    worktree: Path,
) -> Workspace:
    mirror = mirror_path(wctx.settings.home, plan.repository.full_name)
    branch = plan.branch or branch_name(plan.issue_number, plan.issue_title)
    # The pushed branch is the truth: a resumed or revised plan continues from it.
    pushed = pushed_head(mirror, branch)
    create_branch(worktree, branch, pushed or plan.base_sha or "")
    _save(wctx, plan.id, branch=branch)
    plan.branch = branch
    space = workspace_for(wctx, job, plan, client, config, worktree)
    space.branch_on_origin = pushed is not None
    return space


def workspace_for(
    wctx: WorkerContext,
    job: Job,
    plan: Plan,
    client: RepoClient,
    config: RepoConfig,
    worktree: Path,
) -> Workspace:
    """What a job that checks the plan's work needs, with the issue as approved."""
    snapshot, plan_text, lessons = _approved(wctx, plan)
    mirror = mirror_path(wctx.settings.home, plan.repository.full_name)
    return Workspace(
        wctx,
        job,
        plan,
        client,
        config,
        snapshot,
        plan_text,
        worktree,
        mirror,
        client.repo.default_branch,
        lessons,
    )


def pushed_head(mirror: Path, branch: str) -> str | None:
    try:
        return resolve_ref(mirror, branch)
    except Exception:
        return None


def _approved(wctx: WorkerContext, plan: Plan) -> tuple[Snapshot, str, list[Offered]]:
    """Return what the approved revision was written from, its plan and the lessons it was
    written with: all the agent reads.

    Nothing said on the issue after that revision reaches the agent; `/revise` and a new
    `/approve` bring it in.
    """
    with wctx.db.session() as session:
        revision = (
            session.query(PlanRevision)
            .filter_by(plan_id=plan.id, number=plan.approved_revision)
            .one()
        )
        lessons = [Offered.from_json(each) for each in revision.memory or []]
        return revision_snapshot(session, plan, revision.number), revision.body, lessons


def _work_and_verify(space: Workspace) -> None:
    stage = Stage.REWORK if space.job.stage == Stage.REWORK else Stage.EXECUTE
    names = ["rework", "execute"] if stage == Stage.REWORK else ["execute"]
    prompt = execute_prompt(
        stage_guidance(space, names), space.issue, space.plan_text, feedback=space.job.feedback
    )
    if space.teller is not None:
        # "executing", shown beside the agent: on a busy machine, the showing would slow the
        # readying of the work it announces.
        space.teller.show(beside_job=True)
    agent_run(space, stage, prompt)
    head = commit_and_push(space)
    while True:
        # "Verifying" is shown beside the checks; the verdict waits for it to land.
        _moved(space, Event.WORK_DONE, beside_job=True, head_sha=head)
        verdict = verify(space, head)
        if verdict.green:
            _moved(space, Event.CHECKS_PASSED)
            return
        if space.plan.fix_rounds >= space.config.max_retries:
            _moved(space, Event.CHECKS_FAILED_FINAL, last_error=verdict.failure_summary)
            return
        _moved(
            space, Event.CHECKS_FAILED_RETRY, beside_job=True, fix_rounds=space.plan.fix_rounds + 1
        )
        guidance = stage_guidance(space, ["fix"])
        agent_run(
            space, Stage.FIX, fix_prompt(guidance, space.issue, space.plan_text, verdict.failures)
        )
        head = commit_and_push(space)


def stage_guidance(space: Workspace, names: list[str]) -> Guidance:
    """The stage's program and conventions as of the plan's base, and the lessons it was
    planned with that still hold on the default branch now; recorded on the job.

    The default branch's head comes from GitHub, not from the mirror's refs, which an agent
    without a sandbox could have rewritten; a commit the mirror lacks sets lessons aside.
    """
    head = space.client.default_branch_sha()
    guidance = for_execution(
        space.wctx, space.mirror, space.plan.base_sha or head, head, names, space.lessons
    )
    record_inputs(space.wctx, space.job.id, guidance.record)
    return guidance


def agent_run(space: Workspace, stage: str, prompt: str) -> AgentResult:
    try:
        result = run_stage_agent(
            space.wctx,
            space.job,
            space.plan,
            space.config,
            stage,
            prompt,
            space.worktree,
            space.dir,
        )
    except Stopped as stop:
        raise StopWork(f"Stopped: {stop}") from stop
    if result.run.stopped:
        raise StopWork("stopped: the plan was cancelled")
    if not result.ok:
        raise StopWork(result.error or "the agent failed")
    if result.denials:
        space.client.reply(space.plan.issue_number, denied_calls(stage, result.denials))
    return result


def commit_and_push(space: Workspace) -> str:
    worktree, plan = space.worktree, space.plan
    repair_gitfile(worktree)
    # What the agent's CLI leaves behind (its history, caches) is never committed.
    ignored = agent_of(space.wctx, plan, space.job).ignore
    left_behind = [f":(exclude){pattern}" for pattern in ignored]
    worktree_git(worktree, ["add", "--all", "--", ".", *left_behind])
    committed = bool(worktree_git(worktree, ["diff", "--cached", "--name-only"]))
    if committed:
        candidate = f", candidate c{space.job.candidate}" if space.job.candidate else ""
        message = (
            f"gaffer: {plan.issue_title}\n\n"
            f"Plan #{plan.id}, revision r{plan.approved_revision}{candidate}."
        )
        worktree_git(worktree, ["commit", "--quiet", "--no-verify", "-m", message])
    branch = plan.branch or ""
    # A branch origin lacks is protected by nothing yet; GitHub answers 404 for it.
    if space.branch_on_origin and space.client.branch_protected(branch):
        raise StopWork(f"gaffer never pushes to the protected branch {branch!r}")
    token = space.wctx.github_app.token(plan.installation_id)
    head = push_branch(space.mirror, branch, plan.clone_url, token, set(), space.default_branch)
    space.branch_on_origin = True
    space.new_head = head if committed else None
    return head


def _moved(space: Workspace, event: Event, *, beside_job: bool = False, **changes: Any) -> None:
    with space.wctx.db.session() as session:
        plan = session.get_one(Plan, space.plan.id, populate_existing=True)
        if not advance(session, plan, event, actor="gaffer", **changes):
            raise StopWork(f"the plan is {plan.state.value}; stopping")
        space.plan = plan
    if space.teller is None:  # a job that keeps no teller shows its moves as they happen
        publish_status(space.wctx.db, space.client, space.plan.id)
    else:
        space.teller.show(beside_job=beside_job)


def _save(wctx: WorkerContext, plan_id: int, **values: Any) -> None:
    with wctx.db.session() as session:
        plan = session.get_one(Plan, plan_id)
        for name, value in values.items():
            setattr(plan, name, value)


def _fail(wctx: WorkerContext, job: Job, plan_id: int, error: str) -> None:
    finish(wctx.db, job.id, wctx.worker_id, JobState.FAILED, error)
    with wctx.db.session() as session:
        plan = session.get_one(Plan, plan_id, populate_existing=True)
        advance(session, plan, Event.WORK_FAILED, actor="gaffer", reason=error, last_error=error)
