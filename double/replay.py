"""A replay of similar issues on one repository, to measure what kept lessons change.

The repository keeps `widgets.py`, whose clip() shortens a label; its `labels` check passes
only when every `sidebar_*.py` calls clip(). The scripted agent of each issue writes its
sidebar file with clip() when its prompt says "clip()" (outside the agent's own script),
and slices the label by hand otherwise; its fix round uses clip(). So an agent passes the
check on the first try only when it was told.

The first issue's reviewer teaches that with `/revise`; its plan is approved, verified and
merged, and proposes the lesson. The issues after it are similar and say nothing of clip().
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select

from bot.models import Lesson, LessonState, PlanRevision, PlanState
from double.driver import IssueFlow, wait_for

LESSON = "Sidebar labels must be shortened with clip() from widgets.py:1-2, never sliced by hand."
FILES = {
    "widgets.py": "def clip(label):\n    return label[:20]\n",
    ".github/gaffer.yml": (
        "checks:\n"
        "  - name: labels\n"
        "    run: test -z \"$(grep -L 'clip(' sidebar_*.py)\"\n"
        "    timeout: 30\n"
        "max_retries: 2\n"
    ),
}


@dataclass(frozen=True)
class Outcome:
    """How one issue's plan went through its checks."""

    number: int
    first_pass: bool
    fix_rounds: int
    lessons_used: int


def issue_body(number: int) -> str:
    """An issue whose agent uses clip() only when its prompt says so."""
    told = (
        f"{{path: sidebar_{number}.py, "
        'content: "from widgets import clip\\nLABEL = clip(NAME)\\n"}'
    )
    sliced = f'{{path: sidebar_{number}.py, content: "LABEL = NAME[:20]\\n"}}'
    return (
        f"Long labels overflow the sidebar in panel {number}.\n\n"
        "```gaffer-script\n"
        "execute:\n"
        "  - when:\n"
        '      prompt_has: "clip()"\n'
        f"      then: [{{write: {told}}}]\n"
        f"      else: [{{write: {sliced}}}]\n"
        f"fix:\n  - write: {told}\n"
        "```\n"
    )


def teach(flow: IssueFlow) -> int:
    """Issue 1: the reviewer teaches the lesson, the plan merges; return the lesson's id."""
    flow.label()
    flow.wait_state(PlanState.DRAFT)
    flow.comment(f"/revise {LESSON}")
    wait_for(lambda: flow.plan().current_revision == 2, what="revision r2")  # type: ignore[union-attr]
    flow.wait_state(PlanState.DRAFT)
    _through_review(flow)
    with flow.app.extensions["gaffer_db"].session() as session:
        return session.scalars(
            select(Lesson.id).where(Lesson.kind == "revise", Lesson.state == LessonState.PROPOSED)
        ).one()


def keep(flow: IssueFlow, lesson_id: int) -> None:
    """A writer keeps the lesson on the issue it came from."""
    flow.comment(f"/keep L{lesson_id}")
    wait_for(
        lambda: any(f"Kept L{lesson_id}" in c["body"] for c in flow.comments()),
        what="the lesson kept",
    )


def run_similar(flows: Callable[[int], IssueFlow], numbers: range) -> list[Outcome]:
    """Plan, approve, verify and merge each similar issue in turn; say how its checks went.
    flows(n) gives issue n, opened with similar_issue(n)."""
    outcomes = []
    for number in numbers:
        flow = flows(number)
        flow.label()
        flow.wait_state(PlanState.DRAFT)
        fix_rounds, used = _through_review(flow)
        outcomes.append(Outcome(number, fix_rounds == 0, fix_rounds, used))
    return outcomes


def similar_issue(number: int) -> tuple[str, str]:
    """The title and body of issue number: a sidebar panel whose labels overflow."""
    return f"Sidebar labels overflow in panel {number}", issue_body(number)


def _through_review(flow: IssueFlow) -> tuple[int, int]:
    """Approve, wait for verification, approve the diff and merge; return the plan's fix
    rounds and how many lessons its approved revision was written with."""
    flow.comment("/approve")
    plan = flow.wait_state(PlanState.IN_REVIEW, timeout=120)
    with flow.app.extensions["gaffer_db"].session() as session:
        memory = session.scalar(
            select(PlanRevision.memory).where(
                PlanRevision.plan_id == plan.id, PlanRevision.number == plan.approved_revision
            )
        )
    flow.comment(f"/approve-diff {plan.head_sha}")
    flow.wait_state(PlanState.PR_OPEN)
    flow.merge()
    flow.wait_state(PlanState.MERGED)
    used = [each for each in memory or [] if each.get("needs_look") is None]
    return plan.fix_rounds, len(used)
