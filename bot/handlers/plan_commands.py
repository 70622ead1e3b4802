"""What each command does to the issue's plan, once it is parsed and authorised."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from bot import memory
from bot.agent_names import agent_names
from bot.approvals import diff_rule_problem
from bot.candidates import (
    candidate_agents,
    candidate_with_head,
    live_candidates,
    pick,
    reshare,
    start_candidates,
    unpicked,
)
from bot.commands import Command, Target, render_help, spec_for
from bot.costs import plan_jobs, plan_spend
from bot.handlers import lesson_commands
from bot.handlers.issues import stop_plan_work
from bot.handlers.request import Request
from bot.models import (
    Approval,
    ApprovalKind,
    Candidate,
    CandidateState,
    CheckResult,
    Job,
    JobState,
    Plan,
    PlanPart,
    PlanRevision,
    PlanState,
    Stage,
    utcnow,
)
from bot.parts import PartsError, proposed_parts
from bot.plans import add_job, advance
from bot.queue import CLEANUP, RUN_JOB
from bot.render import cost_reply, status_reply
from bot.states import Event

Action = Callable[[Request, Command, Plan], str | None]
# What each command of the registry (bot/commands.py) does to its plan; the commands that
# act on the issue (Target.ISSUE) are in ISSUE_ACTIONS, at the end of this module.
ACTIONS: dict[str, Action] = {}


def action(name: str) -> Callable[[Action], Action]:
    def add(fn: Action) -> Action:
        ACTIONS[name] = fn
        return fn

    return add


def run(request: Request, command: Command) -> None:
    """Carry out a command: react when done, or reply once saying why not."""
    spec = spec_for(command.name)
    if spec.target is Target.ISSUE:
        problem = ISSUE_ACTIONS[command.name](request, command)
        if problem:
            request.refuse(command.raw, problem)
        return
    plan = request.latest_plan() if spec.target is Target.LATEST else request.plan()
    if plan is None:
        request.refuse(command.raw, "This issue has no active gaffer plan.")
        return
    if spec.states and plan.state not in spec.states:
        request.refuse(command.raw, _wrong_state(command, plan, *spec.states))
        return
    problem = ACTIONS[command.name](request, command, plan)
    if problem:
        request.refuse(command.raw, problem)
        return
    request.accept()
    request.publish(plan)


def _wrong_state(command: Command, plan: Plan, *states: PlanState) -> str:
    wanted = " or ".join(f"`{state.value}`" for state in states)
    return f"`/{command.name}` applies when the plan is {wanted}; it is `{plan.state.value}`."


@action("approve")
def approve_plan(request: Request, command: Command, plan: Plan) -> str | None:
    """Approve the current revision, bound to its number."""
    revision = int(command.args.get("revision") or plan.current_revision)
    if revision != plan.current_revision:
        return (
            f"r{revision} is not the current plan; the current one is r{plan.current_revision}. "
            f"Read it and answer `/approve r{plan.current_revision}`."
        )
    if "revision" not in command.args and request.written_before(_posted_at(request, plan)):
        return (
            f"r{revision} was posted after this comment was written, so the comment does not "
            f"approve it. Read it and answer `/approve` again (or `/approve r{revision}`)."
        )
    agents = candidate_agents(request.config, command.args.get("candidates"))
    known = agent_names(request.ctx.settings.server_config)
    unknown = sorted({name for name in agents if name is not None and name not in known})
    if unknown:
        return f"`candidates` names agents this server does not define: {_names(unknown)}. " + (
            f"Configured: {_names(known)}."
        )
    base_sha = request.ctx.facts.default_branch_sha  # asked before the transaction
    if not advance(
        request.ctx.session,
        plan,
        Event.APPROVE,
        actor=request.actor,
        approved_revision=revision,
        base_sha=base_sha,
    ):
        return "The plan changed while this command was handled; read it again."
    request.ctx.session.add(
        Approval(
            plan_id=plan.id,
            kind=ApprovalKind.PLAN,
            revision=revision,
            approver=request.actor,
            comment_id=request.comment_id,
            parallel="parallel" in command.args,
        )
    )
    _execute(request, plan, revision, agents)
    return None


def _execute(request: Request, plan: Plan, revision: int, agents: list[str | None]) -> None:
    """Queue the approved revision's work: one job, or one per candidate, each with its
    share of what is left of the plan's budget."""
    session = request.ctx.session
    if live_candidates(session, plan.id):
        request.ctx.enqueue(CLEANUP, plan_id=plan.id)  # an earlier approval's are dropped
    added = start_candidates(session, plan, agents, _budget(request, plan))
    if not added:
        _queue(request, plan, Stage.EXECUTE, f"execute:r{revision}")
    for candidate in added:
        _queue_candidate(request, plan, candidate, f"execute:r{revision}:c{candidate.number}")


def _queue_candidate(request: Request, plan: Plan, candidate: Candidate, key: str) -> None:
    """Queue one candidate's execute job, with its own agent and model."""
    _queue(
        request,
        plan,
        Stage.EXECUTE,
        key,
        candidate=candidate.number,
        agent=candidate.agent,
        model=candidate.model,
    )


def _budget(request: Request, plan: Plan) -> Decimal | None:
    """The plan's budget: its own (`/budget`), else the repository's."""
    return plan.budget_usd if plan.budget_usd is not None else request.config.budget.plan_usd


def _names(names: Sequence[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


@action("approve-diff")
def approve_diff(request: Request, command: Command, plan: Plan) -> str | None:
    """Approve the verified head of the plan branch, bound to its SHA; on a best-of-N plan,
    the candidate with that head, whose branch becomes the plan's."""
    candidates = unpicked(request.ctx.session, plan)
    problem = (
        _pick(request, plan, candidates, command.args.get("sha"))
        if candidates
        else diff_approval_problem(request, plan, command.args.get("sha"))
    )
    if problem:
        return problem
    request.ctx.session.add(
        Approval(
            plan_id=plan.id,
            kind=ApprovalKind.DIFF,
            sha=plan.head_sha,
            approver=request.actor,
            comment_id=request.comment_id,
        )
    )
    # Each approving comment is its own attempt: one refused for a reason since fixed (the
    # branch moved and was pushed back) can be followed by another. GitHub's one open PR
    # per head and base keeps concurrent attempts to one PR.
    _queue(request, plan, Stage.OPEN_PR, f"open_pr:{plan.head_sha}:{request.comment_id}")
    return None


def _pick(request: Request, plan: Plan, candidates: list[Candidate], sha: str | None) -> str | None:
    """Make the candidate with head sha the plan's if it may be approved, or say why not
    (the others are dropped once its pull request is open)."""
    found = candidate_with_head(candidates, sha)
    if isinstance(found, str):
        return found
    before = plan.branch, plan.head_sha
    plan.branch, plan.head_sha = found.branch, found.head_sha
    problem = diff_rule_problem(request.ctx.session, plan, request.config, request.actor)
    plan.branch, plan.head_sha = before
    if problem:
        return problem
    if not pick(request.ctx.session, plan, found):
        return "The plan changed while this command was handled; read it again."
    return None


def diff_approval_problem(request: Request, plan: Plan, sha: str | None) -> str | None:
    """Say why the plan's diff cannot be approved by this comment, or None when it can."""
    problem = diff_rule_problem(request.ctx.session, plan, request.config, request.actor)
    if problem or not plan.head_sha:
        return problem
    if sha and not plan.head_sha.startswith(sha.lower()):
        return f"`{sha}` is not the verified head; the current head is `{plan.head_sha}`."
    verified_at = _verified_at(request.ctx.session, plan)
    if not sha and verified_at and request.written_before(verified_at):
        return (
            f"The head `{plan.head_sha}` was verified after this comment was written, so it "
            f"cannot approve it. Review it and answer `/approve-diff` again "
            f"(or `/approve-diff {plan.head_sha[:12]}`)."
        )
    return None


def _posted_at(request: Request, plan: Plan) -> datetime:
    return request.ctx.session.scalars(
        select(PlanRevision.created_at).where(
            PlanRevision.plan_id == plan.id, PlanRevision.number == plan.current_revision
        )
    ).one()


def _verified_at(session: Session, plan: Plan) -> datetime | None:
    """When the first check on the plan's head was recorded: the head was shown from then."""
    return session.scalar(
        select(func.min(CheckResult.created_at)).where(
            CheckResult.plan_id == plan.id, CheckResult.head_sha == plan.head_sha
        )
    )


@action("revise")
def revise_plan(request: Request, command: Command, plan: Plan) -> str | None:
    """Ask the agent for a new plan revision, or for more work on the diff in review."""
    feedback = command.args["feedback"]
    heard = _hearing(request, plan, "revise", feedback)
    candidates = unpicked(request.ctx.session, plan)
    if plan.state == PlanState.IN_REVIEW and candidates:
        return (
            f"This plan has {len(candidates)} candidates and `/revise` reworks one diff. "
            "Pick one with `/approve-diff <sha>`, or end the plan with `/reject [reason]` "
            "and label the issue again."
        )
    if plan.state == PlanState.IN_REVIEW:
        problem = _rework(request, plan, feedback)
    else:
        problem = _replan(request, plan, Event.REVISE, feedback, "revise")
    if problem is None:
        heard()
    return problem


# What /expand and /split ask of the planning agent.
REPLAN_FEEDBACK = {
    "expand": "Expand the plan: more detail per step, the exact files and functions to change, "
    "and the tests that will prove each step.",
    "split": "Split the work into parts that can each be planned, reviewed and merged on their "
    "own. Keep the plan's other sections for the whole, and add a **Parts** section: a "
    "numbered list, each item a part's title on one line (ending `(after N)` when it needs "
    "part N merged first), with its description and its own scope indented under it.",
}


@action("expand")
def replan(request: Request, command: Command, plan: Plan) -> str | None:
    """Ask the agent for a more detailed plan."""
    return _replan(request, plan, Event.EXPAND, REPLAN_FEEDBACK["expand"], "expand")


@action("split")
def split(request: Request, command: Command, plan: Plan) -> str | None:
    """Open the parts the current revision proposes as sub-issues of this one, each planned
    on its own; a revision that proposes none is asked for again, with parts. On a plan
    already split, open what an earlier try could not."""
    if plan.state == PlanState.SPLIT:
        return _split_again(request, plan)
    revision = request.ctx.session.scalars(
        select(PlanRevision).where(
            PlanRevision.plan_id == plan.id, PlanRevision.number == plan.current_revision
        )
    ).one()
    try:
        found = proposed_parts(revision.body)
    except PartsError as error:
        return f"r{revision.number} cannot be split: {error}. Answer `/revise` with how to fix it."
    if not found:
        return _replan(request, plan, Event.SPLIT, REPLAN_FEEDBACK["split"], "split")
    if request.written_before(revision.created_at):
        return (
            f"r{revision.number} was posted after this comment was written, so the comment "
            "does not split it. Read it and answer `/split` again."
        )
    if not advance(request.ctx.session, plan, Event.SPLIT_INTO_PARTS, actor=request.actor):
        return "The plan changed while this command was handled; read it again."
    request.ctx.session.add_all(
        PlanPart(
            plan_id=plan.id,
            number=part.number,
            title=part.title,
            body=part.body,
            after=list(part.after),
        )
        for part in found
    )
    _queue(request, plan, Stage.PARTS, f"parts:r{revision.number}")
    return None


def _split_again(request: Request, plan: Plan) -> str | None:
    tries = request.ctx.session.scalars(
        select(Job).where(Job.plan_id == plan.id, Job.stage == Stage.PARTS)
    ).all()
    if any(job.state in (JobState.QUEUED, JobState.RUNNING) for job in tries):
        return "gaffer is opening the parts already; the status comment shows them as they open."
    _queue(request, plan, Stage.PARTS, f"parts:r{plan.current_revision}:{len(tries) + 1}")
    return None


def _replan(request: Request, plan: Plan, event: Event, feedback: str, program: str) -> str | None:
    """Queue the next revision, written by the program of the command that asked for it."""
    if not advance(request.ctx.session, plan, event, actor=request.actor, reason=feedback):
        return "The plan changed while this command was handled; read it again."
    _queue(
        request,
        plan,
        Stage.REVISE,
        f"plan:r{plan.current_revision + 1}",
        feedback=feedback,
        program=program,
    )
    return None


def _hearing(request: Request, plan: Plan, kind: str, text: str) -> Callable[[], bool]:
    """Return what keeps a writer's words as a lesson the plan proposes when it ends; called
    once the command is done, with the revision and diff the words were about."""
    revision = plan.current_revision or None
    diff_sha = plan.head_sha if plan.state == PlanState.IN_REVIEW else None
    return lambda: memory.hear(
        request.ctx.session,
        plan,
        kind=kind,
        text=text,
        author=request.actor,
        origin=f"comment:{request.comment_id}",
        source_url=request.comment_url,
        revision=revision,
        diff_sha=diff_sha,
    )


def _rework(request: Request, plan: Plan, feedback: str) -> str | None:
    # New commits will follow, so every approval of the current diff is void now.
    head = plan.head_sha
    if not advance(
        request.ctx.session, plan, Event.REVISE, actor=request.actor, reason=feedback, fix_rounds=0
    ):
        return "The plan changed while this command was handled; read it again."
    void_diff_approvals(request.ctx.session, plan)
    _queue(request, plan, Stage.REWORK, f"rework:{head}:{request.comment_id}", feedback=feedback)
    return None


def void_diff_approvals(session: Session, plan: Plan) -> None:
    """Void the plan's diff approvals: they bound a head that is about to change."""
    session.execute(
        update(Approval)
        .where(
            Approval.plan_id == plan.id,
            Approval.kind == ApprovalKind.DIFF,
            Approval.voided_at.is_(None),
        )
        .values(voided_at=utcnow())
    )


@action("retry")
def retry_plan(request: Request, command: Command, plan: Plan) -> str | None:
    """Start a failed plan again: its work from the approved plan, or its planning."""
    session = request.ctx.session
    candidates = [c for c in unpicked(session, plan) if c.state != CandidateState.VERIFIED]
    if plan.approved_revision and candidates:
        if not advance(session, plan, Event.RETRY, actor=request.actor, fix_rounds=0):
            return _wrong_state(command, plan, PlanState.FAILED)
        for job in session.scalars(
            select(Job).where(
                Job.plan_id == plan.id,
                Job.candidate.is_not(None),
                Job.state.in_((JobState.QUEUED, JobState.RUNNING)),
            )
        ):
            job.state = JobState.CANCELLED  # one job a candidate: the new one goes on
        for candidate in candidates:  # each goes on from its pushed branch
            candidate.state, candidate.error = CandidateState.QUEUED, None
            key = f"execute:r{plan.approved_revision}:c{candidate.number}:{request.comment_id}"
            _queue_candidate(request, plan, candidate, key)
        return None
    if plan.approved_revision:
        moved = advance(session, plan, Event.RETRY, actor=request.actor, fix_rounds=0)
        stage, key = Stage.EXECUTE, f"execute:r{plan.approved_revision}:{request.comment_id}"
    else:
        moved = advance(session, plan, Event.RETRY_PLAN, actor=request.actor)
        stage, key = Stage.PLAN, f"plan:r{plan.current_revision + 1}:{request.comment_id}"
    if not moved:
        return _wrong_state(command, plan, PlanState.FAILED)
    _queue(request, plan, stage, key)
    return None


@action("thaw")
def thaw_plan(request: Request, command: Command, plan: Plan) -> str | None:
    """Bring an iced plan back as a draft."""
    if not advance(request.ctx.session, plan, Event.THAW, actor=request.actor):
        return _wrong_state(command, plan, PlanState.ICEBOX)
    return None


@action("budget")
def set_budget(request: Request, command: Command, plan: Plan) -> str | None:
    """Set the plan's budget in dollars; the agent is stopped when it is spent. A best-of-N
    plan's candidates share the new budget."""
    plan.budget_usd = Decimal(command.args["usd"])
    reshare(request.ctx.session, plan, plan.budget_usd)
    return None


@action("agent")
def choose_agent(request: Request, command: Command, plan: Plan) -> str | None:
    """Choose the agent (and model) for the plan's next jobs."""
    known = agent_names(request.ctx.settings.server_config)
    if command.args["name"] not in known:
        return f"There is no agent `{command.args['name']}`. Configured: " + ", ".join(
            f"`{name}`" for name in known
        )
    plan.agent, plan.model = command.args["name"], command.args.get("model")
    return None


@action("reject")
def reject_plan(request: Request, command: Command, plan: Plan) -> str | None:
    """End the plan without doing the work."""
    reason = command.args.get("reason") or None
    heard = _hearing(request, plan, "reject", reason or "")
    if not advance(request.ctx.session, plan, Event.REJECT, actor=request.actor, reason=reason):
        return _wrong_state(command, plan, PlanState.DRAFT, PlanState.IN_REVIEW)
    heard()
    stop_plan_work(request.ctx, plan)
    return None


@action("cancel")
def cancel_plan(request: Request, command: Command, plan: Plan) -> str | None:
    """Stop the plan wherever it is, killing a running agent."""
    if not advance(request.ctx.session, plan, Event.CANCEL, actor=request.actor):
        return "The plan changed while this command was handled; read it again."
    stop_plan_work(request.ctx, plan)
    return None


@action("icebox")
def icebox_plan(request: Request, command: Command, plan: Plan) -> str | None:
    """Put a draft plan aside."""
    if not advance(request.ctx.session, plan, Event.ICEBOX, actor=request.actor):
        return _wrong_state(command, plan, PlanState.DRAFT)
    return None


def _queue(request: Request, plan: Plan, stage: str, key: str, **fields: Any) -> None:
    job = add_job(request.ctx.session, plan, stage, key, **fields)
    if job is not None:
        request.ctx.session.flush()
        request.ctx.enqueue(RUN_JOB, job_id=job.id)


def _help(request: Request, command: Command) -> None:
    request.answer(render_help())


def _status(request: Request, command: Command) -> None:
    request.answer(status_reply(request.latest_plan()))


def _cost(request: Request, command: Command) -> None:
    plan = request.latest_plan()
    if plan is None:
        request.answer(status_reply(None))
        return
    session = request.ctx.session
    request.answer(cost_reply(plan, plan_jobs(session, plan.id), plan_spend(session, plan.id)))


IssueAction = Callable[[Request, Command], str | None]
# The commands that act on the issue, with or without a plan: they answer, or say why not.
ISSUE_ACTIONS: dict[str, IssueAction] = {
    "status": _status,
    "cost": _cost,
    "help": _help,
    "keep": lesson_commands.keep_lesson,
    "remember": lesson_commands.remember_lesson,
    "forget": lesson_commands.forget_lesson,
    "lessons": lesson_commands.list_lessons,
}
