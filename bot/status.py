"""Keep the issue's status comment and state label in step with the database."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from bot.candidates import ranked, unpicked
from bot.costs import plan_spend
from bot.db import Database, rows_changed
from bot.github import RepoClient
from bot.memory import Offered
from bot.models import (
    CheckResult,
    Job,
    JobState,
    Lesson,
    LessonState,
    Plan,
    PlanPart,
    PlanRevision,
    PlanState,
    utcnow,
)
from bot.plans import latest_plan, parent_of
from bot.render import PartShown, Verification, status_comment
from bot.snapshots import changes_since, describe_changes

log = logging.getLogger(__name__)

# A publisher that died while posting the first comment gives its claim up after this.
CLAIM_FOR = timedelta(seconds=60)


@dataclass(frozen=True)
class _Shown:
    """What one publisher puts on the issue (the comment's text and the state label), and
    what the plan notes was put there last."""

    body: str
    state: PlanState
    number: int
    comment_id: int | None
    # What gaffer last put there: a digest of the comment's text, and the labelled state.
    body_was: str | None = None
    label_was: PlanState | None = None

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.body.encode()).hexdigest()


def publish_status(db: Database, client: RepoClient, plan_id: int) -> None:
    """Render the plan as it stands and make the issue show it; a part's state shows on
    its split parent's issue too."""
    _show(db, client, plan_id, rounds=3)
    with db.session() as session:
        parent = parent_of(session, session.get_one(Plan, plan_id))
    if parent is None:
        return
    try:
        publish_status(db, client, parent)
    except Exception:  # the part's own work does not fail for its parent's issue
        log.warning(
            "could not show plan %s's part on its parent %s", plan_id, parent, exc_info=True
        )


def _show(db: Database, client: RepoClient, plan_id: int, rounds: int) -> None:
    shown = _render(db, client, plan_id)
    if shown.comment_id is None:
        if not _claim_first_post(db, plan_id):
            # Another publisher is posting the first comment. It renders again once it has
            # posted and shows whatever this one would have: there is nothing to add.
            return
        _post_first(db, client, plan_id, shown)
    else:
        # Noted as saying something else: the comment is written without a look first.
        noted_other = shown.body_was not in (None, shown.digest)
        comment_id = client.upsert_status(
            shown.number, shown.body, shown.comment_id, read_first=not noted_other
        )
        if comment_id != shown.comment_id:
            _remember(db, plan_id, comment_id)  # someone deleted the comment; it was posted again
    client.set_state_label(shown.number, shown.state.value, last_labelled=shown.label_was)
    _note_shown(db, plan_id, shown)
    # A change that committed while this was written would leave the issue showing an
    # older status (this writer landing last, or a publisher that left it to us): show it.
    now = _render(db, client, plan_id)
    if (now.body, now.state) != (shown.body, shown.state) and rounds > 1:
        _show(db, client, plan_id, rounds - 1)


def _parts(session: Session, plan: Plan) -> list[PartShown]:
    """The parts `/split` made of the plan, each with its own plan's state."""
    shown = []
    for part in session.scalars(
        select(PlanPart).where(PlanPart.plan_id == plan.id).order_by(PlanPart.number)
    ):
        child = (
            latest_plan(session, plan.repository_id, part.issue_number)
            if part.issue_number
            else None
        )
        state = child.state.value if child else None
        shown.append(PartShown(part.number, part.title, part.after, part.issue_number, state))
    return shown


def _render(db: Database, client: RepoClient, plan_id: int) -> _Shown:
    with db.session() as session:
        plan = session.get_one(Plan, plan_id, populate_existing=True)
        revision = session.scalar(
            select(PlanRevision).where(
                PlanRevision.plan_id == plan_id, PlanRevision.number == plan.current_revision
            )
        )
        text = revision.body if revision else None
        used = [Offered.from_json(each) for each in (revision.memory or [])] if revision else []
        proposed = session.scalars(
            select(Lesson)
            .where(Lesson.plan_id == plan_id, Lesson.state == LessonState.PROPOSED)
            .order_by(Lesson.id)
        ).all()
        checks = session.scalars(
            select(CheckResult)
            .where(CheckResult.plan_id == plan_id, CheckResult.head_sha == plan.head_sha)
            .order_by(CheckResult.id)
        ).all()
        spend = plan_spend(session, plan_id)
        changes = describe_changes(changes_since(session, plan))
        split_into = _parts(session, plan)
        candidates = ranked(unpicked(session, plan))
        waiting = session.scalar(
            select(Job.error)
            .where(
                Job.plan_id == plan_id,
                Job.state == JobState.QUEUED,
                Job.parked_until > utcnow(),
            )
            .order_by(Job.id.desc())
            .limit(1)
        )
    # Links on GitHub may need the repository from GitHub: asked with the transaction closed.
    verification = _verification(client, plan, list(checks))
    body = status_comment(
        plan,
        text,
        verification,
        spend,
        changes=changes,
        unsandboxed=client.unsandboxed,
        used=used,
        proposed=proposed,
        waiting=waiting,
        split_into=split_into,
        candidates=candidates,
    )
    return _Shown(
        body,
        plan.state,
        plan.issue_number,
        plan.status_comment_id,
        body_was=plan.status_shown,
        label_was=plan.label_shown,
    )


def _claim_first_post(db: Database, plan_id: int) -> bool:
    """Take the right to post the plan's first status comment; a short write, no lock held."""
    now = utcnow()
    with db.session() as session:
        claimed = update(Plan).where(
            Plan.id == plan_id,
            Plan.status_comment_id.is_(None),
            or_(Plan.status_claimed_at.is_(None), Plan.status_claimed_at < now - CLAIM_FOR),
        )
        return rows_changed(session, claimed.values(status_claimed_at=now)) == 1


def _post_first(db: Database, client: RepoClient, plan_id: int, shown: _Shown) -> None:
    try:
        # Looks for gaffer's comment by its marker before creating, so a claim taken over
        # from a publisher that died after posting edits that comment.
        comment_id = client.upsert_status(shown.number, shown.body, None)
    except Exception:
        with db.session() as session:  # let the next publisher try at once
            session.execute(update(Plan).where(Plan.id == plan_id).values(status_claimed_at=None))
        raise
    _remember(db, plan_id, comment_id)


def _remember(db: Database, plan_id: int, comment_id: int) -> None:
    with db.session() as session:
        session.execute(
            update(Plan)
            .where(Plan.id == plan_id)
            .values(status_comment_id=comment_id, status_claimed_at=None)
        )


def _note_shown(db: Database, plan_id: int, shown: _Shown) -> None:
    """Note what is on the issue now, so the next publisher can write without reading."""
    if (shown.body_was, shown.label_was) == (shown.digest, shown.state):
        return  # noted already
    with db.session() as session:
        session.execute(
            update(Plan)
            .where(Plan.id == plan_id)
            .values(
                status_shown=shown.digest,
                label_shown=shown.state,
                updated_at=Plan.updated_at,  # the plan itself did not change
            )
        )


def _verification(client: RepoClient, plan: Plan, checks: list[CheckResult]) -> Verification | None:
    if not plan.head_sha:
        return None
    web = str(client.repo.html_url)
    compare = f"{web}/compare/{plan.base_sha}...{plan.head_sha}" if plan.base_sha else None
    pr = f"{web}/pull/{plan.pr_number}" if plan.pr_number else None
    return Verification(checks, compare, pr)
