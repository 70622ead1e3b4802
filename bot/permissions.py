"""Decide who may act on a plan: repository writers and the configured approvers."""

from __future__ import annotations

from bot.github import PermissionUnknown, RepoClient
from bot.repo_config import RepoConfig

WRITE_LEVELS = frozenset({"admin", "maintain", "write"})

COULD_NOT_VERIFY = "gaffer could not verify your permission on this repository; try again."

__all__ = ["COULD_NOT_VERIFY", "PermissionUnknown", "may_approve"]


def may_approve(
    client: RepoClient, login: str, config: RepoConfig, *, recent: bool = False
) -> bool:
    """Tell whether login may use writer commands; raise PermissionUnknown when unsure.

    A listed approver, a writer (write, maintain, admin) or an active member of a listed
    team may. The config must come from the default branch, read before this call.
    recent: GitHub's answers from the last minute will do (commands, which come in floods);
    a task about to write asks afresh.
    """
    if login.lower() in {name.lower() for name in config.approvers}:
        return True
    if client.permission(login, recent=recent) in WRITE_LEVELS:
        return True
    return any(client.team_member(team, login, recent=recent) for team in config.approver_teams)
