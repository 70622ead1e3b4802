"""B. Exactly once: a delivery, a comment, a command or a task seen twice acts once.

Also covered elsewhere, with real processes (tests/faults/test_faults.py): the broker down
when a webhook arrives (stored, then processed once when it returns); a worker killed with
SIGKILL mid-job (the lease expires, the job is resumed); a timed-out "create check run",
"create PR" or status comment that in fact succeeded is not duplicated; two workers posting
the first status at once leave one comment. Resume-or-fail by policy, the worktree cleaned
and the issue told: tests/reliability/test_recovery.py.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from bot.models import Job, JobState, Plan, PlanState
from double.driver import IssueFlow
from tasks.deliveries import process_delivery
from tasks.jobs import run_job
from tasks.leases import claim
from tests.conftest import INSTALLATION_ID, REPO, status_comments
from tests.in_process import InProcess, pending_deliveries, process_stored
from tests.reliability.conftest import (
    handle,
    human_comment,
    seen,
    send_comment,
    stored,
)
from tests.support import WEBHOOK_SECRET, deliver, issue, labeled, repository, wait_for

PAYLOAD = labeled(repository(REPO, "/nowhere.git"), issue(1))

REDELIVERIES = [
    pytest.param(
        "1", 200, 1, id="a redelivered webhook (same delivery id) is answered 200, not stored"
    ),
    pytest.param("2", 202, 2, id="the same delivery id from another hook is a different delivery"),
]


@pytest.mark.parametrize(("second_hook", "status", "rows"), REDELIVERIES)
def test_a_delivery_id_is_unique_per_hook(
    app, client, relayed, second_hook: str, status: int, rows: int
) -> None:
    assert deliver(client, "issues", PAYLOAD, delivery_id="d-1", hook_id="1").status_code == 202
    again = deliver(client, "issues", PAYLOAD, delivery_id="d-1", hook_id=second_hook)
    assert again.status_code == status
    assert len(stored(app)) == len(relayed()) == rows
    if status == 200:
        assert "duplicate" in again.get_json()["message"]


def test_a_redelivered_label_runs_nothing_twice(here: InProcess) -> None:
    here.flow.github.add_label(REPO, 1, "gaffer")
    payload = labeled(here.flow.repo, here.flow.issue, installation_id=INSTALLATION_ID)
    handle(here, "issues", payload, delivery_id="label-1")
    handle(here, "issues", payload, delivery_id="label-1")  # GitHub's redelivery
    handle(here, "issues", payload, delivery_id="label-2")  # a new delivery of one label
    plan = here.settle()
    assert plan.state == PlanState.DRAFT
    assert len(status_comments(here.flow.github)) == 1
    assert here.flow.replies() == []
    assert seen(here).jobs == ["plan:r1"]
    assert here.flow.state_labels() == ["gaffer: draft"]


def test_through_a_real_worker_a_redelivered_label_changes_nothing(
    app, client, github, origin, worker
) -> None:
    flow = IssueFlow(app, client, github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET).open()
    github.add_label(REPO, 1, "gaffer")
    label = labeled(flow.repo, flow.issue, installation_id=INSTALLATION_ID)
    assert deliver(client, "issues", label, delivery_id="label-1").status_code == 202
    flow.wait_state(PlanState.DRAFT)
    before = flow.comments()
    assert deliver(client, "issues", label, delivery_id="label-1").status_code == 200
    assert deliver(client, "issues", label, delivery_id="label-2").status_code == 202
    wait_for(lambda: all(row.processed_at for row in stored(app)), what="both deliveries")
    with app.extensions["gaffer_db"].session() as session:
        assert len(session.scalars(select(Plan)).all()) == 1
    assert flow.comments() == before
    assert flow.state_labels() == ["gaffer: draft"]


SAME_COMMENT = [
    pytest.param(
        {"delivery_id": "first"}, id="a redelivery of one /approve (same delivery id) acts once"
    ),
    pytest.param(
        {"delivery_id": "second"}, id="two deliveries carrying the same comment id start one run"
    ),
    pytest.param(
        {"delivery_id": "second", "hook_id": "9999"},
        id="the same comment delivered through another hook starts one run",
    ),
]


@pytest.mark.parametrize("again", SAME_COMMENT)
def test_one_comment_delivered_twice_starts_one_run(drafted: InProcess, again) -> None:
    payload = human_comment(drafted, "/approve")
    handle(drafted, "issue_comment", payload, delivery_id="first")
    handle(drafted, "issue_comment", payload, **again)
    after = seen(drafted, payload)
    assert after.state == PlanState.APPROVED
    assert after.reactions == ["eyes"]
    assert after.replies == []
    assert after.approvals == [("plan", 1, None, "maintainer")]
    assert after.jobs == ["plan:r1", "execute:r1"]


def test_two_approve_comments_at_the_same_moment_make_one_transition(
    drafted: InProcess,
) -> None:
    flow = drafted.flow
    payloads = []
    for login in ("maintainer", "admin"):
        flow.github.permissions[(REPO, login)] = "write"
        payload = human_comment(drafted, "/approve", login=login)
        assert deliver(flow.client, "issue_comment", payload).status_code == 202
        payloads.append(payload)
    ids = pending_deliveries(drafted.wctx)
    start = threading.Barrier(len(ids))
    errors: list[BaseException] = []

    def process(delivery_id: int) -> None:
        start.wait()
        try:
            process_delivery(drafted.wctx, delivery_id=delivery_id)  # type: ignore[arg-type]
        except BaseException as error:  # a lost race may raise; the worker would retry it
            errors.append(error)

    threads = [threading.Thread(target=process, args=(i,)) for i in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    # A lost race may only be the database refusing the second writer; the retry redoes it.
    assert all(isinstance(error, SQLAlchemyError) for error in errors), errors
    process_stored(drafted.wctx)  # what the worker's retry of a failed delivery would do
    after = [seen(drafted, payload) for payload in payloads]
    assert after[0].state == PlanState.APPROVED
    assert after[0].jobs == ["plan:r1", "execute:r1"]
    assert len(after[0].approvals) == 1
    assert sorted(len(s.reactions) for s in after) == [0, 1]
    [refusal] = after[0].replies  # the one that lost is told why
    assert refusal.startswith("> /approve")


def test_a_redelivered_task_whose_worker_is_still_running_it_exits(drafted: InProcess) -> None:
    payload = send_comment(drafted, "/approve")
    with drafted.wctx.db.session() as session:  # type: ignore[attr-defined]
        job = session.scalars(select(Job).where(Job.stage == "execute")).one()
    assert claim(drafted.wctx.db, job.id, "still-running@host", timedelta(minutes=5))  # type: ignore[attr-defined]
    before = drafted.flow.comments()
    run_job(drafted.wctx, job_id=job.id)  # type: ignore[arg-type]
    with drafted.wctx.db.session() as session:  # type: ignore[attr-defined]
        job = session.get_one(Job, job.id)
        assert (job.state, job.lease_owner, job.attempts) == (
            JobState.RUNNING,
            "still-running@host",
            1,
        )
    after = seen(drafted, payload)
    assert after.state == PlanState.APPROVED  # the second copy did not start the work
    assert drafted.flow.comments() == before
    assert drafted.flow.check_runs() == []
