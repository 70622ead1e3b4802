"""Open the pull request from exactly the approved SHA, after checking everything again."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.approvals import diff_rule_problem
from bot.candidates import live_candidates, settle_pick
from bot.costs import plan_spend
from bot.github import PullBlocked, RepoClient
from bot.memory import Offered
from bot.models import (
    Approval,
    ApprovalKind,
    CheckResult,
    Job,
    JobState,
    Plan,
    PlanRevision,
    PlanState,
)
from bot.permissions import may_approve
from bot.plans import advance
from bot.queue import CLEANUP
from bot.render import lessons_used
from bot.repo_config import fetch_repo_config
from bot.states import Event
from bot.status import publish_status
from tasks.context import WorkerContext
from tasks.leases import finish
from tasks.stages.guidance import MAX_FILE_CHARS, PR_PROGRAM, record_inputs


class NoPullRequest(Exception):
    """The approval no longer holds; the message is the reply on the issue."""


def open_pull_request(wctx: WorkerContext, job: Job) -> None:
    """Open (or find) the plan's PR if its diff approval still holds."""
    with wctx.db.session() as session:
        plan = session.get_one(Plan, job.plan_id)
        approval = _live_approval(session, plan)
    if plan.state == PlanState.PR_OPEN:  # another approving comment's job opened it
        finish(wctx.db, job.id, wctx.worker_id, JobState.DONE)
        return
    client = wctx.client(plan.installation_id, plan.repository.full_name)
    try:
        _recheck(wctx, client, plan, approval)
        number, head = _open(wctx, client, plan, job)
        if approval is not None and head != approval.sha:
            client.close_pull(number)
            raise NoPullRequest(f"the branch moved to `{head}` while the PR was being opened.")
    except NoPullRequest as refusal:
        client.reply(plan.issue_number, f"No pull request was opened: {refusal}")
        finish(wctx.db, job.id, wctx.worker_id, JobState.CANCELLED, str(refusal))
        return
    with wctx.db.session() as session:
        plan = session.get_one(Plan, plan.id, populate_existing=True)
        opened = advance(
            session,
            plan,
            Event.APPROVE_DIFF,
            actor=approval.approver if approval else "gaffer",
            reason=f"PR #{number} from {head}",
            pr_number=number,
        )
        picked_from = opened and bool(live_candidates(session, plan.id))
        if picked_from:
            settle_pick(session, plan)
    if picked_from:  # the candidates not picked are cleaned up
        wctx.send_task(CLEANUP, plan_id=plan.id)
    finish(wctx.db, job.id, wctx.worker_id, JobState.DONE)
    publish_status(wctx.db, client, plan.id)


def _open(wctx: WorkerContext, client: RepoClient, plan: Plan, job: Job) -> tuple[int, str]:
    base = client.repo.default_branch
    try:
        body = _body(wctx, client, plan, job)
        return client.open_pull(plan.branch or "", base, pull_title(plan), body)
    except PullBlocked as blocked:
        raise NoPullRequest(
            f"{blocked} is open from `{plan.branch}` into `{base}`, and only gaffer's own pull "
            f"request can be the plan's. Once #{blocked.number} is closed, approve the diff again."
        ) from blocked


def _template(wctx: WorkerContext, client: RepoClient, job: Job) -> str | None:
    """The repository's own text for gaffer's pull requests (its `pr.md` program), else its
    pull request template; which one is recorded on the job."""
    program = client.small_file_on_default_branch(PR_PROGRAM, MAX_FILE_CHARS)
    if program is not None and program.text is not None:
        record = {"name": "pr", "path": PR_PROGRAM, "blob": program.sha}
        text: str | None = program.text
    else:
        record = {"name": "pr", "shipped": "the repository's pull request template"}
        text = client.pull_request_template()
    record_inputs(wctx, job.id, {"program": record})
    return text


def pull_title(plan: Plan) -> str:
    """Return the PR title: the issue's title and number."""
    return f"{plan.issue_title} (#{plan.issue_number})"


def _live_approval(session: Session, plan: Plan) -> Approval | None:
    return session.scalars(
        select(Approval)
        .where(
            Approval.plan_id == plan.id,
            Approval.kind == ApprovalKind.DIFF,
            Approval.voided_at.is_(None),
            Approval.sha == plan.head_sha,
        )
        .order_by(Approval.id.desc())
    ).first()


def _recheck(
    wctx: WorkerContext, client: RepoClient, plan: Plan, approval: Approval | None
) -> None:
    if plan.state != PlanState.IN_REVIEW or approval is None:
        raise NoPullRequest(f"the plan is `{plan.state.value}` and no diff approval stands.")
    issue = client.issue(plan.issue_number)
    if issue.state != "open" or issue.locked:
        raise NoPullRequest("the issue is closed or locked.")
    head = client.branch_sha(plan.branch or "")
    if head is None:
        raise NoPullRequest(
            f"the branch `{plan.branch}` was deleted after `{approval.sha}` was approved. "
            "Push it back to that commit and approve it again, or `/reject` the plan."
        )
    if head != approval.sha:
        raise NoPullRequest(
            f"the branch `{plan.branch}` moved to `{head}` after `{approval.sha}` was approved. "
            "Review the new head and approve it."
        )
    config = fetch_repo_config(client, wctx.setting("defaults", None))
    if not may_approve(client, approval.approver, config):
        raise NoPullRequest(f"@{approval.approver} no longer has write access.")
    # The rule `/approve-diff` was held to, asked again: checks re-run since may be red.
    with wctx.db.session() as session:
        plan_now = session.get_one(Plan, plan.id)
        problem = diff_rule_problem(session, plan_now, config, approval.approver)
    if problem:
        raise NoPullRequest(problem)


def _body(wctx: WorkerContext, client: RepoClient, plan: Plan, job: Job) -> str:
    with wctx.db.session() as session:
        revision = session.scalars(
            select(PlanRevision).where(
                PlanRevision.plan_id == plan.id, PlanRevision.number == plan.approved_revision
            )
        ).one()
        plan_text = revision.body
        lessons = [Offered.from_json(each) for each in revision.memory or []]
        spend = plan_spend(session, plan.id)
        checks = session.scalars(
            select(CheckResult).where(
                CheckResult.plan_id == plan.id, CheckResult.head_sha == plan.head_sha
            )
        ).all()
    lines = [f"Closes #{plan.issue_number}", ""]
    template = _template(wctx, client, job)
    if template:
        lines += [template.strip(), ""]
    lines += [
        f"<details><summary>The approved plan (r{plan.approved_revision})</summary>\n",
        plan_text,
        "\n</details>",
        "",
    ]
    if any(each.needs_look is None for each in lessons):
        lines += [lessons_used(revision.number, [e for e in lessons if e.needs_look is None]), ""]
    lines += [
        f"Head: `{plan.head_sha}`",
        "",
        "Checks:",
    ]
    lines += [f"- gaffer/{c.name}: {c.conclusion} — {c.title or ''}" for c in checks]
    lines += ["", f"Agent cost for this plan: {spend}."]
    return "\n".join(lines)
