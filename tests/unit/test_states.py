"""The lifecycle table: which events move a plan, and which are no-ops."""

from __future__ import annotations

import pytest

from bot.models import PlanState as S
from bot.render import commands_for
from bot.states import ACTIVE, TERMINAL, Event, next_state

MOVES = [
    ("a posted plan becomes a draft", S.PLANNING, Event.PLAN_POSTED, S.DRAFT),
    ("approving a draft approves it", S.DRAFT, Event.APPROVE, S.APPROVED),
    ("revising a draft plans again", S.DRAFT, Event.REVISE, S.PLANNING),
    ("rejecting a draft ends it", S.DRAFT, Event.REJECT, S.REJECTED),
    ("a worker picks up an approved plan", S.APPROVED, Event.WORK_STARTED, S.EXECUTING),
    ("an approved plan whose worker died fails", S.APPROVED, Event.WORK_FAILED, S.FAILED),
    ("finished work is verified", S.EXECUTING, Event.WORK_DONE, S.VERIFYING),
    ("green checks go to review", S.VERIFYING, Event.CHECKS_PASSED, S.IN_REVIEW),
    (
        "a failing check with retries left goes back to work",
        S.VERIFYING,
        Event.CHECKS_FAILED_RETRY,
        S.EXECUTING,
    ),
    (
        "a failing check with no retries left fails",
        S.VERIFYING,
        Event.CHECKS_FAILED_FINAL,
        S.FAILED,
    ),
    ("an approved diff opens the pull request", S.IN_REVIEW, Event.APPROVE_DIFF, S.PR_OPEN),
    ("revising in review goes back to work", S.IN_REVIEW, Event.REVISE, S.EXECUTING),
    ("a merged pull request ends as merged", S.PR_OPEN, Event.PR_MERGED, S.MERGED),
    ("a closed pull request ends as closed", S.PR_OPEN, Event.PR_CLOSED, S.CLOSED),
    ("cancel stops an executing plan", S.EXECUTING, Event.CANCEL, S.CANCELLED),
    ("closing the issue stops a plan being written", S.PLANNING, Event.ISSUE_CLOSED, S.CANCELLED),
    ("thawing an iced plan makes it a draft again", S.ICEBOX, Event.THAW, S.DRAFT),
]

NO_OPS = [
    ("approving twice does nothing the second time", S.APPROVED, Event.APPROVE),
    ("approving while the plan is written does nothing", S.PLANNING, Event.APPROVE),
    ("approving a diff before review does nothing", S.EXECUTING, Event.APPROVE_DIFF),
    ("a posted plan after cancel does nothing", S.CANCELLED, Event.PLAN_POSTED),
    ("cancelling a merged plan does nothing", S.MERGED, Event.CANCEL),
    ("cancelling an open pull request's plan does nothing", S.PR_OPEN, Event.CANCEL),
]


@pytest.mark.parametrize(("name", "state", "event", "target"), MOVES, ids=[m[0] for m in MOVES])
def test_transitions(name: str, state: S, event: Event, target: S) -> None:
    assert next_state(state, event) == target


@pytest.mark.parametrize(("name", "state", "event"), NO_OPS, ids=[n[0] for n in NO_OPS])
def test_events_that_do_not_apply_are_no_ops(name: str, state: S, event: Event) -> None:
    assert next_state(state, event) is None


def test_every_state_is_active_or_terminal() -> None:
    assert set(S) == ACTIVE | TERMINAL and not ACTIVE & TERMINAL


class _Plan:
    def __init__(self, state: S, revision: int = 2) -> None:
        self.state, self.current_revision, self.head_sha = state, revision, None


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (
            S.DRAFT,
            [
                "/approve r2",
                "/revise <feedback>",
                "/expand",
                "/split",
                "/reject [reason]",
                "/icebox",
                "/cancel",
                "/status",
                "/help",
            ],
        ),
        (S.PLANNING, ["/cancel", "/status", "/help"]),
        (S.MERGED, ["/status", "/help"]),
    ],
    ids=[
        "a draft offers approve bound to its revision",
        "planning offers cancel only",
        "a merged plan offers nothing to do",
    ],
)
def test_status_comment_offers_the_commands_that_apply(state: S, expected: list[str]) -> None:
    assert commands_for(_Plan(state)) == expected  # type: ignore[arg-type]
