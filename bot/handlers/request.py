"""One command comment as gaffer handles it: who wrote it, where, and how it is answered."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.context import Context
from bot.github import RepoClient
from bot.models import CommandReceipt, Plan, aware, github_time
from bot.plans import active_plan, latest_plan
from bot.refusals import QUIET_REACTION, Outcome, may_reply
from bot.render import refusal
from bot.repo_config import RepoConfig


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
    # When GitHub says the comment was written; None when a payload does not say.
    written_at: datetime | None = None
    comment_url: str | None = None
    # The comment's receipt: it records how gaffer answered, so replies can be limited.
    receipt: CommandReceipt | None = None

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
            written_at=_github_time(payload["comment"].get("created_at")),
            comment_url=payload["comment"].get("html_url"),
        )

    def written_before(self, moment: datetime) -> bool:
        """Tell whether the comment was written before moment, so its writer never saw it.

        GitHub's times are whole seconds: a comment in the same second counts as after.
        """
        if self.written_at is None:
            return False
        return self.written_at < aware(moment).replace(microsecond=0)

    def refuse(self, raw: str, reason: str) -> None:
        """Reply once, quoting the command, saying why it was not done (or only react)."""
        if self._may_reply(Outcome.REFUSED):
            self.reply(refusal(raw, reason))

    def answer(self, body: str) -> None:
        """Mark a question command seen and reply to it (or only react)."""
        if self._may_reply(Outcome.ANSWERED):
            self.accept()
            self.reply(body)

    def _may_reply(self, outcome: Outcome) -> bool:
        # Past the limit (bot/refusals.py) the writer gets one reaction and no comment.
        if self.receipt is None:
            return True
        if not may_reply(self.ctx.session, self.receipt):
            self.receipt.outcome = Outcome.QUIETED.value
            self.ctx.after_commit(
                lambda: self.client.react(self.issue_number, self.comment_id, QUIET_REACTION)
            )
            return False
        self.receipt.outcome = outcome.value
        return True

    def reply(self, body: str) -> None:
        self.ctx.after_commit(lambda: self.client.reply(self.issue_number, body))

    def accept(self) -> None:
        """Mark the command seen with one 👀 reaction."""
        self.ctx.after_commit(lambda: self.client.react(self.issue_number, self.comment_id))

    def publish(self, plan: Plan) -> None:
        self.ctx.publish_status(self.installation_id, self.full_name, plan.id)

    def plan(self) -> Plan | None:
        return active_plan(self.ctx.session, self.repository_id, self.issue_number)

    def latest_plan(self) -> Plan | None:
        return latest_plan(self.ctx.session, self.repository_id, self.issue_number)


def _github_time(raw: Any) -> datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        return github_time(raw)
    except ValueError:
        return None
