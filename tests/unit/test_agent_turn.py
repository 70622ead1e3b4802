"""A job's agent is readied before the machine's agent slot and started on taking it; once
it has the slot, its budgets are asked again, and a refusal leaves the agent unstarted."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from decimal import Decimal
from pathlib import Path

from bot.models import Job, PlanState, Stage
from bot.repo_config import load_repo_config
from tasks.stages import stage_agent
from tasks.stages.stage_agent import OverBudget, run_stage_agent
from tests.support import add_plan, running_with, wait_for

SCRIPT = "```gaffer-script\nexecute:\n  - write: {path: done.txt, content: x}\n```\n"


def _take_every_slot(home: Path, count: int = 2) -> list[int]:
    folder = home / "agent-slots"
    folder.mkdir(parents=True, exist_ok=True)
    taken = [os.open(folder / str(n), os.O_RDWR | os.O_CREAT, 0o600) for n in range(count)]
    for fd in taken:
        fcntl.flock(fd, fcntl.LOCK_EX)
    return taken


def test_a_budget_spent_while_the_agent_waited_for_its_slot_stops_it_unstarted(
    wctx, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(stage_agent, "BUDGETS_STALE_S", 0.0)
    with wctx.db.session() as session:
        plan = add_plan(session, PlanState.EXECUTING)
        plan.budget_usd, plan.agent = Decimal("1.00"), "script"
        job = Job(plan_id=plan.id, stage=Stage.EXECUTE, key="execute:r1")
        other = Job(plan_id=plan.id, stage=Stage.PLAN, key="plan:1")
        session.add_all([job, other])
        session.flush()
        session.expunge_all()
    worktree, job_dir = tmp_path / "wt", tmp_path / "job-under-test"
    worktree.mkdir()
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            run_stage_agent(
                wctx, job, plan, load_repo_config(None), "execute", SCRIPT, worktree, job_dir
            )
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            outcome.append(error)

    taken = _take_every_slot(wctx.settings.home)
    running = threading.Thread(target=run)
    try:
        running.start()
        # Readied while it waits: its processes are up, held before the agent's exec.
        wait_for(lambda: running_with(str(job_dir)), timeout=30, what="the readied agent")
        with wctx.db.session() as session:  # another job of the plan spends its budget
            session.get_one(Job, other.id).cost_usd = Decimal("1.50")
        time.sleep(0.2)
        assert not (worktree / "done.txt").exists()
    finally:
        for fd in taken:
            os.close(fd)
    running.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], OverBudget), outcome
    assert "reached its budget of $1.00" in str(outcome[0])
    assert not (worktree / "done.txt").exists()  # the agent never ran
    assert not running_with(str(job_dir))  # and nothing readied for it is left


def test_an_agent_readied_before_its_slot_runs_once_the_slot_frees(wctx, tmp_path) -> None:
    with wctx.db.session() as session:
        plan = add_plan(session, PlanState.EXECUTING)
        plan.agent = "script"
        job = Job(plan_id=plan.id, stage=Stage.EXECUTE, key="execute:r1")
        session.add(job)
        session.flush()
        session.expunge_all()
    worktree, job_dir = tmp_path / "wt", tmp_path / "job-under-test"
    worktree.mkdir()
    results: list[object] = []
    taken = _take_every_slot(wctx.settings.home)
    running = threading.Thread(
        target=lambda: results.append(
            run_stage_agent(
                wctx, job, plan, load_repo_config(None), "execute", SCRIPT, worktree, job_dir
            )
        )
    )
    try:
        running.start()
        wait_for(lambda: running_with(str(job_dir)), timeout=30, what="the readied agent")
        time.sleep(0.2)
        assert not (worktree / "done.txt").exists()  # held at its gate
    finally:
        for fd in taken:
            os.close(fd)
    running.join(30)
    [result] = results
    assert result.ok, result.error  # type: ignore[attr-defined]
    assert (worktree / "done.txt").read_text() == "x"
