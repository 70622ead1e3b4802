"""Reviews of gaffer's pull requests: what a writer says in one is heard as a lesson.

A review's text and each of its inline comments (with the lines it is on) are kept against
the PR's plan and proposed when the plan ends, like `/revise` feedback (bot/memory.py).
Only people who may write are heard; a bot never is.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from bot import memory
from bot.context import Asker, Context, Facts
from bot.event_router import Router
from bot.models import Plan
from bot.permissions import PermissionUnknown, may_approve
from bot.repo_config import RepoConfigError, fetch_recent_repo_config
from bot.states import TERMINAL

router = Router()


def gather(payload: dict[str, Any], ask: Asker) -> Facts:
    """Ask whether the review's author may write, before the transaction."""
    said = _said(payload)
    if said is None or said["user"].get("type") == "Bot" or not (said.get("body") or "").strip():
        return Facts()
    client = ask.github(payload["installation"]["id"], payload["repository"]["full_name"])
    try:
        config = fetch_recent_repo_config(client, ask.settings.server_config.get("defaults"))
        return Facts(config=config, may_write=may_approve(client, said["user"]["login"], config))
    except (RepoConfigError, PermissionUnknown):
        return Facts()


@router.register("pull_request_review", "submitted")
def review_submitted(ctx: Context, payload: dict[str, Any]) -> None:
    """Hear a writer's review text on gaffer's pull request."""
    review = payload["review"]
    _hear(ctx, payload, review, f"review:{review['id']}", ())


@router.register("pull_request_review_comment", "created")
def review_comment_created(ctx: Context, payload: dict[str, Any]) -> None:
    """Hear a writer's inline comment, tied to the lines it is on."""
    comment = payload["comment"]
    _hear(ctx, payload, comment, f"review-comment:{comment['id']}", _lines(comment))


def _hear(
    ctx: Context,
    payload: dict[str, Any],
    said: dict[str, Any],
    origin: str,
    citations: tuple[memory.Citation, ...],
) -> None:
    if not ctx.facts.may_write:
        return
    repo = payload["repository"]
    plan = ctx.session.scalars(
        select(Plan).where(
            Plan.repository_id == repo["id"],
            Plan.pr_number == payload["pull_request"]["number"],
        )
    ).one_or_none()
    if plan is None:  # not gaffer's pull request
        return
    heard = memory.hear(
        ctx.session,
        plan,
        kind="review",
        text=said.get("body") or "",
        author=said["user"]["login"],
        origin=origin,
        source_url=said.get("html_url"),
        revision=plan.approved_revision,
        diff_sha=said.get("commit_id"),
        citations=citations,
    )
    if heard and plan.state in TERMINAL:  # proposed at once: show it
        ctx.publish_status(plan.installation_id, repo["full_name"], plan.id)


def _lines(comment: dict[str, Any]) -> tuple[memory.Citation, ...]:
    """The lines an inline comment is on, in the PR's new version of the file; the whole
    file for a comment on removed lines or on the file itself."""
    path, line = comment.get("path"), comment.get("line")
    if not path:
        return ()
    if comment.get("side", "RIGHT") != "RIGHT" or not isinstance(line, int):
        return (memory.Citation(path),)
    start = comment.get("start_line")
    first = start if isinstance(start, int) and start <= line else line
    return (memory.Citation(path, first, line),)


def _said(payload: dict[str, Any]) -> dict[str, Any] | None:
    return payload.get("review") or payload.get("comment")
