"""A repository's concurrency limit holds across worker processes, and a waiting plan says
where it stands."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sqlalchemy import select

from bot.models import Job, Plan, PlanState, aware
from double.driver import IssueFlow
from double.origin import commit_to_origin
from tests.conftest import INSTALLATION_ID, REPO
from tests.support import WEBHOOK_SECRET, wait_for

ISSUES = 5
BODY = "The widget is slow.\n\n```gaffer-script\nplan:\n  - sleep: 2\n```\n"


@pytest.mark.parametrize("where", ["server", "repository"])
def test_a_repository_limit_of_one_holds_across_two_agent_workers(
    app, client, github, origin: Path, start_worker, server_config: Path, where: str
) -> None:
    if where == "server":
        server_config.write_text(server_config.read_text() + "limits: {repository: 1}\n")
    else:  # the repository's own .github/gaffer.yml
        commit_to_origin(origin, {".github/gaffer.yml": "concurrency: 1\n"}, "one at a time")
    workers = [
        start_worker("github", concurrency=3, wait=False),
        start_worker("agent", concurrency=2, wait=False),
        start_worker("agent", concurrency=2, wait=False),  # another machine's, as it were
    ]
    for worker in workers:
        worker.wait_ready()
    flow = IssueFlow(app, client, github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET)
    flow.body = BODY
    issues = [dataclasses.replace(flow, number=n).open() for n in range(1, ISSUES + 1)]
    for issue in issues:
        issue.label()

    said: list[str] = []  # what the status comments said while plans waited

    def all_drafted() -> bool:
        said.extend(
            comment["body"]
            for issue in issues
            for comment in issue.comments()
            if "in line for octo/widgets" in comment["body"]
        )
        with app.extensions["gaffer_db"].session() as session:
            states = session.scalars(select(Plan.state)).all()
        return len(states) == ISSUES and set(states) == {PlanState.DRAFT}

    wait_for(all_drafted, timeout=120, what="a draft plan on every issue")

    def planning_runs() -> list:
        with app.extensions["gaffer_db"].session() as session:
            return session.execute(
                select(Job.started_at, Job.finished_at).where(Job.stage == "plan")
            ).all()

    # A job is closed just after its plan is drafted.
    wait_for(lambda: all(end for _, end in planning_runs()), what="the plan jobs to end")
    runs = sorted((aware(start), aware(end)) for start, end in planning_runs())
    assert len(runs) == ISSUES
    for (_, ended), (started, _) in zip(runs, runs[1:], strict=False):
        assert started >= ended, "two plans of the repository ran at once"
    assert any(
        "**Waiting:** queued: 1st in line for octo/widgets (1 running, limit 1)" in body
        for body in said
    )
    assert "Waiting" not in issues[-1].status()  # said no more once the plan ran


def test_one_plans_checks_run_beside_the_next_plans_agent(
    app, client, github, origin: Path, start_worker, server_config: Path
) -> None:
    """The machine's one agent slot covers an agent's run, not its job: while the first
    plan's slow check runs, the second plan's agent has the slot."""
    server_config.write_text(server_config.read_text() + "agent_slots: 1\n")
    commit_to_origin(
        origin,
        {".github/gaffer.yml": "checks:\n  - name: slow\n    run: sleep 6\n    timeout: 60\n"},
        "a slow check",
    )
    start_worker("github", concurrency=3)
    start_worker("agent", concurrency=2)
    flow = IssueFlow(app, client, github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET)
    flow.body = (
        "Slow.\n\n```gaffer-script\n- sleep: 2\n- write: {path: done.txt, content: x}\n```\n"
    )
    first, second = (dataclasses.replace(flow, number=n).open() for n in (1, 2))
    for issue in (first, second):
        issue.label()
    for issue in (first, second):
        issue.wait_state(PlanState.DRAFT)
    for issue in (first, second):
        issue.comment("/approve")
    for issue in (first, second):
        issue.wait_state(PlanState.IN_REVIEW, timeout=120)
    runs = sorted(
        (run for run in github.check_runs(REPO) if run["name"].endswith("slow")),
        key=lambda run: run["started_at"],
    )
    assert len(runs) == 2
    earlier, later = runs
    # The later plan's agent ran (and its check began) while the earlier plan's check ran.
    assert later["started_at"] < earlier["completed_at"]
