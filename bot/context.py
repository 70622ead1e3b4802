"""What a handler is given: the open transaction, GitHub, settings, and deferred effects."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from bot.db import Database
from bot.github import RepoClient
from bot.repo_config import RepoConfig
from bot.settings import Settings


@dataclass(frozen=True)
class Asker:
    """What a handler's `gather` may use before the delivery's transaction: GitHub, the
    settings, and the database for short reads of its own."""

    github: Callable[[int, str], RepoClient]
    settings: Settings
    db: Database


@dataclass(frozen=True)
class Facts:
    """What GitHub said about a delivery before its transaction opened. Handlers read these
    and call GitHub only after the commit, so no lock is held over a network round trip."""

    config: RepoConfig | None = None
    # Why the repository's config could not be used, when it could not.
    config_error: str | None = None
    # Whether the comment's author may give writers' commands; None when GitHub could not say.
    may_write: bool | None = None
    default_branch_sha: str | None = None
    # The issue a Jam's report was opened as.
    opened_issue: int | None = None
    # The files a lesson command cites, as the default branch holds them (None: not there).
    files: dict[str, str | None] | None = None


@dataclass
class Context:
    """One delivery's handling: database writes commit together, effects run after."""

    session: Session
    db: Database
    settings: Settings
    github: Callable[[int, str], RepoClient]
    send_task: Callable[..., None]
    # Repositories (lower-case full names) whose installation GitHub was already asked for
    # while handling this delivery: their missing row is GitHub's answer, not a gap.
    looked_up: frozenset[str] = frozenset()
    # The stored delivery's id: a key for what this delivery does once, however often sent.
    delivery: int = 0
    facts: Facts = field(default_factory=Facts)
    effects: list[Callable[[], object]] = field(default_factory=list)
    sends: list[Callable[[], object]] = field(default_factory=list)

    def after_commit(self, effect: Callable[[], object]) -> None:
        """Run effect once the transaction has committed (GitHub calls)."""
        self.effects.append(effect)

    def enqueue(self, name: str, **kwargs: Any) -> None:
        """Enqueue a task by name after commit, before the GitHub calls: the work starts
        while the thread is told."""
        self.sends.append(lambda: self.send_task(name, **kwargs))

    def committed(self) -> list[Callable[[], object]]:
        """What to run once the transaction has committed, in order."""
        return [*self.sends, *self.effects]

    def publish_status(self, installation_id: int, full_name: str, plan_id: int) -> None:
        """Refresh the plan's status comment and label after commit."""
        from bot.status import publish_status

        self.after_commit(
            lambda: publish_status(self.db, self.github(installation_id, full_name), plan_id)
        )
