"""`/split` opens the parts a plan proposes as native sub-issues, each planned on its own; a
part that comes after another executes once that one merged; the parent closes when all did."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sqlalchemy import select, update

from bot.models import Job, JobState, Plan, PlanPart, PlanState
from double.driver import IssueFlow
from double.origin import commit_to_origin
from tests.conftest import INSTALLATION_ID, REPO
from tests.in_process import CONFIG, InProcess, settle
from tests.support import WEBHOOK_SECRET

# Both parts touch one file, so their scopes meet: the part waiting for the other to merge
# must not hold that other back meanwhile.
SCOPED = "```gaffer-script\\nscope: [widgets.py]\\n```"
BODY = f"""The widgets need a model and an API.

```gaffer-script
parts:
  - {{title: Add the widget model, body: "The model and its table.\\n{SCOPED}"}}
  - {{title: Serve widgets from the API, after: [1], body: "The endpoint.\\n{SCOPED}"}}
```
"""


@pytest.fixture
def parent(app, client, github_http, origin: Path, wctx) -> InProcess:
    commit_to_origin(origin, {".github/gaffer.yml": CONFIG}, "configure gaffer")
    flow = IssueFlow(
        app, client, github_http, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET, body=BODY
    ).open()
    return InProcess(flow, wctx)


def part(parent: InProcess, number: int) -> InProcess:
    """A part's issue, opened by gaffer on the double, driven here like any other."""
    issue = parent.flow.github.issue(REPO, number)
    flow = dataclasses.replace(parent.flow, number=number, title=issue["title"], body=issue["body"])
    return InProcess(flow, parent.wctx)


def to_merged(issue: InProcess) -> None:
    plan = issue.comment("/approve")
    assert plan.state == PlanState.IN_REVIEW, plan.last_error
    plan = issue.comment(f"/approve-diff {plan.head_sha}")
    assert plan.state == PlanState.PR_OPEN, plan.last_error
    issue.flow.merge()
    assert issue.settle().state == PlanState.MERGED


def test_split_opens_sub_issues_that_are_planned_merged_in_order_and_close_the_parent(
    parent: InProcess, github_http, wctx
) -> None:
    parent.flow.label()
    assert parent.settle().state == PlanState.DRAFT
    assert "**Parts**" in parent.flow.status()

    assert parent.comment("/split").state == PlanState.SPLIT
    assert github_http.sub_issue_numbers(REPO, 1) == [2, 3]
    assert github_http.blocking_numbers(REPO, 3) == [2]
    first, second = part(parent, 2), part(parent, 3)
    assert first.flow.title == "Add the widget model"
    assert "Part 2 of #1" in second.flow.body and "once part 1 is merged" in second.flow.body
    assert github_http.issue_labels(REPO, 2) == ["gaffer", "gaffer: draft"]
    for each in (first, second):
        plan = each.flow.plan()
        assert plan.state == PlanState.DRAFT  # planned on its own
        assert plan.issue_author == "reporter"  # the parent's: self-approval rules hold
        assert "`widgets.py`" in each.flow.status()  # its scope, as the parts asked
    status = parent.flow.status()
    assert "1. #2 Add the widget model — `draft`" in status
    assert "2. #3 Serve widgets from the API (after 1) — `draft`" in status

    # The second part, approved first, waits for the first to merge and says so.
    second.comment("/approve")
    assert second.flow.plan().state == PlanState.APPROVED
    assert "**Waiting:** queued: part 2 executes once part 1 (#2) is merged" in (
        second.flow.status()
    )
    to_merged(first)
    assert "1. #2 Add the widget model — `merged`" in parent.flow.status()
    assert parent.flow.plan().state == PlanState.SPLIT  # one part is still open

    # The first's merge sent the second at once, not at its next look a minute later.
    plan = second.flow.plan()
    assert plan.state == PlanState.IN_REVIEW, plan.last_error
    second.comment(f"/approve-diff {plan.head_sha}")
    second.flow.merge()
    second.settle()

    assert parent.flow.plan().state == PlanState.MERGED
    assert github_http.issue(REPO, 1)["state"] == "closed"
    said = [comment["body"] for comment in parent.flow.comments()]
    assert "Every part was merged (#2, #3): closing." in said
    assert "Every part was merged." in parent.flow.status()


def test_split_runs_again_opens_no_second_issue(parent: InProcess, github_http, wctx) -> None:
    parent.flow.label()
    parent.settle()
    parent.comment("/split")
    with wctx.db.session() as session:  # as if the job's worker died after its last call
        [job] = session.scalars(select(Job).where(Job.stage == "parts")).all()
        session.execute(
            update(PlanPart).values(issue_number=None, issue_id=None)
        )  # ...before it recorded what it opened
        session.execute(update(Job).where(Job.id == job.id).values(state=JobState.QUEUED))
    settle(wctx)
    assert github_http.sub_issue_numbers(REPO, 1) == [2, 3]
    assert sorted(number for (name, number) in github_http.issues if name == REPO.lower()) == [
        1,
        2,
        3,
    ]
    with wctx.db.session() as session:
        assert session.scalars(select(PlanPart.issue_number).order_by(PlanPart.number)).all() == [
            2,
            3,
        ]


def test_split_without_parts_asks_for_a_revision_that_proposes_them(here: InProcess, wctx) -> None:
    here.flow.label()
    here.settle()
    here.accept("/split")
    with wctx.db.session() as session:
        plan = session.scalars(select(Plan)).one()
        [job] = session.scalars(select(Job).where(Job.stage == "revise")).all()
    assert plan.state == PlanState.PLANNING
    assert "**Parts** section" in (job.feedback or "")
    assert job.program == "split"
