"""Open the parts `/split` made of a plan as sub-issues of its issue, and plan each one.

Each part becomes an issue carrying the repository's label and a marker, opened once however
often the job runs (bot/github.py looks for the marker first); it is linked as a sub-issue
of the plan's issue, and as blocked by the parts it names with `(after N)`. Its plan starts
here, with the parent's priority, rather than waiting for the label's webhook: whichever
comes first starts it, and the issue's one-active-plan rule keeps it to one.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import select, update

from bot.github import RepoClient
from bot.models import Job, JobState, Plan, PlanPart, PlanState, Stage, aware
from bot.plans import add_job, inherit_from_parent, new_plan, start_plan
from bot.queue import RUN_JOB
from bot.repo_config import RepoConfig, fetch_repo_config
from bot.status import publish_status
from tasks.context import WorkerContext
from tasks.leases import finish

log = logging.getLogger(__name__)


def part_marker(plan_id: int, number: int) -> str:
    """The hidden line that names a part's issue, so it is never opened twice."""
    return f"<!-- gaffer:part {plan_id}.{number} -->"


def open_parts(wctx: WorkerContext, job: Job) -> None:
    """Open, link and plan every part of a split plan, then show them on its issue."""
    with wctx.db.session() as session:
        plan = session.get_one(Plan, job.plan_id)
        parts = list(
            session.scalars(
                select(PlanPart).where(PlanPart.plan_id == plan.id).order_by(PlanPart.number)
            )
        )
    if plan.state != PlanState.SPLIT:
        finish(wctx.db, job.id, wctx.worker_id, JobState.CANCELLED, "plan is no longer split")
        return
    client = wctx.client(plan.installation_id, plan.repository.full_name)
    try:
        config = fetch_repo_config(client, wctx.setting("defaults", None))
        opened = {part.number: _opened(wctx, client, config, plan, part, job) for part in parts}
        for part in parts:
            client.add_sub_issue(plan.issue_number, opened[part.number][1])
            for earlier in part.after:
                client.add_blocked_by(opened[part.number][0], opened[earlier][1])
        numbers = [number for number, _ in opened.values()]
        started = _plan_each(wctx, client, config, plan, numbers)
    except Exception as error:  # noqa: BLE001 - said on the issue; `/split` tries again
        finish(wctx.db, job.id, wctx.worker_id, JobState.FAILED, f"{type(error).__name__}: {error}")
        client.reply(
            plan.issue_number,
            f"gaffer could not open every part ({type(error).__name__}: {error}). "
            "`/split` tries again, keeping the parts already opened; `/cancel` ends the plan.",
        )
        publish_status(wctx.db, client, plan.id)
        return
    finish(wctx.db, job.id, wctx.worker_id, JobState.DONE)
    for job_id in started:
        wctx.send_task(RUN_JOB, job_id=job_id)
    publish_status(wctx.db, client, plan.id)


def _opened(
    wctx: WorkerContext,
    client: RepoClient,
    config: RepoConfig,
    plan: Plan,
    part: PlanPart,
    job: Job,
) -> tuple[int, int]:
    """The part's issue number and id, opening the issue if no earlier run did."""
    if part.issue_number is not None and part.issue_id is not None:
        return part.issue_number, part.issue_id
    # An earlier run of this job opened its issues after the job was queued.
    since = aware(job.created_at) - timedelta(minutes=1)
    marker = part_marker(plan.id, part.number)
    number, issue_id = client.opened_part(
        part.title, _body(plan, part, marker), [config.label], marker, since
    )
    with wctx.db.session() as session:
        session.execute(
            update(PlanPart)
            .where(PlanPart.id == part.id)
            .values(issue_number=number, issue_id=issue_id)
            .execution_options(synchronize_session=False)
        )
    return number, issue_id


def _body(plan: Plan, part: PlanPart, marker: str) -> str:
    after = ", ".join(f"part {n}" for n in part.after)
    lines = [
        part.body or part.title,
        "",
        f"Part {part.number} of #{plan.issue_number}, split by gaffer from plan "
        f"r{plan.current_revision}." + (f" It executes once {after} is merged." if after else ""),
        marker,
    ]
    return "\n".join(lines)


def _plan_each(
    wctx: WorkerContext, client: RepoClient, config: RepoConfig, parent: Plan, numbers: list[int]
) -> list[int]:
    """Start a plan on each part's issue that has none; return the planning jobs to send."""
    issues = [client.issue(number).raw_data for number in numbers]  # asked before the writes
    jobs: list[int] = []
    with wctx.db.session() as session:
        for issue in issues:
            plan = new_plan(
                config,
                wctx.settings.default_agent,
                repository_id=parent.repository_id,
                installation_id=parent.installation_id,
                issue=issue,
                clone_url=parent.clone_url,
                priority=config.priority,
            )
            inherit_from_parent(session, plan)
            if not start_plan(session, plan):
                continue  # the label's webhook started it first
            job = add_job(session, plan, Stage.PLAN, "plan:r1")
            assert job is not None  # a new plan has no jobs yet
            session.flush()
            jobs.append(job.id)
    log.info("plan %s split into %s parts; %s plans started", parent.id, len(numbers), len(jobs))
    return jobs
