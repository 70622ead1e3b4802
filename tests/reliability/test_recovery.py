"""B, E, F. The reconciler puts right what a dead worker, a lost comment or an outage left."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from bot.github import STATUS_MARKER
from bot.models import Delivery, Job, JobState, Plan, PlanState, utcnow
from bot.queue import RUN_JOB
from bot.status import publish_status
from double.origin import commit_to_origin
from tasks.gitcmd import git
from tasks.jobs import run_job
from tasks.leases import claim
from tasks.recovery.reconcile import (
    MAX_JOB_ATTEMPTS,
    Verdict,
    catch_up_failed_deliveries,
    reconcile,
    verdict_for,
)
from tasks.stages.costs import park
from tasks.worktrees import (
    WorktreePool,
    create_branch,
    ensure_mirror,
    readonly_worktree,
    unpushed_commits,
)
from tests.conftest import APP_ID, INSTALLATION_ID, REPO, TITLE, command_payload, status_comments
from tests.detached import cleaned_up, gone, killed_planner, start_detached
from tests.in_process import receive, the_plan
from tests.support import labeled

BRANCH = "gaffer/1-widgets-overflow-the-sidebar"


# --------------------------------------------------------------------------- arrangement


@pytest.fixture
def broker(wctx, monkeypatch) -> list[tuple[str, dict[str, Any]]]:
    """The tasks gaffer hands the broker, kept here so a test can run them as a worker would."""
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(wctx, "send_task", lambda name, **kwargs: sent.append((name, kwargs)))
    return sent


def labeled_plan(wctx, client, github, thread) -> tuple[int, int]:
    """Label issue #1 and return (plan id, id of its queued planning job)."""
    repo, issue_ = thread
    github.add_label(REPO, 1, "gaffer")
    receive(wctx, client, "issues", labeled(repo, issue_, installation_id=INSTALLATION_ID))
    with wctx.db.session() as session:
        [job] = session.scalars(select(Job)).all()
        return job.plan_id, job.id


def state_labels(github) -> list[str]:
    """Return gaffer's state labels on issue #1 (the trigger label stays beside them)."""
    return [name for name in github.issue_labels(REPO, 1) if name.startswith("gaffer: ")]


def drafted_plan(wctx, client, github, thread) -> int:
    """Label issue #1, write its plan, and return the plan's id (now `draft`)."""
    plan_id, job_id = labeled_plan(wctx, client, github, thread)
    run_job(wctx, job_id=job_id)
    assert the_plan(wctx).state == PlanState.DRAFT
    return plan_id


def approve(wctx, client, github, thread) -> int:
    """Approve the draft with a maintainer's `/approve`; return the execute job's id."""
    payload = command_payload(github, thread, "/approve")
    receive(wctx, client, "issue_comment", payload)
    with wctx.db.session() as session:
        return session.scalars(select(Job.id).where(Job.stage == "execute")).one()


def set_plan(wctx, plan_id: int, **values: Any) -> None:
    """Put the plan where a test needs it, as an earlier worker would have left it."""
    with wctx.db.session() as session:
        session.execute(update(Plan).where(Plan.id == plan_id).values(**values))


def add_job(wctx, plan_id: int, stage: str, **values: Any) -> int:
    with wctx.db.session() as session:
        job = Job(plan_id=plan_id, stage=stage, key=f"{stage}:test", **values)
        session.add(job)
        session.flush()
        return job.id


def running(wctx, job_id: int, lease_left: timedelta, attempts: int = 1) -> None:
    """Mark the job taken by a worker whose lease has lease_left to run (negative: expired)."""
    with wctx.db.session() as session:
        session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(
                state=JobState.RUNNING,
                lease_owner="worker-host:4242",
                lease_expires_at=utcnow() + lease_left,
                attempts=attempts,
                started_at=utcnow() - timedelta(minutes=5),
            )
        )


def worker_died(wctx, job_id: int, attempts: int = 1) -> None:
    """Leave the job as a SIGKILLed worker does: running, its lease run out."""
    running(wctx, job_id, -timedelta(minutes=1), attempts)


def the_job(wctx, job_id: int) -> Job:
    with wctx.db.session() as session:
        return session.get_one(Job, job_id)


def replies(github) -> list[str]:
    """gaffer's comments on issue #1 other than its status comment."""
    return [
        c["body"]
        for c in github.comments(REPO, 1)
        if c["user"]["type"] == "Bot" and STATUS_MARKER not in c["body"]
    ]


def reconcile_once(wctx, caplog) -> None:
    """Run every pass, failing the test on any error a pass swallowed."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tasks.recovery.reconcile"):
        reconcile(wctx)
    assert not [r.getMessage() for r in caplog.records if r.exc_info]


# --------------------------------------------------------------------------- dead workers


@pytest.mark.parametrize(
    ("stage", "attempts", "expected"),
    [
        pytest.param("plan", 1, Verdict.RESUME, id="a first death resumes"),
        pytest.param("execute", MAX_JOB_ATTEMPTS - 1, Verdict.RESUME, id="a second death resumes"),
        pytest.param("execute", MAX_JOB_ATTEMPTS, Verdict.FAIL, id="a third death fails"),
        pytest.param("unknown", 1, Verdict.FAIL, id="a stage gaffer cannot resume fails"),
    ],
)
def test_a_dead_job_is_resumed_until_it_died_too_often(stage, attempts, expected) -> None:
    state = PlanState.PLANNING if stage == "plan" else PlanState.EXECUTING
    assert verdict_for(stage, attempts, state) == expected


DEAD_JOBS = [
    pytest.param(
        "plan",
        PlanState.PLANNING,
        1,
        (JobState.QUEUED, PlanState.PLANNING),
        "gaffer's worker stopped while planning ran; the job was resumed on another worker.",
        id="a planning job whose worker died is resumed and the issue is told",
    ),
    pytest.param(
        "execute",
        PlanState.EXECUTING,
        2,
        (JobState.QUEUED, PlanState.EXECUTING),
        "gaffer's worker stopped while execution ran; the job was resumed on another worker.",
        id="an execution job whose worker died twice is resumed and the issue is told",
    ),
    pytest.param(
        "plan",
        PlanState.PLANNING,
        3,
        (JobState.FAILED, PlanState.FAILED),
        "gaffer's worker stopped 3 times while planning ran, so the plan is marked failed. "
        "Comment `/retry` to start again.",
        id="a planning job whose worker died three times fails the plan with retry offered",
    ),
    pytest.param(
        "execute",
        PlanState.EXECUTING,
        3,
        (JobState.FAILED, PlanState.FAILED),
        "gaffer's worker stopped 3 times while execution ran, so the plan is marked failed. "
        "Comment `/retry` to start again.",
        id="a job whose worker died three times fails the plan with retry offered",
    ),
    pytest.param(
        "execute",
        PlanState.APPROVED,
        3,
        (JobState.FAILED, PlanState.FAILED),
        "gaffer's worker stopped 3 times while execution ran, so the plan is marked failed. "
        "Comment `/retry` to start again.",
        id="a job whose worker died three times before starting the work fails the plan",
    ),
    pytest.param(
        "execute",
        PlanState.VERIFYING,
        1,
        (JobState.FAILED, PlanState.FAILED),
        "gaffer's worker stopped once while the checks ran, so the plan is marked failed. "
        "Comment `/retry` to start again.",
        id="a job whose worker died during the checks fails the plan with retry offered",
    ),
]


@pytest.mark.parametrize(("stage", "plan_state", "attempts", "outcome", "reply"), DEAD_JOBS)
def test_a_job_whose_worker_died_is_resumed_or_failed_and_the_issue_told(
    wctx, client, github, thread, broker, caplog, stage, plan_state, attempts, outcome, reply
) -> None:
    if stage == "plan":
        plan_id, job_id = labeled_plan(wctx, client, github, thread)
    else:
        plan_id = drafted_plan(wctx, client, github, thread)
        set_plan(wctx, plan_id, state=plan_state, approved_revision=1)
        job_id = add_job(wctx, plan_id, stage)
    worker_died(wctx, job_id, attempts)
    broker.clear()

    reconcile_once(wctx, caplog)
    reconcile_once(wctx, caplog)  # a second pass finds nothing more to do

    job, plan = the_job(wctx, job_id), the_plan(wctx)
    assert (job.state, plan.state) == outcome
    assert replies(github) == [reply]
    if outcome[0] == JobState.QUEUED:
        assert broker == [(RUN_JOB, {"job_id": job_id})]
        assert job.lease_owner is None
    else:
        assert broker == []
        times = "once" if attempts == 1 else f"{attempts} times"
        assert plan.last_error == job.error == f"the worker running this job stopped {times}"
        [status] = status_comments(github)
        assert "`failed`" in status["body"] and plan.last_error in status["body"]
        assert "`/retry`" in status["body"]
        assert state_labels(github) == ["gaffer: failed"]


def test_a_resumed_planning_job_finishes_on_the_next_worker(
    wctx, client, github, thread, broker, caplog
) -> None:
    _, job_id = labeled_plan(wctx, client, github, thread)
    worker_died(wctx, job_id)
    broker.clear()
    reconcile_once(wctx, caplog)
    [(task, kwargs)] = broker
    run_job(wctx, **kwargs)
    assert the_job(wctx, job_id).state == JobState.DONE
    assert the_plan(wctx).state == PlanState.DRAFT
    [status] = status_comments(github)
    assert "Plan r1" in status["body"] and TITLE in status["body"]


def test_a_job_held_twice_then_lost_with_its_worker_is_resumed_not_failed(
    wctx, client, github, thread, broker, caplog
) -> None:
    """Waiting for a budget or a quota is not a try: two holds and one death still resume."""
    _, job_id = labeled_plan(wctx, client, github, thread)
    for _ in range(2):
        assert claim(wctx.db, job_id, wctx.worker_id)
        assert park(wctx, job_id, utcnow() - timedelta(seconds=1), "held by the daily budget")
    assert claim(wctx.db, job_id, "dead-worker:1")
    with wctx.db.session() as session:
        expired = utcnow() - timedelta(minutes=1)
        session.execute(update(Job).where(Job.id == job_id).values(lease_expires_at=expired))
    broker.clear()
    reconcile_once(wctx, caplog)
    assert broker == [(RUN_JOB, {"job_id": job_id})]
    run_job(wctx, job_id=job_id)
    assert (the_job(wctx, job_id).state, the_plan(wctx).state) == (JobState.DONE, PlanState.DRAFT)
    assert replies(github) == [
        "gaffer's worker stopped while planning ran; the job was resumed on another worker."
    ]


def test_a_config_broken_before_the_planner_ran_fails_the_plan_saying_what_to_fix(
    wctx, client, github, thread, origin
) -> None:
    _, job_id = labeled_plan(wctx, client, github, thread)
    # Pushed between the label and the planner: the planner reads it, not the handler.
    commit_to_origin(origin, {".github/gaffer.yml": "max_retries: 99\n"}, "a bad config")
    run_job(wctx, job_id=job_id)
    plan = the_plan(wctx)
    assert (plan.state, the_job(wctx, job_id).state) == (PlanState.FAILED, JobState.FAILED)
    assert "`max_retries` must be a whole number from 0 to 10" in (plan.last_error or "")
    [status] = status_comments(github)
    assert "`max_retries` must be a whole number from 0 to 10" in status["body"]
    assert state_labels(github) == ["gaffer: failed"]


def test_a_resumed_execution_continues_from_the_pushed_branch(
    wctx, client, github, thread, broker, caplog, origin
) -> None:
    plan_id = drafted_plan(wctx, client, github, thread)
    job_id = approve(wctx, client, github, thread)
    base = the_plan(wctx).base_sha
    pushed = push_to_branch(origin, BRANCH, base, {"half-done.txt": "from the first worker\n"})
    set_plan(wctx, plan_id, state=PlanState.EXECUTING, branch=BRANCH)
    worker_died(wctx, job_id)
    broker.clear()

    reconcile_once(wctx, caplog)
    [(task, kwargs)] = broker
    run_job(wctx, **kwargs)

    plan = the_plan(wctx)
    assert plan.state == PlanState.IN_REVIEW
    assert git(["merge-base", "--is-ancestor", pushed, plan.head_sha or ""], cwd=origin) == ""
    assert git(["show", f"{plan.head_sha}:half-done.txt"], cwd=origin) == "from the first worker"
    assert len(replies(github)) == 1


def push_to_branch(origin: Path, branch: str, base: str | None, files: dict[str, str]) -> str:
    """Push a commit on branch from base to origin, as a worker does before it dies."""
    work = origin.parent / "dead-worker"
    git(["clone", "--quiet", str(origin), str(work)], cwd=origin.parent)
    git(["checkout", "--quiet", "-b", branch, base or "main"], cwd=work)
    for name, content in files.items():
        (work / name).write_text(content)
    git(["add", "--all"], cwd=work)
    git(["commit", "--quiet", "-m", "half the work"], cwd=work)
    git(["push", "--quiet", "origin", branch], cwd=work)
    return git(["rev-parse", "HEAD"], cwd=work)


@pytest.mark.parametrize(
    ("plan_state", "lease", "job_state"),
    [
        pytest.param(
            PlanState.PLANNING,
            timedelta(minutes=1),
            JobState.RUNNING,
            id="a job whose worker is alive is left alone",
        ),
        pytest.param(
            PlanState.CANCELLED,
            -timedelta(minutes=1),
            JobState.CANCELLED,
            id="a dead job of a plan that ended is dropped without a word",
        ),
    ],
)
def test_a_job_that_needs_no_recovery_is_not_resumed(
    wctx, client, github, thread, broker, caplog, plan_state, lease, job_state
) -> None:
    plan_id, job_id = labeled_plan(wctx, client, github, thread)
    set_plan(wctx, plan_id, state=plan_state)
    running(wctx, job_id, lease)
    broker.clear()
    reconcile_once(wctx, caplog)
    assert the_job(wctx, job_id).state == job_state
    assert the_plan(wctx).state == plan_state
    assert replies(github) == [] and broker == []


@pytest.mark.parametrize(
    ("waited", "parked_for", "sent"),
    [
        pytest.param(timedelta(hours=1), None, True, id="a queued job nobody took is sent again"),
        pytest.param(timedelta(minutes=1), None, False, id="a job queued a moment ago waits"),
        pytest.param(
            timedelta(hours=1),
            timedelta(hours=2),
            False,
            id="a job parked until its quota resets waits",
        ),
        pytest.param(
            timedelta(hours=1),
            -timedelta(minutes=1),
            True,
            id="a parked job is sent again once its quota has reset",
        ),
        pytest.param(
            timedelta(minutes=1),
            -timedelta(seconds=5),
            True,
            id="a job parked a moment ago is sent as soon as its quota resets",
        ),
    ],
)
def test_a_queued_job_is_sent_again_when_it_waited_too_long(
    wctx, client, github, thread, broker, caplog, waited, parked_for, sent
) -> None:
    _, job_id = labeled_plan(wctx, client, github, thread)
    with wctx.db.session() as session:
        job = session.get_one(Job, job_id)
        job.created_at = utcnow() - waited
        job.parked_until = utcnow() + parked_for if parked_for else None
    broker.clear()
    reconcile_once(wctx, caplog)
    assert broker == ([(RUN_JOB, {"job_id": job_id})] if sent else [])
    for _, kwargs in broker:  # a worker takes what was sent
        run_job(wctx, **kwargs)
    assert the_job(wctx, job_id).state == (JobState.DONE if sent else JobState.QUEUED)
    assert the_plan(wctx).state == (PlanState.DRAFT if sent else PlanState.PLANNING)
    assert replies(github) == []


# --------------------------------------------------------------------------- worktrees


# What the reaper leaves: (the worktree, the plan branch in the mirror).
ALL_REMOVED, ALL_KEPT, BRANCH_KEPT = (False, False), (True, True), (False, True)


@pytest.mark.parametrize(
    ("plan_state", "left_behind", "kept"),
    [
        pytest.param(PlanState.REJECTED, None, ALL_REMOVED, id="an orphaned worktree is removed"),
        pytest.param(PlanState.EXECUTING, None, ALL_KEPT, id="an active plan's worktree is kept"),
        pytest.param(
            PlanState.CANCELLED,
            "a running job",
            ALL_KEPT,
            id="the worktree of a job still running is kept",
        ),
        pytest.param(
            PlanState.FAILED,
            "an unpushed commit",
            BRANCH_KEPT,
            id="a branch with unpushed work is kept",
        ),
    ],
)
def test_the_reaper_removes_worktrees_of_ended_plans_only(
    wctx, client, github, thread, origin, caplog, plan_state, left_behind, kept
) -> None:
    plan_id = drafted_plan(wctx, client, github, thread)
    home = wctx.settings.home
    mirror = ensure_mirror(home, REPO, str(origin), None)
    base = git(["rev-parse", "refs/remotes/origin/main"], cwd=mirror)
    worktree = WorktreePool(home, REPO, mirror).acquire(f"plan-{plan_id}", base)
    create_branch(worktree, BRANCH, base)
    if left_behind == "an unpushed commit":
        (worktree / "notes.txt").write_text("never pushed\n")
        git(["add", "--all"], cwd=worktree)
        git(["commit", "--quiet", "-m", "work in progress"], cwd=worktree)
    set_plan(wctx, plan_id, state=plan_state)
    if left_behind == "a running job":
        running(wctx, add_job(wctx, plan_id, "execute"), timedelta(minutes=1))

    reconcile_once(wctx, caplog)
    reconcile_once(wctx, caplog)

    leased = f"plan-{plan_id}" in WorktreePool(home, REPO, mirror).leases()
    has_branch = BRANCH in git(["branch", "--list", BRANCH], cwd=mirror)
    assert (worktree.exists(), has_branch) == kept
    assert leased == kept[0]
    if left_behind == "an unpushed commit":
        assert unpushed_commits(mirror, BRANCH) == 1
        assert f"kept branch {BRANCH}" in caplog.text


@pytest.fixture
def strays() -> Iterator[list[int]]:
    """Pids the test left running on purpose; killed afterwards should the test fail."""
    with cleaned_up([]) as pids:
        yield pids


@pytest.mark.parametrize(
    ("plan_state", "killed"),
    [
        pytest.param(PlanState.CANCELLED, True, id="an ended plan's processes are killed"),
        pytest.param(PlanState.EXECUTING, False, id="an active plan's processes are left"),
    ],
)
def test_the_reaper_kills_what_an_ended_plans_agent_left_running(
    wctx, client, github, thread, origin, caplog, strays, plan_state, killed
) -> None:
    plan_id = drafted_plan(wctx, client, github, thread)
    home = wctx.settings.home
    mirror = ensure_mirror(home, REPO, str(origin), None)
    base = git(["rev-parse", "refs/remotes/origin/main"], cwd=mirror)
    worktree = WorktreePool(home, REPO, mirror).acquire(f"plan-{plan_id}", base)
    strays.append(start_detached(worktree))  # the agent died; what it started lives on
    set_plan(wctx, plan_id, state=plan_state)

    reconcile_once(wctx, caplog)

    assert gone(strays[0]) == killed
    assert worktree.exists() != killed


def test_a_planner_killed_mid_run_leaves_no_readonly_worktree_behind(
    wctx, origin, caplog, strays
) -> None:
    home = wctx.settings.home
    mirror = ensure_mirror(home, REPO, str(origin), None)
    base = git(["rev-parse", "refs/remotes/origin/main"], cwd=mirror)
    orphan, stray = killed_planner(mirror, base, home)
    strays.append(stray)

    with readonly_worktree(mirror, base, home) as planning:
        reconcile_once(wctx, caplog)
        assert (planning / "README.md").exists()  # a live planner keeps its worktree

    assert not orphan.exists() and gone(stray)
    assert f"removed the read-only worktree {orphan.name}" in caplog.text
    assert git(["worktree", "list", "--porcelain"], cwd=mirror).count("worktree ") == 1


# --------------------------------------------------------------------------- status comments


def delete_status_comment(github, wctx) -> None:
    [status] = status_comments(github)
    with github.lock:
        del github.all_comments[status["id"]]


def forget_status_comment_id(github, wctx) -> None:
    set_plan(wctx, the_plan(wctx).id, status_comment_id=None)


def delete_comment_and_forget_its_id(github, wctx) -> None:
    delete_status_comment(github, wctx)
    forget_status_comment_id(github, wctx)


def relabel(github, *names: str) -> None:
    """Leave issue #1 with exactly these labels, as a person editing them would."""
    with github.lock:
        record = github.issue_record(REPO, 1)
        record.labels = []
        for name in names:
            github.attach_label(record, name)


def set_wrong_label(github, wctx) -> None:
    relabel(github, "bug", "gaffer: planning")


def remove_label(github, wctx) -> None:
    relabel(github, "bug")


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(delete_status_comment, id="a deleted status comment is posted again"),
        pytest.param(
            forget_status_comment_id,
            id="a forgotten comment id finds the comment instead of posting another",
        ),
        pytest.param(
            delete_comment_and_forget_its_id,
            id="a status comment gone from GitHub and the database is posted again",
        ),
        pytest.param(set_wrong_label, id="a wrong state label is put right"),
        pytest.param(remove_label, id="a removed state label is put back"),
    ],
)
def test_the_issue_shows_the_status_again(wctx, client, github, thread, caplog, damage) -> None:
    plan_id = drafted_plan(wctx, client, github, thread)
    damage(github, wctx)
    set_plan(wctx, plan_id, updated_at=utcnow() - timedelta(minutes=10))
    reconcile_once(wctx, caplog)
    reconcile_once(wctx, caplog)
    [status] = status_comments(github)
    assert "`draft`" in status["body"] and "Plan r1" in status["body"]
    assert the_plan(wctx).status_comment_id == status["id"]
    labels = github.issue_labels(REPO, 1)
    assert [name for name in labels if name.startswith("gaffer: ")] == ["gaffer: draft"]


def test_a_status_that_is_right_costs_no_writes(wctx, client, github, thread, caplog) -> None:
    plan_id = drafted_plan(wctx, client, github, thread)
    set_plan(wctx, plan_id, updated_at=utcnow() - timedelta(minutes=10))
    before = len(github.requests)
    reconcile_once(wctx, caplog)
    writes = [r for r in github.requests[before:] if r.method != "GET"]
    assert writes == []


def test_a_new_state_is_shown_with_writes_alone(wctx, client, github, thread) -> None:
    """gaffer notes what it last put on the issue, so showing a new state edits the
    comment and swaps the label without reading either first; an unchanged one is read."""
    plan_id = drafted_plan(wctx, client, github, thread)
    set_plan(wctx, plan_id, state=PlanState.APPROVED)
    repo_client = wctx.client(INSTALLATION_ID, REPO)
    before = len(github.requests)
    publish_status(wctx.db, repo_client, plan_id)
    issue = f"/repos/{REPO}/issues"
    made = [(r.method, r.path) for r in github.requests[before:]]
    assert made == [
        ("PATCH", f"{issue}/comments/{the_plan(wctx).status_comment_id}"),
        ("POST", f"{issue}/1/labels"),
        ("DELETE", f"{issue}/1/labels/gaffer: draft"),
    ]
    [status] = status_comments(github)
    assert "`approved`" in status["body"]
    labels = github.issue_labels(REPO, 1)
    assert [name for name in labels if name.startswith("gaffer: ")] == ["gaffer: approved"]
    before = len(github.requests)
    publish_status(wctx.db, repo_client, plan_id)
    assert [r.method for r in github.requests[before:]] == ["GET", "GET"]


def test_a_note_gone_stale_still_leaves_the_comment_and_one_state_label(
    wctx, client, github, thread
) -> None:
    """Someone deleted the status comment and put another state label on meanwhile: what
    gaffer noted is wrong, and the issue still ends with its comment and its one state
    label. A priority label, though it starts `gaffer: ` too, is a person's and stays."""
    plan_id = drafted_plan(wctx, client, github, thread)
    delete_status_comment(github, wctx)
    relabel(github, "bug", "gaffer: p1", "gaffer: icebox")
    set_plan(wctx, plan_id, state=PlanState.APPROVED)
    publish_status(wctx.db, wctx.client(INSTALLATION_ID, REPO), plan_id)
    [status] = status_comments(github)
    assert "`approved`" in status["body"]
    assert the_plan(wctx).status_comment_id == status["id"]
    assert github.issue_labels(REPO, 1) == ["bug", "gaffer: p1", "gaffer: approved"]


@pytest.mark.parametrize(
    ("state", "changed"),
    [
        pytest.param(
            PlanState.REJECTED, timedelta(days=3), id="a plan that ended days ago is left alone"
        ),
        pytest.param(
            PlanState.DRAFT,
            timedelta(seconds=5),
            id="a plan that just changed is left to the worker publishing it",
        ),
    ],
)
def test_a_plan_outside_the_checked_window_is_left_alone(
    wctx, client, github, thread, caplog, state, changed
) -> None:
    plan_id = drafted_plan(wctx, client, github, thread)
    delete_status_comment(github, wctx)
    set_plan(wctx, plan_id, state=state, updated_at=utcnow() - changed)
    reconcile_once(wctx, caplog)
    assert status_comments(github) == []


# --------------------------------------------------------------------------- failed deliveries

MINUTES = timedelta(minutes=1)
HANDLED = ("issue_comment", "created")


def attempt(
    age: timedelta, status: int = 502, *, event: tuple[str, str | None] = HANDLED, again=False
) -> dict[str, Any]:
    """One entry of the App's delivery log for the guid under test."""
    return {"age": age, "status": status, "event": event, "redelivery": again}


DELIVERIES = [
    pytest.param([attempt(10 * MINUTES)], False, True, id="a failed delivery is redelivered once"),
    pytest.param(
        [attempt(10 * MINUTES)], True, False, id="a delivery gaffer stored is not redelivered"
    ),
    pytest.param(
        [attempt(timedelta(seconds=30))], False, False, id="a failure under two minutes old waits"
    ),
    pytest.param(
        [attempt(timedelta(days=2))],
        False,
        False,
        id="a failure older than the window is not redelivered",
    ),
    pytest.param(
        [attempt(10 * MINUTES), attempt(5 * MINUTES, 200, again=True)],
        False,
        False,
        id="a delivery whose redelivery succeeded is not redelivered",
    ),
    pytest.param(
        [attempt(10 * MINUTES), attempt(5 * MINUTES, 502, again=True)],
        False,
        False,
        id="a delivery redelivered before is never asked for twice",
    ),
    pytest.param(
        [attempt(10 * MINUTES, event=("ping", None))],
        False,
        False,
        id="an event gaffer does not handle is not redelivered",
    ),
    pytest.param(
        [attempt(10 * MINUTES, 0)],
        False,
        True,
        id="a delivery that timed out is redelivered",
    ),
]


@pytest.mark.parametrize(("attempts", "stored", "redelivered"), DELIVERIES)
def test_failed_deliveries_gaffer_never_stored_are_redelivered_once(
    wctx, github, attempts, stored, redelivered
) -> None:
    guid = "5f1e0c2a-0000-4000-8000-000000000001"
    first_id = None
    for entry in attempts:
        event, action = entry["event"]
        github.add_delivery(event, action=action, guid=guid, status_code=entry["status"])
        record = github.deliveries[-1]
        record.delivered_at = record.delivered_at - entry["age"]
        record.redelivery = entry["redelivery"]
        first_id = first_id or record.id
    # Newer successes from other deliveries fill the first pages of the log.
    for _ in range(5):
        github.add_delivery("issues", action="labeled")
    if stored:
        with wctx.db.session() as session:
            session.add(
                Delivery(
                    source="github",
                    hook_id=str(APP_ID),
                    delivery_id=guid,
                    event="issue_comment",
                    action="created",
                    payload="{}",
                    processed_at=utcnow(),
                )
            )

    catch_up_failed_deliveries(wctx, per_page=2)
    catch_up_failed_deliveries(wctx, per_page=2)

    assert github.redelivered == ([first_id] if redelivered else [])
