"""Two agent machines (separate GAFFER_HOMEs) on one database and broker: a repository limit
holds across them, a machine SIGKILLed mid-job has its job finished by the other, and each
machine reaps what was left on its own disk."""

from __future__ import annotations

import dataclasses
import os
import signal
from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, select

from bot.models import Job, JobState, Plan, PlanRevision, PlanState, aware, utcnow
from double.driver import IssueFlow
from tests.conftest import INSTALLATION_ID, REPO
from tests.support import WEBHOOK_SECRET, wait_for

ISSUES = 4
BODY = "The widget is slow.\n\n```gaffer-script\nplan:\n  - sleep: 3\n```\n"


def test_a_machine_killed_mid_job_leaves_its_job_to_the_other_and_limits_hold(
    app, client, github, origin: Path, start_worker, server_config: Path, tmp_path: Path
) -> None:
    server_config.write_text(
        server_config.read_text()
        + "limits: {repository: 1}\nreconcile_every_s: 2\nreap_every_s: 1\n"
    )
    github_worker = start_worker("github", concurrency=3, beat=True, wait=False)
    doomed = start_worker("agent", home=tmp_path / "machine-a", lease_seconds=5, wait=False)
    for worker in (github_worker, doomed):
        worker.wait_ready()
    flow = IssueFlow(app, client, github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET)
    flow.body = BODY
    issues = [dataclasses.replace(flow, number=n).open() for n in range(1, ISSUES + 1)]
    for issue in issues:
        issue.label()
    # Machine B comes up while A already plans: under the limit of one, B could otherwise
    # be handed every plan and leave A nothing to be killed in.
    other = start_worker("agent", home=tmp_path / "machine-b")
    db = app.extensions["gaffer_db"]

    def doomed_job_running_its_agent() -> Job | None:
        with db.session() as session:
            return session.scalars(
                select(Job).where(
                    Job.state == JobState.RUNNING,
                    Job.lease_owner.endswith(f":{doomed.process.pid}"),
                    Job.waiting_on.is_(None),
                    Job.started_at < utcnow() - timedelta(seconds=1),
                )
            ).first()

    victim = wait_for(doomed_job_running_its_agent, timeout=90, what="machine A to run a plan")
    os.killpg(doomed.process.pid, signal.SIGKILL)
    doomed.process.wait(timeout=10)

    def all_drafted() -> bool:
        with db.session() as session:
            states = session.scalars(select(Plan.state)).all()
        return len(states) == ISSUES and set(states) == {PlanState.DRAFT}

    wait_for(all_drafted, timeout=150, what="a draft plan on every issue")
    with db.session() as session:
        resumed = session.get_one(Job, victim.id)
        jobs = session.scalars(select(Job).where(Job.stage == "plan")).all()
        revisions = session.scalar(select(func.count(PlanRevision.id)))
    assert resumed.state == JobState.DONE
    assert resumed.lease_owner.endswith(f":{other.process.pid}")  # finished by machine B
    assert revisions == ISSUES  # every plan written once: no job ran twice to the end
    for issue in issues:  # the status comment follows the database a moment later
        wait_for(lambda issue=issue: "#### Plan r1" in issue.status(), what="the plan shown")
        assert issue.status().count("#### Plan r1") == 1
    runs = sorted((aware(job.started_at), aware(job.finished_at)) for job in jobs)
    for (_, ended), (started, _) in zip(runs, runs[1:], strict=False):
        assert started >= ended, "two plans of the repository ran at once"
    assert (tmp_path / "machine-b" / "jobs").is_dir()  # B worked in its own home

    # A's planning worktree stayed on A's disk when A died; B never sees it. A back up
    # reaps it, and B has left none of its own.
    assert planning_worktrees(tmp_path / "machine-a")
    start_worker("agent", home=tmp_path / "machine-a")
    wait_for(
        lambda: not planning_worktrees(tmp_path / "machine-a"),
        what="machine A to reap the worktree its killed job left",
    )
    assert not planning_worktrees(tmp_path / "machine-b")


def planning_worktrees(home: Path) -> list[str]:
    """The read-only worktrees of planning jobs on a machine's disk."""
    root = home / "worktrees" / ".readonly"
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
