"""Re-derive what should be happening and put right what a crash or an outage left behind.

Each pass is idempotent and cheap enough to run every minute on beat: running it twice does
what running it once did. A pass that fails is logged and tried again on the next beat.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from bot.db import rows_changed
from bot.github import RepoClient
from bot.handlers.routes import handles
from bot.heartbeats import RECONCILER, record_heartbeat
from bot.models import (
    Candidate,
    CandidateState,
    Delivery,
    Job,
    JobState,
    Plan,
    PlanState,
    Repository,
    Stage,
    github_time,
    utcnow,
)
from bot.outbox import release
from bot.plans import advance
from bot.queue import PROCESS_DELIVERY, RUN_JOB
from bot.render import lost_worker_reply, stage_doing, times_stopped
from bot.states import TERMINAL, Event
from bot.status import publish_status
from tasks.context import WorkerContext
from tasks.stages.candidates import candidate_lost
from tasks.worktrees import (
    ReapReport,
    WorktreePool,
    locked,
    mirrors,
    plan_key,
    reap_readonly,
)

log = logging.getLogger(__name__)

ENDED = sorted(TERMINAL)

# A delivery left this long without progress is sent again; duplicates are harmless
# because processing is idempotent, so the delay only bounds how late recovery starts.
STALE = timedelta(minutes=2)
MAX_DELIVERY_ATTEMPTS = 8

# A job is started at most this many times; each start after the first follows a dead worker.
MAX_JOB_ATTEMPTS = 3
# Longer than STALE: on a busy agent queue a job rightly waits behind others, and every
# resend leaves one more message that `claim` has to turn away.
QUEUED_STALE = timedelta(minutes=10)

# Status comments are checked only on plans that changed lately, a few per pass, so the
# pass costs a handful of API calls whatever the size of the history. A plan that changed in
# the last STALE is left to the worker or handler publishing it right now.
STATUS_RECENT = timedelta(days=7)
STATUS_ENDED_GRACE = timedelta(days=1)
MAX_STATUS_CHECKS = 10

# GitHub keeps deliveries three days; a command acting a day late surprises more than it
# helps. A failure younger than the delay may belong to a restart still in progress.
REDELIVERY_WINDOW = timedelta(days=1)
REDELIVERY_DELAY = timedelta(minutes=2)
MAX_DELIVERY_PAGES = 10

# The plan states each stage can pick up from when its worker died. The pushed branch is the
# truth, so execution restarts from it on any worker.
RESUMES_FROM: dict[str, frozenset[PlanState]] = {
    Stage.PLAN: frozenset({PlanState.PLANNING}),
    Stage.REVISE: frozenset({PlanState.PLANNING}),
    Stage.EXECUTE: frozenset({PlanState.APPROVED, PlanState.EXECUTING}),
    Stage.REWORK: frozenset({PlanState.APPROVED, PlanState.EXECUTING}),
    # Opening the PR looks for the branch's PR before creating one, so it may run again.
    Stage.OPEN_PR: frozenset({PlanState.IN_REVIEW}),
    # Checks run again on the same commit update the same check runs.
    Stage.RECHECK: frozenset({PlanState.IN_REVIEW}),
    # A part's issue is found by its marker before one is opened; links are looked up first.
    Stage.PARTS: frozenset({PlanState.SPLIT}),
}


def reconcile(wctx: WorkerContext) -> None:
    """Run every recovery pass once; one failing pass does not stop the others."""
    for recovery in PASSES:
        try:
            recovery(wctx)
        except Exception:
            log.exception("%s failed; the next beat tries again", recovery.__name__)
    record_heartbeat(wctx.db, RECONCILER)


# --------------------------------------------------------------------------- the outbox


def resend_outbox(wctx: WorkerContext, stale: timedelta | None = None) -> int:
    """Enqueue deliveries that were stored but never processed; return how many.

    One sent but not processed within stale (`delivery_stale_s`, STALE by default) is
    sent again: a broker that died holding it lost it. Each row is claimed before it is
    sent, as the outbox's relay claims them (bot/outbox.py), so the two never both send it.
    """
    if stale is None:
        stale = timedelta(seconds=wctx.setting("delivery_stale_s", STALE.total_seconds()))
    cutoff = utcnow() - stale
    due = or_(Delivery.enqueued_at.is_(None), Delivery.enqueued_at < cutoff)
    with wctx.db.session() as session:
        ids = session.scalars(
            select(Delivery.id).where(
                Delivery.processed_at.is_(None),
                Delivery.attempts < MAX_DELIVERY_ATTEMPTS,
                due,
            )
        ).all()
    sent = 0
    for delivery_id in ids:
        with wctx.db.session() as session:
            claim = update(Delivery).where(Delivery.id == delivery_id, due)
            if not rows_changed(session, claim.values(enqueued_at=utcnow())):
                continue  # the relay, or another pass, has just sent it
        try:
            wctx.send_task(PROCESS_DELIVERY, delivery_id=delivery_id)
        except Exception:
            release(wctx.db, [delivery_id])
            raise
        sent += 1
    return sent


# --------------------------------------------------------------------------- dead workers


class Verdict(StrEnum):
    RESUME = "resume"
    FAIL = "fail"
    DROP = "drop"


@dataclass(frozen=True)
class Settled:
    """What recovery did with one dead job, and what the issue is told about it."""

    job_id: int
    plan_id: int
    verdict: Verdict
    reply: str | None


def verdict_for(stage: str, attempts: int, state: PlanState) -> Verdict:
    """Decide a dead job's fate: resume it, fail it, or drop it because its plan ended."""
    if state in TERMINAL:
        return Verdict.DROP
    if attempts < MAX_JOB_ATTEMPTS and state in RESUMES_FROM.get(stage, frozenset()):
        return Verdict.RESUME
    return Verdict.FAIL


def recover_dead_jobs(wctx: WorkerContext, queued_stale: timedelta | None = None) -> int:
    """Resume or fail jobs whose worker died, and resend queued jobs nobody took within
    queued_stale (`job_stale_s`, QUEUED_STALE by default): the broker may have lost them."""
    if queued_stale is None:
        queued_stale = timedelta(seconds=wctx.setting("job_stale_s", QUEUED_STALE.total_seconds()))
    resent = _resend_waiting_jobs(wctx, queued_stale)
    now = utcnow()
    with wctx.db.session() as session:
        dead = session.scalars(
            select(Job.id).where(Job.state == JobState.RUNNING, Job.lease_expires_at < now)
        ).all()
    settled = [outcome for job_id in dead if (outcome := _settle(wctx, job_id, now))]
    for outcome in settled:
        _carry_out(wctx, outcome)
    return resent + len(settled)


def _resend_waiting_jobs(wctx: WorkerContext, stale: timedelta) -> int:
    # A second copy is harmless: `claim` lets one run and the others exit. A job parked
    # until a provider's quota resets is sent once that moment has passed, not before, and
    # then at once: its wait is over, however new the job.
    now = utcnow()
    with wctx.db.session() as session:
        ids = session.scalars(
            select(Job.id).where(
                Job.state == JobState.QUEUED,
                or_(
                    and_(Job.parked_until.is_(None), Job.created_at < now - stale),
                    Job.parked_until <= now,
                ),
            )
        ).all()
    for job_id in ids:
        wctx.send_task(RUN_JOB, job_id=job_id)
    return len(ids)


def _settle(wctx: WorkerContext, job_id: int, now: datetime) -> Settled | None:
    """Decide and record one dead job's fate, unless another pass or worker got there first."""
    with wctx.db.session() as session:
        job = session.get_one(Job, job_id)
        plan = session.get_one(Plan, job.plan_id)
        verdict = verdict_for(job.stage, job.attempts, plan.state)
        error = f"the worker running this job stopped {times_stopped(job.attempts)}"
        still_dead = (
            update(Job)
            .where(
                Job.id == job.id,
                Job.state == JobState.RUNNING,
                Job.lease_expires_at < now,
                Job.attempts == job.attempts,
            )
            .values(**_job_values(verdict, error, now))
            .execution_options(synchronize_session=False)
        )
        if rows_changed(session, still_dead) != 1:
            return None
        if verdict == Verdict.DROP:
            return Settled(job.id, plan.id, verdict, None)
        doing = stage_doing(job.stage, checking=plan.state == PlanState.VERIFYING)
        if verdict == Verdict.FAIL and job.candidate is not None:
            # One lost candidate fails alone; the plan goes on with the others.
            candidate_lost(session, plan.id, job.candidate, error)
            return Settled(
                job.id, plan.id, verdict, f"gaffer gave candidate c{job.candidate} up: {error}."
            )
        failed = verdict == Verdict.FAIL and _fail_plan(session, plan, error)
        reply = lost_worker_reply(
            doing, job.attempts, resumed=verdict == Verdict.RESUME, failed=failed, state=plan.state
        )
        return Settled(job.id, plan.id, verdict, reply)


def _job_values(verdict: Verdict, error: str, now: datetime) -> dict[str, Any]:
    if verdict == Verdict.RESUME:
        # Queued again with no owner: the next worker's `claim` takes it as a fresh job.
        return {"state": JobState.QUEUED, "lease_owner": None, "lease_expires_at": None}
    state = JobState.FAILED if verdict == Verdict.FAIL else JobState.CANCELLED
    reason = error if verdict == Verdict.FAIL else "the plan ended while its worker was gone"
    return {"state": state, "error": reason, "finished_at": now, "lease_expires_at": None}


def _fail_plan(session: Session, plan: Plan, error: str) -> bool:
    """Move the plan to failed if its state allows; return whether it moved."""
    event = Event.PLAN_FAILED if plan.state == PlanState.PLANNING else Event.WORK_FAILED
    return advance(session, plan, event, actor="gaffer", reason=error, last_error=error)


def _carry_out(wctx: WorkerContext, outcome: Settled) -> None:
    """Send a resumed job to a worker and tell the issue; a failure waits for the next pass."""
    if outcome.verdict == Verdict.RESUME:
        try:
            wctx.send_task(RUN_JOB, job_id=outcome.job_id)
        except Exception:
            log.warning("could not enqueue job %s; it stays queued", outcome.job_id, exc_info=True)
    if outcome.reply is None:
        return
    try:
        with wctx.db.session() as session:
            plan = session.get_one(Plan, outcome.plan_id)
        client = wctx.client(plan.installation_id, plan.repository.full_name)
        if outcome.verdict == Verdict.FAIL:
            publish_status(wctx.db, client, plan.id)
        client.reply(plan.issue_number, outcome.reply)
    except Exception:
        log.warning(
            "could not tell plan %s's issue about job %s",
            outcome.plan_id,
            outcome.job_id,
            exc_info=True,
        )


# --------------------------------------------------------------------------- worktrees


def reap_worktrees(wctx: WorkerContext) -> dict[str, ReapReport]:
    """Remove this machine's worktrees of plans that ended; keep unpushed branches and say so.

    Read-only planning worktrees are removed once the process that made them is gone.
    Every worker runs this on a timer too; the machine's reaper lock makes them take turns.
    """
    with locked(wctx.settings.home / "reaper.lock"):
        return _reap(wctx)


def _reap(wctx: WorkerContext) -> dict[str, ReapReport]:
    for name in reap_readonly(wctx.settings.home):
        log.info("removed the read-only worktree %s, whose planner is gone", name)
    active = _plans_holding_worktrees(wctx)
    reports = {}
    for full_name, mirror in mirrors(wctx.settings.home):
        report = WorktreePool(wctx.settings.home, full_name, mirror).reap(active)
        for key in report.removed:
            log.info("%s: removed the worktree of %s, which no active plan holds", full_name, key)
        for branch in report.kept_branches:
            log.warning("%s: kept branch %s: it holds commits never pushed", full_name, branch)
        reports[full_name] = report
    return reports


def _plans_holding_worktrees(wctx: WorkerContext) -> set[str]:
    # A job still running on a plan that just ended keeps its worktree until the job stops.
    now = utcnow()
    running = select(Job.plan_id).where(Job.state == JobState.RUNNING, Job.lease_expires_at >= now)
    with wctx.db.session() as session:
        ids = session.scalars(
            select(Plan.id).where(or_(Plan.state.not_in(ENDED), Plan.id.in_(running)))
        ).all()
        candidates = session.execute(
            select(Candidate.plan_id, Candidate.number).where(
                Candidate.plan_id.in_(ids), Candidate.state != CandidateState.DROPPED
            )
        ).all()
    return {plan_key(plan_id) for plan_id in ids} | {
        plan_key(plan_id, number) for plan_id, number in candidates
    }


# --------------------------------------------------------------------------- status comments


def repost_stale_status(
    wctx: WorkerContext, limit: int = MAX_STATUS_CHECKS, recent: timedelta = STATUS_RECENT
) -> int:
    """Publish the status again where its comment is gone or its label is wrong."""
    now = utcnow()
    live_repositories = select(Repository.id).where(Repository.removed_at.is_(None))
    with wctx.db.session() as session:
        # Random, so that over a few passes every recent plan is looked at, not the same few.
        plans = session.scalars(
            select(Plan)
            .where(
                Plan.repository_id.in_(live_repositories),
                Plan.updated_at >= now - recent,
                Plan.updated_at < now - STALE,
                or_(Plan.state.not_in(ENDED), Plan.updated_at >= now - STATUS_ENDED_GRACE),
            )
            .order_by(func.random())
            .limit(limit)
        ).all()
    clients: dict[tuple[int, str], RepoClient] = {}
    republished = 0
    for plan in plans:
        where = (plan.installation_id, plan.repository.full_name)
        if where not in clients:
            clients[where] = wctx.client(*where)
        client = clients[where]
        try:
            shown = plan.status_comment_id is not None and client.shows_status(
                plan.issue_number, plan.state.value, plan.status_comment_id
            )
            if shown:
                continue
            publish_status(wctx.db, client, plan.id)
            republished += 1
        except Exception:
            log.warning("could not check plan %s's status comment", plan.id, exc_info=True)
    return republished


# --------------------------------------------------------------------------- failed deliveries


def catch_up_failed_deliveries(
    wctx: WorkerContext,
    window: timedelta = REDELIVERY_WINDOW,
    delay: timedelta = REDELIVERY_DELAY,
    per_page: int = 100,
) -> int:
    """Ask GitHub to redeliver recent failed deliveries gaffer never stored, once each."""
    now = utcnow()
    entries = _recent_deliveries(wctx, since=now - window, per_page=per_page)
    wanted = deliveries_to_redeliver(entries, settled_before=now - delay)
    if not wanted:
        return 0
    with wctx.db.session() as session:
        stored = set(
            session.scalars(
                select(Delivery.delivery_id).where(
                    Delivery.source == "github", Delivery.delivery_id.in_(list(wanted))
                )
            )
        )
    asked = 0
    for guid, delivery_id in wanted.items():
        if guid in stored:
            continue  # stored, so gaffer has it: its answer failed, not its intake
        wctx.github_app.redeliver(delivery_id)
        log.info("asked GitHub to redeliver %s (delivery %s)", guid, delivery_id)
        asked += 1
    return asked


def deliveries_to_redeliver(
    entries: list[dict[str, Any]], settled_before: datetime
) -> dict[str, int]:
    """Return guid → delivery id of failures worth one redelivery.

    A guid is left alone when any attempt at it succeeded, when it was redelivered before
    (by gaffer or a person: never twice), when gaffer does not handle its event, or when
    its failure is too recent to tell from a restart.
    """
    by_guid: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        by_guid.setdefault(str(entry["guid"]), []).append(entry)
    wanted = {}
    for guid, attempts in by_guid.items():
        if any(_succeeded(a) or a.get("redelivery") for a in attempts):
            continue
        first = min(attempts, key=_delivered_at)
        if handles(first["event"], first.get("action")) and _delivered_at(first) < settled_before:
            wanted[guid] = int(first["id"])
    return wanted


def _recent_deliveries(wctx: WorkerContext, since: datetime, per_page: int) -> list[dict[str, Any]]:
    """Return the App's failed deliveries since a moment, newest first, up to a page limit."""
    found: list[dict[str, Any]] = []
    cursor = None
    for _ in range(MAX_DELIVERY_PAGES):
        page, cursor = wctx.github_app.hook_deliveries(per_page=per_page, cursor=cursor)
        recent = [entry for entry in page if _delivered_at(entry) >= since]
        found += recent
        if cursor is None or len(recent) < len(page):
            break
    return found


def _succeeded(entry: dict[str, Any]) -> bool:
    return int(entry.get("status_code") or 0) < 400 and entry.get("status") == "OK"


def _delivered_at(entry: dict[str, Any]) -> datetime:
    return github_time(str(entry["delivered_at"]))


PASSES: tuple[Callable[[WorkerContext], object], ...] = (
    resend_outbox,
    recover_dead_jobs,
    reap_worktrees,
    repost_stale_status,
    catch_up_failed_deliveries,
)
