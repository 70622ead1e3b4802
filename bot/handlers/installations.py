"""Keep the installations and repositories tables true to what GitHub says."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from bot.context import Context
from bot.db import insert_missing
from bot.event_router import Router
from bot.models import Installation, Repository, utcnow

router = Router()


class InstallationUnknown(Exception):
    """A handler needs a repository's installation and gaffer has no row for it.

    The delivery's task asks GitHub with the App's JWT, outside any transaction, records
    what it finds and handles the delivery again (see tasks/installations.py).
    """

    def __init__(self, full_name: str) -> None:
        super().__init__(f"no installation recorded for {full_name}")
        self.full_name = full_name


def remember_installation(session: Session, payload: dict[str, Any]) -> Installation:
    """Create or refresh the installation a payload came through."""
    data = payload["installation"]
    login = (data.get("account") or {}).get("login")
    insert_missing(session, Installation, id=data["id"], account_login=login or "unknown")
    row = session.get_one(Installation, data["id"])
    row.account_login = login or row.account_login
    row.removed_at = None
    return row


def remember_repository(session: Session, installation_id: int, repo: dict[str, Any]) -> Repository:
    """Create or refresh a repository row from a payload's repository object."""
    insert_missing(session, Repository, id=repo["id"], full_name=repo["full_name"])
    row = session.get_one(Repository, repo["id"])
    row.installation_id = installation_id
    row.full_name = repo["full_name"]
    row.removed_at = None
    return row


def remember_found(session: Session, found: dict[str, Any]) -> Repository:
    """Record an installation and repository GitHub named in answer to gaffer's question."""
    installation = remember_installation(session, found)
    installation.suspended = found["installation"].get("suspended_at") is not None
    return remember_repository(session, installation.id, found["repository"])


@router.register("installation", "created")
@router.register("installation", "new_permissions_accepted")
def installation_created(ctx: Context, payload: dict[str, Any]) -> None:
    installation = remember_installation(ctx.session, payload)
    for repo in payload.get("repositories") or []:
        remember_repository(ctx.session, installation.id, repo)


@router.register("installation", "deleted")
def installation_deleted(ctx: Context, payload: dict[str, Any]) -> None:
    installation = remember_installation(ctx.session, payload)
    installation.removed_at = utcnow()


@router.register("installation", "suspend")
@router.register("installation", "unsuspend")
def installation_suspended(ctx: Context, payload: dict[str, Any]) -> None:
    remember_installation(ctx.session, payload).suspended = payload["action"] == "suspend"


@router.register("installation_repositories", "added")
@router.register("installation_repositories", "removed")
def repositories_changed(ctx: Context, payload: dict[str, Any]) -> None:
    installation = remember_installation(ctx.session, payload)
    for repo in payload.get("repositories_added") or []:
        remember_repository(ctx.session, installation.id, repo)
    for repo in payload.get("repositories_removed") or []:
        remember_repository(ctx.session, installation.id, repo).removed_at = utcnow()
