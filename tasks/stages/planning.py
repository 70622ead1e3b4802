"""Write a plan: the agent reads the default branch in a read-only worktree and answers."""

from __future__ import annotations

import logging

from sqlalchemy import delete

from bot.github import RepoClient
from bot.memory import Offered
from bot.models import Job, JobState, Plan, PlanRevision, PlanState, Stage
from bot.plans import advance
from bot.render import config_error
from bot.repo_config import RepoConfig, RepoConfigError, fetch_repo_config
from bot.snapshots import Snapshot, take_snapshot
from bot.states import Event
from bot.status import publish_status
from tasks.checks.diffcheck import plan_scope
from tasks.context import WorkerContext
from tasks.leases import finish
from tasks.stages.costs import park
from tasks.stages.execution import worktree_pool
from tasks.stages.guidance import for_planning, record_inputs
from tasks.stages.prompts import plan_prompt
from tasks.stages.stage_agent import Held, Stopped, run_stage_agent
from tasks.stages.workspace import job_dir
from tasks.worktrees import ensure_mirror, mirror_path, readonly_worktree, resolve_ref

log = logging.getLogger(__name__)


def run_planning(wctx: WorkerContext, job: Job) -> None:
    """Draft the plan's next revision and post it on the issue."""
    with wctx.db.session() as session:
        plan = session.get_one(Plan, job.plan_id)
        previous = plan.revisions[-1].body if plan.revisions else None
    if plan.state != PlanState.PLANNING:
        finish(wctx.db, job.id, wctx.worker_id, JobState.CANCELLED, "plan is no longer planning")
        return
    client = wctx.client(plan.installation_id, plan.repository.full_name)
    starting = job.stage == Stage.PLAN and plan.current_revision == 0
    snapshot: Snapshot | None = None
    try:
        gone = _request_gone(wctx, client, plan) if starting else None
        if gone:
            _drop(wctx, plan, gone)
            return
        if starting:  # the plan shows on the issue once GitHub says it was asked for
            publish_status(wctx.db, client, plan.id)
        config = fetch_repo_config(client, wctx.setting("defaults", None))
        snapshot = take_snapshot(client, plan.issue_number, config)
        text, error, lessons = _draft(
            wctx, plan, job, config, client, snapshot, previous if job.feedback else None
        )
    except Held as held:
        if park(wctx, job.id, held.until, str(held)):
            if held.tell:
                client.reply(plan.issue_number, f"gaffer is holding the plan: {held}")
            publish_status(wctx.db, client, plan.id)  # it says what the plan waits for
        return
    except Stopped as stop:
        text, error, lessons = "", f"Stopped: {stop}", []
    except RepoConfigError as bad:
        text, error, lessons = "", config_error(str(bad)), []
    except Exception as fault:  # noqa: BLE001 - any fault fails the plan by policy, said on the issue
        text, error, lessons = "", f"{type(fault).__name__}: {fault}", []
    _record(wctx, plan, job, text, error, snapshot, lessons)
    publish_status(wctx.db, client, plan.id)
    if text and error is None:
        _warm_a_worktree(wctx, plan, client)


def _warm_a_worktree(wctx: WorkerContext, plan: Plan, client: RepoClient) -> None:
    """Ready a worktree in the repository's pool for the plan's execution, once the plan is
    shown: then its `/approve` starts the agent without a checkout first."""
    mirror = mirror_path(wctx.settings.home, plan.repository.full_name)
    try:
        worktree_pool(wctx, plan, mirror).warm(resolve_ref(mirror, client.repo.default_branch))
    except Exception:  # noqa: BLE001 - a worktree not readied now is checked out when needed
        log.warning("could not ready a worktree for plan %s", plan.id, exc_info=True)


def _request_gone(wctx: WorkerContext, client: RepoClient, plan: Plan) -> str | None:
    """Say why GitHub no longer asks for this plan (issue closed, locked, label gone), or None.

    A label event's payload may be old (a delivery id is not signed, so a body can be
    replayed): what counts is the issue as GitHub shows it now.
    """
    issue = client.issue(plan.issue_number)
    if issue.state != "open":
        return f"issue #{plan.issue_number} is {issue.state}"
    if issue.locked:
        return f"issue #{plan.issue_number} is locked"
    label = fetch_repo_config(client, wctx.setting("defaults", None)).label
    if label not in {each.name for each in issue.labels}:
        return f"issue #{plan.issue_number} does not carry the label `{label}`"
    return None


def _drop(wctx: WorkerContext, plan: Plan, why: str) -> None:
    """Forget a plan GitHub no longer asks for: it never showed on the issue, so it leaves
    no row behind that `/status` or the next label would see (its jobs go with it)."""
    log.info("plan %s for issue #%s not started: %s", plan.id, plan.issue_number, why)
    with wctx.db.session() as session:
        session.execute(
            delete(Plan).where(
                Plan.id == plan.id,
                Plan.state == PlanState.PLANNING,
                Plan.status_comment_id.is_(None),
            )
        )


def _draft(
    wctx: WorkerContext,
    plan: Plan,
    job: Job,
    config: RepoConfig,
    client: RepoClient,
    snapshot: Snapshot,
    previous: str | None,
) -> tuple[str, str | None, list[Offered]]:
    """Write the revision from the default branch's head, with what the repository taught."""
    token = wctx.github_app.token(plan.installation_id)
    mirror = ensure_mirror(wctx.settings.home, plan.repository.full_name, plan.clone_url, token)
    head = resolve_ref(mirror, client.repo.default_branch)
    about = "\n".join([snapshot.title, snapshot.body.body, job.feedback or ""])
    guidance = for_planning(wctx, plan, mirror, head, program_names(job), about)
    record_inputs(wctx, job.id, guidance.record)
    prompt = plan_prompt(guidance, snapshot, previous=previous, feedback=job.feedback)
    with readonly_worktree(mirror, head, wctx.settings.home) as worktree:
        result = run_stage_agent(
            wctx, job, plan, config, job.stage, prompt, worktree, job_dir(wctx, job)
        )
    if result.ok and not result.text.strip():
        return "", "the agent finished without writing a plan", []
    return result.text.strip(), result.error, list(guidance.lessons)


def program_names(job: Job) -> list[str]:
    """The programs a planning job reads, first found first: /expand's, /split's and
    /revise's own, then the plan's."""
    if job.stage == Stage.PLAN:
        return ["plan"]
    return [job.program or "revise", "plan"]


def _record(
    wctx: WorkerContext,
    plan: Plan,
    job: Job,
    text: str,
    error: str | None,
    snapshot: Snapshot | None,
    lessons: list[Offered],
) -> None:
    with wctx.db.session() as session:
        plan = session.get_one(Plan, plan.id, populate_existing=True)
        if error is None:
            number = plan.current_revision + 1
            # Only a plan still in `planning` takes the revision: a cancelled one keeps nothing.
            if advance(session, plan, Event.PLAN_POSTED, actor="gaffer", current_revision=number):
                assert snapshot is not None  # a plan was written, so from a snapshot
                session.add(
                    PlanRevision(
                        plan_id=plan.id,
                        number=number,
                        body=text,
                        feedback=job.feedback,
                        source=snapshot.to_json(),
                        memory=[each.to_json() for each in lessons],
                        scope=plan_scope(text),
                    )
                )
        else:
            advance(
                session, plan, Event.PLAN_FAILED, actor="gaffer", reason=error, last_error=error
            )
    finish(
        wctx.db, job.id, wctx.worker_id, JobState.DONE if error is None else JobState.FAILED, error
    )
