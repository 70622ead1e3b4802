"""The issue as a plan revision was written from it, and what changed on GitHub since.

A revision keeps its snapshot: the title, the body and the people's comments it was
written from, each with its author, edit time and whether the author may write to the
repository. Approving the revision approves that text. Execution and fix prompts are
built from it, so an edit or a comment that comes after reaches an agent only through
`/revise` and a new `/approve`. Later changes are recorded as they arrive and shown on
the status comment.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.commands import Command, parse_comment
from bot.github import PermissionUnknown, RepoClient
from bot.models import IssueChange, Plan, PlanRevision, aware, utcnow
from bot.permissions import may_approve
from bot.repo_config import RepoConfig

# What an IssueChange says happened.
TITLE_EDITED = "title edited"
BODY_EDITED = "body edited"
COMMENTED = "commented"
COMMENT_EDITED = "comment edited"
COMMENT_DELETED = "comment deleted"


@dataclass(frozen=True)
class Writing:
    """One piece of the issue a person wrote: the body or a comment."""

    author: str
    body: str
    trusted: bool  # the author may write to the repository
    edited_at: str  # GitHub's updated_at, as GitHub wrote it
    id: int = 0  # the comment's id; 0 for the issue's body


@dataclass(frozen=True)
class Snapshot:
    """The issue's title, body and people's comments as one revision read them."""

    number: int
    title: str
    body: Writing
    comments: Sequence[Writing] = field(default_factory=tuple)
    taken_at: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["comments"] = [asdict(each) for each in self.comments]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Snapshot:
        return cls(
            number=int(data["number"]),
            title=str(data["title"]),
            body=Writing(**data["body"]),
            comments=tuple(Writing(**each) for each in data.get("comments") or ()),
            taken_at=str(data.get("taken_at") or ""),
        )

    @classmethod
    def unrecorded(cls, number: int, title: str) -> Snapshot:
        """Stand in for a revision written before snapshots were kept: the title alone."""
        note = "(The issue's text was not recorded with this revision; follow the plan.)"
        return cls(number, title, Writing("", note, True, ""))


def take_snapshot(client: RepoClient, number: int, config: RepoConfig) -> Snapshot:
    """Read the issue and its people's comments now, marking who may write.

    Commands are left out: their words reach an agent as `/revise` feedback or not at all.
    """
    taken_at = utcnow().isoformat()
    issue, comments = client.issue_thread(number)
    trust = _Trust(client, config)
    body_author = issue.user.login if issue.user else ""
    body = Writing(body_author, issue.body or "", trust(body_author), _when(issue.updated_at))
    kept = tuple(
        Writing(c.user.login, c.body or "", trust(c.user.login), _when(c.updated_at), int(c.id))
        for c in comments
        if not isinstance(parse_comment(c.body or ""), Command)
    )
    return Snapshot(number, issue.title or "", body, kept, taken_at)


class _Trust:
    """Ask once per author whether they may write; an unknown answer is no."""

    def __init__(self, client: RepoClient, config: RepoConfig) -> None:
        self.client, self.config = client, config
        self.known: dict[str, bool] = {}

    def __call__(self, login: str) -> bool:
        if not login:
            return False
        if login not in self.known:
            try:
                self.known[login] = may_approve(self.client, login, self.config, recent=True)
            except PermissionUnknown:
                self.known[login] = False
        return self.known[login]


def _when(moment: datetime | None) -> str:
    return aware(moment).isoformat() if moment else ""


def revision_snapshot(session: Session, plan: Plan, number: int) -> Snapshot:
    """Return the snapshot revision number was written from."""
    source = session.scalar(
        select(PlanRevision.source).where(
            PlanRevision.plan_id == plan.id, PlanRevision.number == number
        )
    )
    if not source:
        return Snapshot.unrecorded(plan.issue_number, plan.issue_title)
    return Snapshot.from_json(source)


def note_change(
    session: Session, plan: Plan, what: str, actor: str, *, ref: int = 0, text: str | None = None
) -> bool:
    """Record that the issue moved away from what the plan's current revision read.

    ref: the comment's id for a comment change. text: the title, body or comment as it
    now reads, when the change is an edit. Returns whether the status comment has
    something new to show; a change the revision already holds, or one noted before,
    is not recorded again.
    """
    if plan.current_revision < 1:
        return False  # the revision being written reads the issue as it then is
    snapshot = revision_snapshot(session, plan, plan.current_revision)
    read = {each.id: each.body for each in snapshot.comments}
    if what == COMMENTED:
        new = ref not in read
    elif what in (COMMENT_EDITED, COMMENT_DELETED):
        new = ref in read and (what == COMMENT_DELETED or text != read[ref])
    else:
        new = text != (snapshot.title if what == TITLE_EDITED else snapshot.body.body)
    key = (what, actor, ref)
    if not new or key in {(c.what, c.actor, c.ref) for c in changes_since(session, plan)}:
        return False
    session.add(
        IssueChange(
            plan_id=plan.id, revision=plan.current_revision, what=what, actor=actor, ref=ref
        )
    )
    return True


def changes_since(session: Session, plan: Plan) -> list[IssueChange]:
    """Return the changes noted since the plan's current revision was written, oldest first."""
    return list(
        session.scalars(
            select(IssueChange)
            .where(IssueChange.plan_id == plan.id, IssueChange.revision == plan.current_revision)
            .order_by(IssueChange.id)
        )
    )


def describe_changes(changes: Iterable[IssueChange]) -> list[str]:
    """Say each kind of change once per person: `body edited by @x`, `2 comments by @y`."""
    counts: dict[tuple[str, str], int] = {}
    for change in changes:
        key = (change.what, change.actor)
        counts[key] = counts.get(key, 0) + 1
    said = []
    for (what, actor), count in counts.items():
        if what == COMMENTED:
            said.append(f"{count} comment{'s' if count > 1 else ''} by @{actor}")
        else:
            said.append(f"{what} by @{actor}")
    return said
