"""The plan lifecycle as a table: which event moves a plan from which state to which."""

from __future__ import annotations

from enum import StrEnum

from bot.models import PlanState as S


class Event(StrEnum):
    PLAN_POSTED = "plan_posted"
    PLAN_FAILED = "plan_failed"
    APPROVE = "approve"
    REVISE = "revise"
    EXPAND = "expand"
    SPLIT = "split"
    SPLIT_INTO_PARTS = "split_into_parts"
    PARTS_MERGED = "parts_merged"
    REJECT = "reject"
    ICEBOX = "icebox"
    THAW = "thaw"
    CANCEL = "cancel"
    WORK_STARTED = "work_started"
    WORK_DONE = "work_done"
    CHECKS_PASSED = "checks_passed"
    CHECKS_FAILED_RETRY = "checks_failed_retry"
    CHECKS_FAILED_FINAL = "checks_failed_final"
    CANDIDATES_READY = "candidates_ready"  # every candidate of a best-of-N plan has ended
    WORK_FAILED = "work_failed"
    RETRY = "retry"
    RETRY_PLAN = "retry_plan"
    APPROVE_DIFF = "approve_diff"
    PR_MERGED = "pr_merged"
    PR_CLOSED = "pr_closed"
    ISSUE_CLOSED = "issue_closed"


TERMINAL = frozenset({S.MERGED, S.CLOSED, S.REJECTED, S.CANCELLED, S.FAILED, S.ICEBOX})
ACTIVE = frozenset(S) - TERMINAL

STOPPABLE = (S.PLANNING, S.DRAFT, S.APPROVED, S.EXECUTING, S.VERIFYING, S.IN_REVIEW, S.SPLIT)

TRANSITIONS: dict[tuple[S, Event], S] = {
    (S.PLANNING, Event.PLAN_POSTED): S.DRAFT,
    (S.PLANNING, Event.PLAN_FAILED): S.FAILED,
    (S.DRAFT, Event.APPROVE): S.APPROVED,
    (S.DRAFT, Event.REVISE): S.PLANNING,
    (S.DRAFT, Event.EXPAND): S.PLANNING,
    (S.DRAFT, Event.SPLIT): S.PLANNING,
    (S.DRAFT, Event.SPLIT_INTO_PARTS): S.SPLIT,
    (S.SPLIT, Event.PARTS_MERGED): S.MERGED,
    (S.DRAFT, Event.REJECT): S.REJECTED,
    (S.DRAFT, Event.ICEBOX): S.ICEBOX,
    (S.ICEBOX, Event.THAW): S.DRAFT,
    (S.APPROVED, Event.WORK_STARTED): S.EXECUTING,
    (S.APPROVED, Event.WORK_FAILED): S.FAILED,  # its worker died before it could start
    (S.EXECUTING, Event.WORK_DONE): S.VERIFYING,
    (S.EXECUTING, Event.WORK_FAILED): S.FAILED,
    (S.EXECUTING, Event.CANDIDATES_READY): S.IN_REVIEW,
    (S.VERIFYING, Event.CHECKS_PASSED): S.IN_REVIEW,
    (S.VERIFYING, Event.CHECKS_FAILED_RETRY): S.EXECUTING,
    (S.VERIFYING, Event.CHECKS_FAILED_FINAL): S.FAILED,
    (S.VERIFYING, Event.WORK_FAILED): S.FAILED,
    (S.FAILED, Event.RETRY): S.APPROVED,
    (S.FAILED, Event.RETRY_PLAN): S.PLANNING,
    (S.IN_REVIEW, Event.APPROVE_DIFF): S.PR_OPEN,
    (S.IN_REVIEW, Event.REVISE): S.EXECUTING,
    (S.IN_REVIEW, Event.REJECT): S.REJECTED,
    (S.PR_OPEN, Event.PR_MERGED): S.MERGED,
    (S.PR_OPEN, Event.PR_CLOSED): S.CLOSED,
    **{(state, Event.CANCEL): S.CANCELLED for state in STOPPABLE},
    **{(state, Event.ISSUE_CLOSED): S.CANCELLED for state in STOPPABLE},
}


def next_state(state: S, event: Event) -> S | None:
    """Return the state event leads to from state, or None when it does not apply."""
    return TRANSITIONS.get((state, event))


def events_from(state: S) -> list[Event]:
    """List the events that apply in state."""
    return [event for (source, event) in TRANSITIONS if source == state]
