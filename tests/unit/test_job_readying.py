"""A job that runs an agent readies its work in a machine readying slot; other jobs do not
take one, and a job cancelled while it waits for its turn ends cancelled, never started."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from sqlalchemy import update

from bot.models import Job, JobState, PlanState, Stage
from tasks import jobs as jobs_module
from tasks.jobs import run_job
from tests.support import add_plan, wait_for


def _locked(path: Path) -> bool:
    """Tell whether another open file holds path's flock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _job(wctx, stage: str) -> int:
    with wctx.db.session() as session:
        plan = add_plan(session, PlanState.EXECUTING)
        job = Job(plan_id=plan.id, stage=stage, key=f"{stage}:{plan.id}")
        session.add(job)
        session.flush()
        return job.id


def test_an_execute_job_readies_in_a_slot_and_a_recheck_does_not(wctx, monkeypatch) -> None:
    held: dict[str, bool] = {}

    def stage(_wctx, job: Job) -> None:
        held[job.stage] = _locked(wctx.settings.home / "ready-slots" / "0")

    for name in (Stage.EXECUTE, Stage.RECHECK):
        monkeypatch.setitem(jobs_module.STAGES, name, stage)
        run_job(wctx, job_id=_job(wctx, name))
    assert held == {Stage.EXECUTE: True, Stage.RECHECK: False}


def test_a_job_cancelled_while_it_waits_for_its_turn_ends_cancelled(wctx, monkeypatch) -> None:
    ran: list[int] = []
    monkeypatch.setitem(jobs_module.STAGES, Stage.EXECUTE, lambda _wctx, job: ran.append(job.id))
    folder = wctx.settings.home / "ready-slots"
    folder.mkdir(parents=True)
    taken = [os.open(folder / str(n), os.O_RDWR | os.O_CREAT, 0o600) for n in range(2)]
    for fd in taken:  # both of the machine's turns are someone else's
        fcntl.flock(fd, fcntl.LOCK_EX)
    job_id = _job(wctx, Stage.EXECUTE)
    running = threading.Thread(target=run_job, args=(wctx,), kwargs={"job_id": job_id})
    running.start()
    try:
        wait_for(lambda: _state(wctx, job_id) == JobState.RUNNING, timeout=30, what="the claim")
        with wctx.db.session() as session:
            session.execute(update(Job).where(Job.id == job_id).values(state=JobState.CANCELLED))
        running.join(30)
    finally:
        for fd in taken:
            os.close(fd)
    with wctx.db.session() as session:
        job = session.get_one(Job, job_id)
        assert job.state == JobState.CANCELLED and job.finished_at is not None
    assert ran == []


def _state(wctx, job_id: int) -> JobState:
    with wctx.db.session() as session:
        return session.get_one(Job, job_id).state
