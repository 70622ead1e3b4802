"""Issue comments: find the one command, check who sent it, and act on it once."""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import IntegrityError

from bot.commands import Command, Refusal, Who, parse_comment, spec_for
from bot.context import Asker, Context, Facts
from bot.event_router import Router
from bot.handlers import lesson_commands, plan_commands
from bot.handlers.request import Request
from bot.memory import lesson_in
from bot.models import CommandReceipt, Lesson
from bot.permissions import COULD_NOT_VERIFY, PermissionUnknown, may_approve
from bot.plans import active_plan
from bot.render import config_error
from bot.repo_config import RepoConfigError, fetch_recent_repo_config
from bot.settings import Settings
from bot.snapshots import COMMENT_DELETED, COMMENT_EDITED, COMMENTED, note_change

router = Router()


def gather(payload: dict[str, Any], ask: Asker) -> Facts:
    """Ask GitHub, before the transaction, what a new comment's command needs: the config
    (answers from the last minute will do, so a flood of commands costs GitHub one reply
    each, not a round of look-ups), whether its author may write, the default branch."""
    comment, issue, settings = payload["comment"], payload["issue"], ask.settings
    if payload.get("action") != "created" or _from_a_bot(settings, comment):
        return Facts()
    command = None if issue.get("pull_request") else parse_comment(comment.get("body") or "")
    if not isinstance(command, Command):
        return Facts()
    client = ask.github(payload["installation"]["id"], payload["repository"]["full_name"])
    try:
        config = fetch_recent_repo_config(client, settings.server_config.get("defaults"))
    except RepoConfigError as error:
        return Facts(config_error=str(error))
    if spec_for(command.name).who != Who.WRITER:
        return Facts(config=config)
    try:
        may_write = may_approve(client, comment["user"]["login"], config, recent=True)
    except PermissionUnknown:
        return Facts(config=config)
    if not may_write:
        return Facts(config=config, may_write=False)
    if command.name in _READS_CITED_FILES:
        sha = client.default_branch_sha()
        paths = lesson_commands.cited_paths(command, _lesson(ask, payload, command))
        files = {path: client.text_at(path, sha) for path in paths}
        return Facts(config=config, may_write=True, default_branch_sha=sha, files=files)
    approving = client.default_branch_sha() if command.name == "approve" else None
    return Facts(config=config, may_write=True, default_branch_sha=approving)


# Commands that tie a lesson to lines of the default branch, read before the transaction.
_READS_CITED_FILES = frozenset({"keep", "remember"})


def _lesson(ask: Asker, payload: dict[str, Any], command: Command) -> Lesson | None:
    if command.name != "keep":
        return None
    with ask.db.session() as session:
        lesson = lesson_in(session, payload["repository"]["id"], command.args["lesson"])
        if lesson is not None:
            session.expunge(lesson)
        return lesson


@router.register("issue_comment", "created")
def comment_created(ctx: Context, payload: dict[str, Any]) -> None:
    """Act on a command in a new comment; note any other comment on the status comment."""
    comment, issue = payload["comment"], payload["issue"]
    if _from_a_bot(ctx.settings, comment) or issue.get("pull_request"):
        return
    parsed = parse_comment(comment.get("body") or "")
    if parsed is None:
        _note(ctx, payload, COMMENTED)
        return
    request = Request.from_payload(ctx, payload)
    request.receipt = _first_sighting(ctx, payload, parsed)
    if request.receipt is None:
        return
    if isinstance(parsed, Refusal):
        request.refuse(parsed.raw, parsed.reason)
        return
    _authorised_run(request, parsed)


@router.register("issue_comment", "edited")
@router.register("issue_comment", "deleted")
def comment_changed(ctx: Context, payload: dict[str, Any]) -> None:
    """Note an edited or deleted comment that the plan's revision read; never run it."""
    if _from_a_bot(ctx.settings, payload["comment"]) or payload["issue"].get("pull_request"):
        return
    _note(ctx, payload, COMMENT_EDITED if payload["action"] == "edited" else COMMENT_DELETED)


def _note(ctx: Context, payload: dict[str, Any], what: str) -> None:
    """Show on the status comment a comment the plan's revision did not read as it is now."""
    repo, comment = payload["repository"], payload["comment"]
    plan = active_plan(ctx.session, repo["id"], payload["issue"]["number"])
    if plan is None:
        return
    # Who wrote a new comment; who edited or deleted an old one.
    actor = comment["user"] if what == COMMENTED else payload.get("sender") or comment["user"]
    text = comment.get("body") or ""
    if note_change(ctx.session, plan, what, actor["login"], ref=comment["id"], text=text):
        ctx.publish_status(plan.installation_id, repo["full_name"], plan.id)


def _authorised_run(request: Request, command: Command) -> None:
    facts = request.ctx.facts
    if facts.config_error is not None:
        request.refuse(command.raw, config_error(facts.config_error))
        return
    if facts.config is None:
        raise RuntimeError("the comment's facts were not gathered before its transaction")
    request.config = facts.config
    if spec_for(command.name).who == Who.WRITER:
        if facts.may_write is None:
            request.refuse(command.raw, COULD_NOT_VERIFY)
            return
        if not facts.may_write:
            request.refuse(
                command.raw,
                f"@{request.actor}, `/{command.name}` needs write access to this repository "
                "or a place in `approvers` or `approver_teams` in `.github/gaffer.yml`.",
            )
            return
    plan_commands.run(request, command)


def _from_a_bot(settings: Settings, comment: dict[str, Any]) -> bool:
    user = comment.get("user") or {}
    allowed = settings.server_config.get("allowed_bots") or []
    return bool(user.get("type") == "Bot" or comment.get("performed_via_github_app")) and (
        user.get("login") not in allowed
    )


def _first_sighting(
    ctx: Context, payload: dict[str, Any], parsed: Command | Refusal
) -> CommandReceipt | None:
    """Return the comment's new receipt, or None when another delivery of it came first."""
    # Two deliveries of one comment (a redelivery from another hook, a replay) act once.
    name = parsed.name if isinstance(parsed, Command) else "refused"
    receipt = CommandReceipt(
        repository_id=payload["repository"]["id"],
        issue_number=payload["issue"]["number"],
        comment_id=payload["comment"]["id"],
        command=name,
        actor=payload["comment"]["user"]["login"],
    )
    try:
        with ctx.session.begin_nested():
            ctx.session.add(receipt)
    except IntegrityError:
        return None
    return receipt
