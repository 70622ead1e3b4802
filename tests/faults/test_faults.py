"""Faults with real processes: a worker killed mid-job, the broker down, GitHub failing.

Each case is a sentence from RELIABILITY.md and ends by reading what GitHub (the double),
the database and the disk show.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select, update

from bot.github import STATUS_MARKER, GitHubApp
from bot.handlers.installations import remember_installation, remember_repository
from bot.masking import SecretMask
from bot.models import (
    Delivery,
    Installation,
    Job,
    JobState,
    Plan,
    PlanState,
    Repository,
    utcnow,
)
from bot.status import publish_status
from double.driver import IssueFlow
from double.origin import commit_to_origin
from tasks.gitcmd import git
from tasks.leases import claim
from tasks.recovery.reconcile import reconcile, resend_outbox
from tasks.worktrees import WorktreePool, ensure_mirror, mirror_path
from tests.conftest import INSTALLATION_ID, REPO
from tests.detached import cleaned_up, gone, killed_planner
from tests.faults.conftest import CONFIG, BrokerOutage, BuildContext, StartWorker, private_redis
from tests.support import WEBHOOK_SECRET, WebProcess, deliver, labeled, wait_for

GOOD = "- write: {path: widgets.py, content: \"VALUE = 'good'\\n\"}\n"


def script(execute: str, plan: str = "") -> str:
    """An issue body carrying steps for the script agent."""
    steps = {"execute": execute, "plan": plan}
    block = "".join(
        f"{stage}:\n" + "".join(f"  {line}\n" for line in lines.splitlines())
        for stage, lines in steps.items()
        if lines
    )
    return f"The widget is wrong.\n\n```gaffer-script\n{block}```\n"


def status_comments(flow: IssueFlow) -> list[str]:
    return [c["body"] for c in flow.comments() if STATUS_MARKER in c["body"]]


def aware(moment: datetime | None) -> datetime | None:
    """SQLite hands back naive UTC datetimes; PostgreSQL aware ones."""
    return moment.replace(tzinfo=UTC) if moment and moment.tzinfo is None else moment


# --------------------------------------------------------------------------- worker killed

# An agent that sleeps through its first run of a job and does the work when run again: the
# first run is the one the killed worker leaves behind, the second is the resumed job's.
# Both runs of one job share its HOME (in the job's folder), which keeps the mark.
FIRST_RUN_SLEEPS = {
    "command": [
        "sh",
        "-c",
        'mkdir "$HOME/first-run" 2>/dev/null && exec sleep 120; '
        'exec "$0" -I -m tasks.agents.script_agent "$1"',
        "{python}",
        "{prompt_file}",
    ],
    "plan_command": ["{python}", "-I", "-m", "tasks.agents.script_agent", "{prompt_file}"],
    "output": "text",
}


def agent_groups(home: Path, program: bytes = b"") -> set[int]:
    """Return the process groups of processes working inside home (agents and checks).

    In the sandbox the group is led by the sandbox's first process, not by the agent.
    """
    groups = set()
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            pid = int(proc.name)
            if Path(os.readlink(proc / "cwd")).is_relative_to(home) and (
                proc / "cmdline"
            ).read_bytes().startswith(program):
                groups.add(os.getpgid(pid))
    return groups


def execute_job(flow: IssueFlow) -> Job:
    with flow.app.extensions["gaffer_db"].session() as session:
        return session.scalars(select(Job).where(Job.stage == "execute")).one()


@pytest.fixture
def first_run_sleeps(flow: IssueFlow, server_config: Path, settings) -> Iterator[IssueFlow]:
    """Make the repository use the agent that sleeps through its first run."""
    agents = yaml.safe_dump({"agents": {"first-run-sleeps": FIRST_RUN_SLEEPS}})
    server_config.write_text(server_config.read_text() + agents)
    config = CONFIG + "agent: first-run-sleeps\n"
    commit_to_origin(flow.origin, {".github/gaffer.yml": config}, "a slow agent")
    flow.body = script(GOOD)
    yield flow
    for group in agent_groups(settings.home):  # what the killed worker left running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def test_a_worker_killed_with_sigkill_mid_job_the_lease_expires_and_the_job_is_resumed(
    first_run_sleeps: IssueFlow,
    start_worker: StartWorker,
    worker_context: BuildContext,
    settings,
) -> None:
    """A worker killed with SIGKILL mid-job: the lease expires, the job is resumed, the
    worktree cleaned, the issue told.

    The doomed worker holds its jobs on a 5-second lease (GAFFER_LEASE_SECONDS), so the
    lease runs out within the test as a minute without heartbeats would in production.
    """
    flow = first_run_sleeps
    start_worker("github", concurrency=3)
    doomed = start_worker("agent", lease_seconds=5)
    flow.open().label()
    flow.wait_state(PlanState.DRAFT)
    flow.comment("/approve")
    # Not wait_state: the /approve delivery's status can land after the job's own and leave
    # the label at `approved` until the job publishes again.
    [agent] = wait_for(lambda: agent_groups(settings.home, b"sleep\0"), what="the agent to sleep")
    assert flow.plan().state == PlanState.EXECUTING  # type: ignore[union-attr]
    running = execute_job(flow)
    dead_owner = f"{socket.gethostname()}:{doomed.process.pid}"
    assert (running.state, running.lease_owner) == (JobState.RUNNING, dead_owner)
    assert aware(running.lease_expires_at) > utcnow()  # type: ignore[operator]

    os.killpg(doomed.process.pid, signal.SIGKILL)
    doomed.process.wait(timeout=10)

    db = flow.app.extensions["gaffer_db"]
    assert not claim(db, running.id, "another-worker:1"), "a live lease keeps others out"
    wait_for(
        lambda: aware(execute_job(flow).lease_expires_at) < utcnow(),  # type: ignore[operator]
        timeout=30,
        what="the dead worker's lease to run out",
    )
    rescuer = start_worker("agent")
    reconcile(worker_context())

    plan = flow.wait_state(PlanState.IN_REVIEW, PlanState.FAILED, timeout=60)
    assert plan.state == PlanState.IN_REVIEW, plan.last_error
    # The database: the same job, run a second time by the new worker, closed. The job is
    # closed just after the plan moves on, so its row may still say running for a moment.
    resumed = wait_for(
        lambda: (job := execute_job(flow)).state != JobState.RUNNING and job,
        timeout=30,
        what="the resumed job to be closed",
    )
    assert (resumed.id, resumed.state, resumed.attempts) == (running.id, JobState.DONE, 2)
    assert resumed.lease_owner == f"{socket.gethostname()}:{rescuer.process.pid}"
    assert resumed.lease_expires_at is None
    # GitHub: the issue told of the resume, one status comment showing the new state, one
    # check run per check on the pushed head.
    told = [
        c["body"]
        for c in flow.comments()
        if c["user"]["type"] == "Bot" and STATUS_MARKER not in c["body"]
    ]
    assert len(told) == 1 and "resumed" in told[0], told
    [status] = status_comments(flow)
    assert "waits for review" in status
    runs = sorted((r["name"], r["head_sha"]) for r in flow.check_runs())
    assert runs == [("gaffer/diff", plan.head_sha), ("gaffer/tests", plan.head_sha)]
    assert plan.branch and flow.origin_sha(plan.branch) == plan.head_sha
    # The disk: no worktree is leased any more, and git knows of none that is gone.
    mirror = mirror_path(settings.home, REPO)
    pool = WorktreePool(settings.home, REPO, mirror)
    wait_for(lambda: pool.leases() == {}, timeout=10, what="the worktree to be given back")
    assert "prunable" not in git(["worktree", "list", "--porcelain"], cwd=mirror)
    # The agent the killed worker started died with it: the kernel killed it.
    wait_for(
        lambda: agent not in agent_groups(settings.home),
        timeout=10,
        what="the killed worker's agent to be gone",
    )


# --------------------------------------------------------------------------- broker down


def test_broker_down_when_a_webhook_arrives_stored_then_processed_once_when_it_returns(
    flow: IssueFlow,
    make_app,
    settings,
    broker_outage: BrokerOutage,
    start_worker: StartWorker,
    worker_context: BuildContext,
) -> None:
    """Broker down when a webhook arrives: stored, then processed once when it returns.

    On the services backend the broker is a private redis-server that the test stops and
    starts; on the embedded one it is a broker file that cannot be opened (a folder stands
    where the SQLite file belongs) until the folder is removed.
    """
    app = make_app(dataclasses.replace(settings, broker_url=broker_outage.url))
    issues = [
        dataclasses.replace(flow, app=app, client=app.test_client(), number=n) for n in (1, 2, 3)
    ]
    broker_outage.stop()
    for issue in issues:
        issue.open().label()  # asserts 202: answered, with the broker down
    with app.extensions["gaffer_db"].session() as session:
        stored = session.scalars(select(Delivery)).all()
    assert len(stored) == len(issues)
    assert all(row.enqueued_at is None and row.processed_at is None for row in stored)

    broker_outage.start()
    context = worker_context(broker_url=broker_outage.url)
    assert resend_outbox(context) == len(issues)
    assert resend_outbox(context) == 0  # sent once; the rows say so
    start_worker("github", broker_url=broker_outage.url, concurrency=3)
    start_worker("agent", broker_url=broker_outage.url)

    def all_drafted() -> list[Plan] | None:
        with app.extensions["gaffer_db"].session() as session:
            plans = session.scalars(select(Plan).where(Plan.state == PlanState.DRAFT)).all()
        return list(plans) if len(plans) == len(issues) else None

    plans = wait_for(all_drafted, timeout=60, what="a draft plan on every issue")
    assert sorted(p.issue_number for p in plans) == [1, 2, 3]
    wait_for(
        lambda: all(issue.state_labels() == ["gaffer: draft"] for issue in issues),
        what="every issue's state label",
    )
    assert [len(status_comments(issue)) for issue in issues] == [1, 1, 1]
    with app.extensions["gaffer_db"].session() as session:
        rows = session.scalars(select(Delivery)).all()
        plan_count = len(session.scalars(select(Plan)).all())
    # A first attempt may fail and roll back (the deliveries race to insert their shared
    # installation row) and be retried; what counts is that each was processed, once.
    assert all(row.processed_at is not None for row in rows)
    assert plan_count == len(issues)


@pytest.mark.parametrize("backend", ["services"], indirect=True)  # a Redis to kill
def test_redis_killed_mid_burst_every_delivery_is_planned_once(
    flow: IssueFlow,
    app,
    settings,
    server_config: Path,
    start_worker: StartWorker,
    tmp_path: Path,
) -> None:
    """From outside: `gaffer web` and two workers on PostgreSQL and a Redis SIGKILLed mid-burst.

    Ten issues are labeled over HTTP; Redis dies (losing what it queued) after the fifth
    and comes back after the tenth. Every delivery is answered, and every issue ends with
    one draft plan and one status comment.
    """
    server_config.write_text(
        server_config.read_text() + "reconcile_every_s: 2\ndelivery_stale_s: 4\njob_stale_s: 4\n"
    )
    with private_redis(tmp_path / "redis") as redis_server:
        env = {
            **os.environ,
            "WEBHOOK_SECRET": WEBHOOK_SECRET,
            "GAFFER_DEFAULT_AGENT": "script",
            "GAFFER_HOME": str(settings.home),
            "DATABASE_URL": settings.database_url,
            "BROKER_URL": redis_server.url,
            "GAFFER_BROKER_PREFIX": settings.broker_key_prefix,
            "GAFFER_CONFIG": str(server_config),
        }
        web = WebProcess.start(env, tmp_path / "web.log")
        try:
            start_worker("github", broker_url=redis_server.url, concurrency=3, beat=True)
            start_worker("agent", broker_url=redis_server.url)
            issues = [dataclasses.replace(flow, number=n).open() for n in range(1, 11)]
            answers = []
            for issue_flow in issues:
                if issue_flow.number == 6:
                    redis_server.kill()
                flow.github.add_label(REPO, issue_flow.number, "gaffer")
                payload = labeled(
                    issue_flow.repo, issue_flow.issue, installation_id=INSTALLATION_ID
                )
                answers.append(deliver(web, "issues", payload, secret=WEBHOOK_SECRET).status_code)
            redis_server.start()
            assert answers == [202] * 10

            def all_drafted() -> bool:
                with app.extensions["gaffer_db"].session() as session:
                    states = session.scalars(select(Plan.state)).all()
                return len(states) == 10 and set(states) == {PlanState.DRAFT}

            wait_for(all_drafted, timeout=120, what="a draft plan on all ten issues")
            wait_for(
                lambda: all(i.state_labels() == ["gaffer: draft"] for i in issues),
                what="every issue's state label",
            )
        finally:
            web.stop()
    assert [len(status_comments(i)) for i in issues] == [1] * 10
    with app.extensions["gaffer_db"].session() as session:
        assert all(d.processed_at is not None for d in session.scalars(select(Delivery)))


# --------------------------------------------------------------------------- GitHub faults

# What gaffer creates, where, and how many of it one lifecycle makes.
WRITES = [
    ("the status comment", r"/issues/1/comments$", 1),
    ("a check run", r"/check-runs$", 2),
    ("the PR", r"/pulls$", 1),
]
# The first status comment is posted by the labeled delivery while the plan job runs; a slow
# plan keeps the job's own post out of the retried one's way (test_two_workers_... below).
SLOW_PLAN = "- sleep: 3\n"
FAULTS = [
    ("GitHub 500 creating {}: backoff, no duplicates", {"status": 500}),
    ("GitHub 502 creating {}: backoff, no duplicates", {"status": 502}),
    (
        "a secondary rate limit (403, Retry-After) creating {}: backoff, no duplicates",
        {"status": 403, "headers": {"Retry-After": "1"}},
    ),
    (
        "a timed-out create of {} that in fact succeeded is not duplicated",
        {"status": 504, "after_success": True},
    ),
]
CASES = [
    pytest.param(path, made, fault, id=sentence.format(what))
    for sentence, fault in FAULTS
    for what, path, made in WRITES
]


@pytest.mark.parametrize(("path", "made", "fault"), CASES)
def test_github_faults_on_writes(
    flow: IssueFlow, worker, path: str, made: int, fault: dict[str, Any]
) -> None:
    """GitHub 5xx or rate limits → backoff, no duplicates; a timed-out "create check run"
    or "create PR" that in fact succeeded is not duplicated."""
    flow.github.fail_next("POST", path, **fault)
    flow.body = script(GOOD, plan=SLOW_PLAN if path.endswith("/comments$") else "")
    flow.open().label()
    flow.wait_state(PlanState.DRAFT)
    flow.comment("/approve")
    plan = flow.wait_state(PlanState.IN_REVIEW, PlanState.FAILED)
    assert plan.state == PlanState.IN_REVIEW, plan.last_error
    flow.comment(f"/approve-diff {plan.head_sha}")
    plan = flow.wait_state(PlanState.PR_OPEN, PlanState.FAILED)
    assert plan.state == PlanState.PR_OPEN, plan.last_error

    assert flow.github.faults == [], "the fault was never hit"
    assert len(status_comments(flow)) == 1
    runs = sorted((r["name"], r["head_sha"]) for r in flow.check_runs())
    assert runs == [("gaffer/diff", plan.head_sha), ("gaffer/tests", plan.head_sha)]
    assert [p["head"]["sha"] for p in flow.github.pulls(REPO)] == [plan.head_sha]
    assert flow.replies() == []
    if fault.get("after_success"):  # the retry looked, found what it made, and posted no more
        assert posts(flow, path) == made


def posts(flow: IssueFlow, path: str) -> int:
    """Count the POSTs GitHub received on paths matching path."""
    return sum(1 for r in flow.github.requests if r.method == "POST" and re.search(path, r.path))


@pytest.fixture
def publishing(app, settings, github, github_server: str):
    """Five plans without a status comment, and a client for the GitHub double's server."""
    settings = dataclasses.replace(
        settings,
        github_api_url=github_server,
        server_config={"github_seconds_between_requests": 0, "github_seconds_between_writes": 0},
    )
    db = app.extensions["gaffer_db"]
    with db.session() as session:
        session.add(Repository(id=github.repo_id(REPO), full_name=REPO))
        for number in range(1, 6):
            github.add_issue(REPO, number, title="t", body="b", author="reporter")
            session.add(
                Plan(
                    id=number,
                    repository_id=github.repo_id(REPO),
                    installation_id=INSTALLATION_ID,
                    issue_number=number,
                    issue_title="t",
                    issue_author="reporter",
                    clone_url="/x",
                )
            )
    return db, GitHubApp(settings, SecretMask.from_settings(settings, {}))


def status_count(github, number: int) -> int:
    return sum(STATUS_MARKER in c["body"] for c in github.comments(REPO, number))


def test_two_workers_publishing_the_first_status_at_once_leave_one_status_comment(
    publishing, github
) -> None:
    """Exactly once: one status comment, also when two workers post the first status together.

    The labeled delivery and the plan job both publish the plan's status; with a fast agent
    they do so together, before either has created the comment.
    """
    db, github_app = publishing

    def publish(plan_id: int, together: threading.Barrier) -> None:
        client = github_app.installation(INSTALLATION_ID, REPO)
        together.wait()
        publish_status(db, client, plan_id)

    numbers = range(1, 6)
    for number in numbers:
        together = threading.Barrier(2)
        workers = [threading.Thread(target=publish, args=(number, together)) for _ in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert [status_count(github, number) for number in numbers] == [1] * len(numbers)
    with db.session() as session:
        plans = session.scalars(select(Plan).order_by(Plan.id)).all()
        assert all(p.status_comment_id and p.status_claimed_at is None for p in plans)


def test_a_publisher_that_died_while_posting_gives_its_claim_up(publishing, github) -> None:
    """A claim to post the first comment that outlived its publisher is taken over."""
    db, github_app = publishing
    client = github_app.installation(INSTALLATION_ID, REPO)
    with db.session() as session:
        session.execute(update(Plan).where(Plan.id == 1).values(status_claimed_at=utcnow()))
    publish_status(db, client, 1)
    assert status_count(github, 1) == 0, "a live claim: its holder posts"
    with db.session() as session:
        stale = utcnow() - timedelta(minutes=5)
        session.execute(update(Plan).where(Plan.id == 1).values(status_claimed_at=stale))
    publish_status(db, client, 1)
    assert status_count(github, 1) == 1


def test_a_first_post_that_github_refused_leaves_the_next_publisher_free(
    publishing, github
) -> None:
    db, github_app = publishing
    client = github_app.installation(INSTALLATION_ID, REPO)
    github.fail_next("POST", r"/issues/1/comments$", 422)
    with pytest.raises(Exception, match="422"):
        publish_status(db, client, 1)
    publish_status(db, client, 1)
    assert status_count(github, 1) == 1


def test_two_deliveries_for_a_new_installation_at_once_both_store_it(app) -> None:
    """Two deliveries racing on a new installation's and repository's rows both succeed."""
    db = app.extensions["gaffer_db"]
    payload = {"installation": {"id": 77, "account": {"login": "acme"}}}
    repo = {"id": 770, "full_name": "acme/widgets"}
    first_wrote, errors = threading.Event(), []

    def remember(then_wait: bool) -> None:
        try:
            if not then_wait:
                first_wrote.wait(timeout=10)
            with db.session() as session:
                remember_repository(session, remember_installation(session, payload).id, repo)
                session.flush()
                if then_wait:
                    first_wrote.set()
                    time.sleep(0.5)  # the second delivery writes while this one is open
        except Exception as error:
            errors.append(error)

    racers = [threading.Thread(target=remember, args=(first,)) for first in (True, False)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert errors == []
    with db.session() as session:
        [installation] = session.scalars(select(Installation)).all()
        [repository] = session.scalars(select(Repository)).all()
        assert (installation.id, installation.account_login) == (77, "acme")
        assert (repository.id, repository.installation_id) == (770, 77)


def test_each_worker_reaps_its_own_machine_without_beat(
    start_worker: StartWorker, server_config: Path, settings, origin: Path
) -> None:
    """A planner killed mid-run on a machine without beat: that machine's worker reaps it."""
    server_config.write_text(server_config.read_text() + "reap_every_s: 1\n")
    mirror = ensure_mirror(settings.home, REPO, str(origin), None)
    base = git(["rev-parse", "refs/remotes/origin/main"], cwd=mirror)
    orphan, stray = killed_planner(mirror, base, settings.home)
    with cleaned_up([stray]):
        start_worker("agent")  # no beat, and no reconcile is called
        wait_for(
            lambda: not orphan.exists() and gone(stray),
            timeout=60,
            what="the worker's own reaper to remove the orphan and its process",
        )
    assert git(["worktree", "list", "--porcelain"], cwd=mirror).count("worktree ") == 1


# --------------------------------------------------------------------------- a fresh deploy


def beat_of(worker: Any) -> int:
    """Return the pid of the scheduler a worker forked: its child running its own command."""
    pid = worker.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    command = Path(f"/proc/{pid}/cmdline").read_bytes()
    [beat] = [int(c) for c in children if Path(f"/proc/{c}/cmdline").read_bytes() == command]
    return beat


def test_a_worker_with_beat_on_a_fresh_gaffer_home_schedules_and_healthz_shows_the_tick(
    start_worker: StartWorker, settings, client
) -> None:
    """A new machine: GAFFER_HOME does not exist yet when `worker github --beat` starts."""
    assert not settings.home.exists()
    worker = start_worker("github", beat=True)
    wait_for(
        lambda: client.get("/healthz").get_json()["scheduler_last_tick"],
        timeout=60,
        what="the scheduler's first tick on /healthz",
    )
    assert worker.process.poll() is None
    assert "beat: Starting" in worker.log()


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param("unopenable", id="a schedule file beat cannot open stops its worker"),
        pytest.param("killed", id="beat killed with SIGKILL stops its worker"),
    ],
)
def test_a_worker_whose_scheduler_dies_exits_non_zero_and_says_why(
    start_worker: StartWorker, settings, fault: str
) -> None:
    if fault == "unopenable":  # folders where each kind of dbm file would go
        for suffix in ("", ".db", ".dat", ".dir", ".bak"):
            (settings.home / f"beat-schedule{suffix}").mkdir(parents=True)
    worker = start_worker("github", beat=True)
    if fault == "killed":
        os.kill(beat_of(worker), signal.SIGKILL)
    assert worker.process.wait(timeout=60) != 0
    assert "the scheduler (beat) exited" in worker.log()


def test_a_worker_stopped_as_usual_with_its_beat_exits_zero(start_worker: StartWorker) -> None:
    worker = start_worker("github", beat=True)
    time.sleep(2)  # beat is up and ticking
    os.kill(worker.process.pid, signal.SIGTERM)
    assert worker.process.wait(timeout=60) == 0
    assert "the scheduler (beat) exited" not in worker.log()
