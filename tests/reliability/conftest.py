"""What the reliability tables share: raw deliveries, a drafted issue, and what a user sees."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import select

from bot.models import Approval, Delivery, Job, Plan, PlanState
from bot.outbox import relay_once
from tests.conftest import command_payload
from tests.in_process import InProcess, process_stored
from tests.support import deliver, sign

WEBHOOK_URL = "/webhooks/github"


def stored(app) -> list[Delivery]:
    """Return every delivery row the receiver stored."""
    with app.extensions["gaffer_db"].session() as session:
        return list(session.scalars(select(Delivery)))


def post_raw(client, body: bytes, **override: str | None) -> Any:
    """POST body with GitHub's headers, signed; an override of None drops that header."""
    headers: dict[str, str | None] = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": "raw-1",
        "X-Hub-Signature-256": sign(body),
    }
    headers.update(override)
    sent = {name: value for name, value in headers.items() if value is not None}
    return client.post(WEBHOOK_URL, data=body, headers=sent)


def as_body(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


@pytest.fixture
def relayed(app) -> Callable[[], list[int]]:
    """Run the outbox's relay once, as a worker does; return the deliveries it handed on."""

    def relay() -> list[int]:
        sent: list[int] = []
        relay_once(app.extensions["gaffer_db"], sent.append)
        return sent

    return relay


@pytest.fixture
def drafted(here: InProcess) -> InProcess:
    """Issue #1 labeled, its first plan revision posted: the plan is a draft."""
    here.flow.label()
    assert here.settle().state == PlanState.DRAFT
    return here


def human_comment(
    here: InProcess, body: str, login: str = "maintainer", **extra: Any
) -> dict[str, Any]:
    """Post a person's comment on the double; return its webhook payload (extra: action, kind)."""
    return command_payload(
        here.flow.github, (here.flow.repo, here.flow.issue), body, login, **extra
    )


def send_comment(
    here: InProcess, body: str, login: str = "maintainer", **extra: Any
) -> dict[str, Any]:
    """Post a comment, deliver and handle it, leaving the jobs it queued unrun."""
    payload = human_comment(here, body, login, **extra)
    handle(here, "issue_comment", payload)
    return payload


def handle(here: InProcess, event: str, payload: dict[str, Any], **options: Any) -> Any:
    """Deliver payload and process every stored delivery, as the worker would."""
    response = deliver(here.flow.client, event, payload, **options)
    assert response.status_code in (200, 202), response.get_json()
    process_stored(here.wctx)
    return response


def replies(here: InProcess) -> list[str]:
    """Return gaffer's replies to commands: its comments that quote one."""
    return [
        c["body"]
        for c in here.flow.comments()
        if c["user"]["login"] == here.flow.github.bot_login and c["body"].startswith("> ")
    ]


@dataclass(frozen=True)
class Seen:
    """What the issue thread and the database show after a step."""

    state: PlanState
    replies: list[str]
    reactions: list[str]
    approvals: list[tuple[str, int | None, str | None, str]]
    jobs: list[str]
    pulls: int


def seen(here: InProcess, comment: dict[str, Any] | None = None) -> Seen:
    """Read the plan, the replies, the reactions on comment, approvals, jobs and PRs."""
    with here.wctx.db.session() as session:  # type: ignore[attr-defined]
        [plan] = session.scalars(select(Plan)).all()
        approvals = [
            (a.kind, a.revision, a.sha, a.approver)
            for a in session.scalars(
                select(Approval).where(Approval.voided_at.is_(None)).order_by(Approval.id)
            )
        ]
        jobs = [job.key for job in session.scalars(select(Job).order_by(Job.id))]
    github = here.flow.github
    return Seen(
        state=plan.state,
        replies=replies(here),
        reactions=[r["content"] for r in github.reactions(comment["comment"]["id"])]
        if comment
        else [],
        approvals=approvals,
        jobs=jobs,
        pulls=len(github.pulls(here.flow.full_name)),
    )
