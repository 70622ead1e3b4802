"""Run one job under a lease, whatever its stage."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from functools import partial

from bot.logs import about
from bot.models import Job, JobState, Stage
from tasks.agent_slots import SlotWaitStopped, agent_slots, readying
from tasks.context import WorkerContext
from tasks.forecast import wait_for_scope, wake_waiters
from tasks.leases import Heartbeat, claim, finish, is_cancelled
from tasks.slots import hand_on, wait_for_slots
from tasks.stages.candidates import run_candidate
from tasks.stages.execution import run_execution, run_recheck
from tasks.stages.parts import open_parts
from tasks.stages.planning import run_planning
from tasks.stages.pulls import open_pull_request

log = logging.getLogger(__name__)

RunStage = Callable[[WorkerContext, Job], None]
STAGES: dict[str, RunStage] = {
    Stage.PLAN: run_planning,
    Stage.REVISE: run_planning,
    Stage.EXECUTE: run_execution,
    Stage.REWORK: run_execution,
    Stage.OPEN_PR: open_pull_request,
    Stage.RECHECK: run_recheck,
    Stage.PARTS: open_parts,
}
# The stages that run an agent, and ready its work under a readying slot first.
AGENT_STAGES = frozenset({Stage.PLAN, Stage.REVISE, Stage.EXECUTE, Stage.REWORK})


def run_job(wctx: WorkerContext, *, job_id: int) -> None:
    """Run the job unless it is done or a live worker holds it (a redelivered task exits)."""
    lease = timedelta(seconds=wctx.settings.lease_seconds)
    if not claim(wctx.db, job_id, wctx.worker_id, lease):
        log.info("job %s is done or leased by a live worker; nothing to do", job_id)
        return
    with wctx.db.session() as session:
        job = session.get_one(Job, job_id)
    with about(plan=job.plan_id, job=job_id):
        _run(wctx, job, lease)


def _run(wctx: WorkerContext, job: Job, lease: timedelta) -> None:
    candidate = job.stage == Stage.EXECUTE and job.candidate is not None
    stage = run_candidate if candidate else STAGES.get(job.stage)
    if stage is None:
        finish(wctx.db, job.id, wctx.worker_id, JobState.FAILED, f"no stage {job.stage!r}")
        return
    log.info("job %s (%s) started", job.id, job.stage)
    with Heartbeat(wctx.db, job.id, wctx.worker_id, lease):
        if wait_for_scope(wctx, job) or wait_for_slots(wctx, job):
            log.info("job %s (%s) waits for a plan or a slot", job.id, job.stage)
            return
        try:
            with _readying_slot_for(wctx, job):
                stage(wctx, job)
        except SlotWaitStopped as stopped:  # cancelled while it waited for its turn to ready
            finish(wctx.db, job.id, wctx.worker_id, JobState.CANCELLED, str(stopped))
        except Exception as error:
            finish(
                wctx.db, job.id, wctx.worker_id, JobState.FAILED, f"{type(error).__name__}: {error}"
            )
            raise
        finally:
            hand_on(wctx, job.id)
            wake_waiters(wctx, job)
    with wctx.db.session() as session:
        ended = session.get(Job, job.id)  # gone with its plan when GitHub no longer asks for it
        state = ended.state.value if ended else "with its plan dropped"
        log.info("job %s (%s) ended %s", job.id, job.stage, state)


def _readying_slot_for(wctx: WorkerContext, job: Job) -> AbstractContextManager[None]:
    """A machine's readying slot for a job that will run an agent (tasks/agent_slots.py)."""
    if job.stage not in AGENT_STAGES:
        return nullcontext()
    slots = agent_slots(wctx.setting("agent_slots", None))
    return readying(wctx.settings.home, slots, partial(is_cancelled, wctx.db, job.id))
