"""Approved plans whose file scopes meet do not execute at once, unless a writer says so."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sqlalchemy import select

from bot.models import Job, Plan, PlanRevision, PlanState, Stage, aware
from double.driver import IssueFlow
from tests.conftest import INSTALLATION_ID, REPO
from tests.support import WEBHOOK_SECRET, wait_for


def editing(path: str, scope: list[str], seconds: int = 0) -> str:
    """An issue whose plan states `scope` and whose agent writes `path`, slowly if asked."""
    steps = [f'- write: {{path: {path}, content: "changed\\n"}}']
    steps += [f"- sleep: {seconds}"] if seconds else []
    listed = ", ".join(scope)
    return (
        "Change the widgets.\n\n```gaffer-script\nexecute:\n  "
        + "\n  ".join(steps)
        + f"\nscope: [{listed}]\n```\n"
    )


def opened(app, client, github, origin: Path, bodies: list[str]) -> list[IssueFlow]:
    flow = IssueFlow(app, client, github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET)
    issues = [
        dataclasses.replace(flow, number=number, body=body).open()
        for number, body in enumerate(bodies, 1)
    ]
    for issue in issues:
        issue.label()
    for issue in issues:
        issue.wait_state(PlanState.DRAFT)
    return issues


def said(github, number: int, words: str) -> bool:
    """Did any comment on the issue ever say these words, before or after an edit?"""
    return any(
        words in body
        for comment in github.comment_records(REPO, number)
        for body in [*comment.earlier, comment.body]
    )


def executions(app) -> dict[int, tuple]:
    """Each issue's execute job: when it started and ended (once every one has ended: a
    job is closed just after its plan reaches review)."""

    def rows() -> list:
        with app.extensions["gaffer_db"].session() as session:
            return session.execute(
                select(Plan.issue_number, Job.started_at, Job.finished_at)
                .join(Job, Job.plan_id == Plan.id)
                .where(Job.stage == Stage.EXECUTE)
            ).all()

    wait_for(lambda: all(end for _, _, end in rows()), what="the execute jobs to end")
    return {number: (aware(start), aware(end)) for number, start, end in rows()}


def test_a_plan_whose_scope_meets_an_executing_plan_waits_for_it_and_says_so(
    app, client, github, origin: Path, start_worker
) -> None:
    github_worker = start_worker("github", concurrency=3, wait=False)
    agent = start_worker("agent", concurrency=3, wait=False)
    github_worker.wait_ready()
    agent.wait_ready()
    first, second, third = opened(
        app,
        client,
        github,
        origin,
        [
            editing("widgets/a.py", ["widgets/*.py"], seconds=6),
            editing("widgets/b.py", ["widgets/b.py"]),
            editing("docs/widgets.md", ["docs/widgets.md"]),
        ],
    )
    with app.extensions["gaffer_db"].session() as session:
        scopes = dict(session.execute(select(PlanRevision.plan_id, PlanRevision.scope)).all())
    assert sorted(scopes.values()) == [["docs/widgets.md"], ["widgets/*.py"], ["widgets/b.py"]]

    first.comment("/approve")
    first.wait_state(PlanState.EXECUTING)
    second.comment("/approve")
    third.comment("/approve")
    wait_for(
        lambda: (
            "**Waiting:** queued: waits for #1, whose scope meets this plan's at "
            "`widgets/b.py` and `widgets/*.py`; `/approve parallel` lets them run together"
            in second.status()
        ),
        what="the second plan to say it waits for the first",
    )
    for issue in (first, second, third):
        assert issue.wait_state(PlanState.IN_REVIEW, PlanState.FAILED).state == (
            PlanState.IN_REVIEW
        )
    runs = executions(app)
    assert runs[2][0] >= runs[1][1], "the second plan executed while the first did"
    assert "Waiting" not in second.status()  # said no more once it ran
    # The plan whose scope meets no other's was never held for one (a cold provider
    # account's first run may hold its planning back a moment: tasks/stages/governor.py).
    assert not said(github, 3, "waits for #")


def test_approve_parallel_lets_overlapping_plans_execute_together(
    app, client, github, origin: Path, start_worker
) -> None:
    github_worker = start_worker("github", concurrency=3, wait=False)
    agent = start_worker("agent", concurrency=2, wait=False)
    github_worker.wait_ready()
    agent.wait_ready()
    first, second = opened(
        app,
        client,
        github,
        origin,
        [
            editing("widgets/a.py", ["widgets/"], seconds=8),
            editing("widgets/a.py", ["widgets/a.py"], seconds=1),
        ],
    )
    first.comment("/approve")
    first.wait_state(PlanState.EXECUTING)
    second.comment("/approve parallel")
    for issue in (first, second):
        assert issue.wait_state(PlanState.IN_REVIEW, PlanState.FAILED).state == (
            PlanState.IN_REVIEW
        )
    assert not said(github, 2, "waits for #")
