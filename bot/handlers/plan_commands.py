"""What each command does to the issue's plan, once it is parsed and authorised."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bot.commands import Command, render_help
from bot.context import Context
from bot.github import RepoClient
from bot.handlers.issues import cancel_jobs
from bot.models import Approval, Plan, PlanState
from bot.plans import active_plan, add_job, advance, latest_plan
from bot.queue import RUN_JOB
from bot.render import refusal, status_reply
from bot.repo_config import RepoConfig
from bot.states import Event


@dataclass
class Request:
    """One command comment: who wrote it, where, and what gaffer answers."""

    ctx: Context
    installation_id: int
    repository_id: int
    full_name: str
    issue_number: int
    comment_id: int
    actor: str
    client: RepoClient
    config: RepoConfig = field(default_factory=RepoConfig)

    @classmethod
    def from_payload(cls, ctx: Context, payload: dict[str, Any]) -> Request:
        installation_id = payload["installation"]["id"]
        full_name = payload["repository"]["full_name"]
        return cls(
            ctx=ctx,
            installation_id=installation_id,
            repository_id=payload["repository"]["id"],
            full_name=full_name,
            issue_number=payload["issue"]["number"],
            comment_id=payload["comment"]["id"],
            actor=payload["comment"]["user"]["login"],
            client=ctx.github(installation_id, full_name),
        )

    def refuse(self, raw: str, reason: str) -> None:
        """Reply once, quoting the command, saying why it was not done."""
        self.reply(refusal(raw, reason))

    def reply(self, body: str) -> None:
        self.ctx.after_commit(lambda: self.client.reply(self.issue_number, body))

    def accept(self) -> None:
        """Mark the command seen with one 👀 reaction."""
        self.ctx.after_commit(lambda: self.client.react(self.issue_number, self.comment_id))

    def publish(self, plan: Plan) -> None:
        self.ctx.publish_status(self.installation_id, self.full_name, plan.id)

    def plan(self) -> Plan | None:
        return active_plan(self.ctx.session, self.repository_id, self.issue_number)


Action = Callable[[Request, Command, Plan], str | None]
_ACTIONS: dict[str, Action] = {}
# Commands that act on the issue itself rather than on an active plan.
_GENERAL = {"help", "status"}


def action(name: str) -> Callable[[Action], Action]:
    def add(fn: Action) -> Action:
        _ACTIONS[name] = fn
        return fn

    return add


def run(request: Request, command: Command) -> None:
    """Carry out a command: react when done, or reply once saying why not."""
    if command.name in _GENERAL:
        _answer_general(request, command)
        return
    act = _ACTIONS.get(command.name)
    if act is None:
        request.refuse(command.raw, f"`/{command.name}` is not available in this gaffer yet.")
        return
    plan = request.plan()
    if plan is None:
        request.refuse(command.raw, "This issue has no active gaffer plan.")
        return
    problem = act(request, command, plan)
    if problem:
        request.refuse(command.raw, problem)
        return
    request.accept()
    request.publish(plan)


def _answer_general(request: Request, command: Command) -> None:
    request.accept()
    if command.name == "help":
        request.reply(render_help())
    else:
        session = request.ctx.session
        request.reply(
            status_reply(latest_plan(session, request.repository_id, request.issue_number))
        )


def _wrong_state(command: Command, plan: Plan, *states: PlanState) -> str:
    wanted = " or ".join(f"`{state.value}`" for state in states)
    return f"`/{command.name}` applies when the plan is {wanted}; it is `{plan.state.value}`."


@action("approve")
def approve_plan(request: Request, command: Command, plan: Plan) -> str | None:
    """Approve the current revision, bound to its number."""
    if plan.state != PlanState.DRAFT:
        return _wrong_state(command, plan, PlanState.DRAFT)
    revision = int(command.args.get("revision") or plan.current_revision)
    if revision != plan.current_revision:
        return (
            f"r{revision} is not the current plan; the current one is r{plan.current_revision}. "
            f"Read it and answer `/approve r{plan.current_revision}`."
        )
    base_sha = request.client.default_branch_sha()
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
            kind="plan",
            revision=revision,
            approver=request.actor,
            comment_id=request.comment_id,
        )
    )
    _queue(request, plan, "execute", f"execute:r{revision}")
    return None


@action("approve-diff")
def approve_diff(request: Request, command: Command, plan: Plan) -> str | None:
    """Approve the verified head of the plan branch (bound to its SHA)."""
    if plan.state != PlanState.IN_REVIEW:
        return (
            f"The diff is not ready for approval: the plan is `{plan.state.value}`. "
            "`/approve-diff` applies once the checks have run and the plan is `in_review`."
        )
    return "Opening pull requests is not available in this gaffer yet."


@action("revise")
def revise_plan(request: Request, command: Command, plan: Plan) -> str | None:
    """Ask the agent for a new revision that answers the feedback."""
    if plan.state != PlanState.DRAFT:
        return _wrong_state(command, plan, PlanState.DRAFT)
    feedback = command.args["feedback"]
    if not advance(request.ctx.session, plan, Event.REVISE, actor=request.actor, reason=feedback):
        return "The plan changed while this command was handled; read it again."
    _queue(request, plan, "revise", f"plan:r{plan.current_revision + 1}", feedback=feedback)
    return None


@action("reject")
def reject_plan(request: Request, command: Command, plan: Plan) -> str | None:
    """End the plan without doing the work."""
    reason = command.args.get("reason") or None
    if not advance(request.ctx.session, plan, Event.REJECT, actor=request.actor, reason=reason):
        return _wrong_state(command, plan, PlanState.DRAFT, PlanState.IN_REVIEW)
    cancel_jobs(request.ctx, plan)
    return None


@action("cancel")
def cancel_plan(request: Request, command: Command, plan: Plan) -> str | None:
    """Stop the plan wherever it is, killing a running agent."""
    if not advance(request.ctx.session, plan, Event.CANCEL, actor=request.actor):
        return f"`/cancel` does not apply to a plan that is `{plan.state.value}`."
    cancel_jobs(request.ctx, plan)
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
