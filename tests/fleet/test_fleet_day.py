"""A team's day at once: twenty issues on two repositories, plans whose scopes overlap,
limits per repository and per provider account, a provider that refuses every run for a
while, and an agent machine SIGKILLed midway. Every plan ends exactly once, overlapping
plans never execute together, the limits hold, and the storm costs one refused run."""

from __future__ import annotations

import dataclasses
import itertools
import os
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select

from bot.models import Job, JobState, Plan, PlanRevision, PlanState, Repository, aware
from double.driver import IssueFlow
from double.origin import commit_to_origin, make_origin
from tests.conftest import INSTALLATION_ID, REPO
from tests.support import WEBHOOK_SECRET, wait_for, write_server_config

FAKES = Path(__file__).resolve().parents[1] / "fixtures" / "fake_agents"
OTHER = "octo/gadgets"
PER_REPOSITORY = 10
REPOSITORY_LIMIT = 2
ACCOUNT_LIMIT = 3
LIMITED_FOR_S = 30
REFUSAL = "Claude AI usage limit reached"
CONFIG = "agent: fleet\nchecks:\n  - name: tests\n    run: 'true'\n    timeout: 30\n"
# Each repository's issues touch three areas in turn: plans of one area overlap.
AREAS = ("src/widgets/*.py", "docs/", "src/api/*.py")


@pytest.fixture
def until_file(tmp_path: Path) -> Path:
    path = tmp_path / "limit" / "until"
    path.parent.mkdir()
    path.write_text("0")  # the storm starts once the workers are up
    return path


@pytest.fixture
def server_config(tmp_path: Path, until_file: Path) -> Path:
    agent = {
        "command": ["{python}", str(FAKES / "fleet.py"), "{prompt_file}", str(until_file)],
        "output": "claude-json",
    }
    path = write_server_config(
        tmp_path / "gaffer-server.yml", {"fleet": agent}, [FAKES, until_file.parent]
    )
    path.write_text(
        path.read_text()
        + f"limits: {{repository: {REPOSITORY_LIMIT}, account: {ACCOUNT_LIMIT}}}\n"
        + "reconcile_every_s: 2\n"
        # A job whose message the killed machine had taken but not started is sent again
        # by the reconciler after job_stale_s (600 s in production).
        + "job_stale_s: 20\n"
    )
    return path


def overlaps(spans: list[tuple[datetime, datetime]]) -> int:
    """The most spans open at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    return max(itertools.accumulate(step for _, step in edges), default=0)


def test_twenty_plans_two_repositories_a_storm_and_a_dead_machine(
    app, client, github, origin: Path, start_worker, settings, tmp_path: Path, until_file: Path
) -> None:
    gadgets = make_origin(tmp_path / "gadgets", {"README.md": "# gadgets\n"})
    github.add_repo(OTHER, gadgets, installation_id=INSTALLATION_ID)
    github.permissions[(OTHER, "maintainer")] = "write"
    for each in (origin, gadgets):
        commit_to_origin(each, {".github/gaffer.yml": CONFIG}, "configure gaffer")
    github_worker = start_worker("github", concurrency=4, beat=True, wait=False)
    doomed = start_worker("agent", home=tmp_path / "machine-a", lease_seconds=5, wait=False)
    other = start_worker("agent", home=tmp_path / "machine-b", wait=False)
    for worker in (github_worker, doomed, other):
        worker.wait_ready()
    until_file.write_text(str(time.time() + LIMITED_FOR_S))

    issues = []
    for full_name, repo_origin in ((REPO, origin), (OTHER, gadgets)):
        flow = IssueFlow(
            app, client, github, repo_origin, full_name, INSTALLATION_ID, WEBHOOK_SECRET
        )
        for number in range(1, PER_REPOSITORY + 1):
            area = AREAS[number % len(AREAS)]
            body = f"fleet-scope: {area}\nfleet-issue: {number}\n"
            issues.append(dataclasses.replace(flow, number=number, body=body).open())
    for issue in issues:
        issue.label()
    db = app.extensions["gaffer_db"]

    def states() -> list[PlanState]:
        with db.session() as session:
            return list(session.scalars(select(Plan.state)))

    wait_for(
        lambda: states().count(PlanState.DRAFT) == len(issues),
        timeout=LIMITED_FOR_S + 180,
        what="a draft plan on every issue after the storm",
    )
    for issue in issues:
        issue.comment("/approve")

    def doomed_executing() -> Job | None:
        with db.session() as session:
            return session.scalars(
                select(Job).where(
                    Job.stage == "execute",
                    Job.state == JobState.RUNNING,
                    Job.lease_owner.endswith(f":{doomed.process.pid}"),
                    Job.waiting_on.is_(None),
                )
            ).first()

    victim = wait_for(doomed_executing, timeout=120, what="machine A to execute a plan")
    os.killpg(doomed.process.pid, signal.SIGKILL)
    doomed.process.wait(timeout=10)

    wait_for(
        lambda: states().count(PlanState.IN_REVIEW) == len(issues),
        timeout=300,
        what="every plan in review",
    )

    def jobs_open() -> int:  # a job is closed just after its plan reaches review
        with db.session() as session:
            return session.scalar(select(func.count(Job.id)).where(Job.finished_at.is_(None)))

    wait_for(lambda: jobs_open() == 0, what="every job closed")
    with db.session() as session:
        revisions = session.scalar(select(func.count(PlanRevision.id)))
        rows = session.execute(
            select(
                Repository.full_name,
                Job.stage,
                Job.state,
                Job.started_at,
                Job.finished_at,
                Job.id,
                PlanRevision.scope,
            )
            .join(Plan, Plan.id == Job.plan_id)
            .join(Repository, Repository.id == Plan.repository_id)
            .join(PlanRevision, (PlanRevision.plan_id == Plan.id) & (PlanRevision.number == 1))
        ).all()
        resumed = session.get_one(Job, victim.id)
    # Every plan was written once and executed once, to the end.
    assert revisions == len(issues)
    executions = [row for row in rows if row.stage == "execute"]
    assert len(executions) == len(issues)
    assert {row.state for row in rows} == {JobState.DONE}
    assert resumed.lease_owner.endswith(f":{other.process.pid}")  # B finished A's job

    spans = {row.id: (aware(row.started_at), aware(row.finished_at)) for row in rows}
    # Plans whose scopes overlap never executed together.
    for (_, _), group in itertools.groupby(
        sorted(executions, key=lambda r: (r.full_name, r.scope)),
        key=lambda r: (r.full_name, r.scope),
    ):
        assert overlaps([spans[row.id] for row in group]) == 1
    # The limits held, per repository and on the one provider account.
    for full_name in (REPO, OTHER):
        mine = [spans[row.id] for row in rows if row.full_name == full_name]
        assert overlaps(mine) <= REPOSITORY_LIMIT
    assert overlaps(list(spans.values())) <= ACCOUNT_LIMIT
    # The storm: the cold account's probe was refused, and no other run.
    refused = sum(
        log.read_text().count(REFUSAL) for log in tmp_path.glob("machine-*/jobs/*/*/agent.log")
    )
    assert refused == 1
