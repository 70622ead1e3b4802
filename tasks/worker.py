"""Build the Celery worker: gaffer's tasks registered on the configured broker."""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

from celery import Celery
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    worker_ready,
    worker_shutdown,
)

from bot.logs import structure_logs
from bot.masking import SecretMask, mask_logs
from bot.outbox import Relay
from bot.queue import CLEANUP, PROCESS_DELIVERY, QUEUE_OF, RECONCILE, RUN_JOB, make_celery
from bot.settings import Settings, SettingsError
from bot.untrusted import drop_invisible
from tasks.agent_slots import JOBS_PER_SLOT, agent_slots
from tasks.context import WorkerContext
from tasks.deliveries import process_delivery, record_failure
from tasks.isolation.cgroups import unavailable as cgroups_unavailable
from tasks.isolation.sandbox import Sandbox, SandboxUnavailable
from tasks.jobs import run_job
from tasks.recovery.cleanup import cleanup_plan
from tasks.recovery.machine import REAP_EVERY_S, MachineReaper, reap_every_s
from tasks.recovery.reconcile import reap_worktrees, reconcile
from tasks.schedule import embed_scheduler

LOG = logging.getLogger("gaffer.worker")


def create_worker(settings: Settings) -> Celery:
    """Return a Celery app with every gaffer task bound to one worker context."""
    celery = make_celery(settings)
    wctx = WorkerContext.build(settings, celery)
    _set_up_logs(wctx.mask, json_lines=settings.log_format == "json")
    _say_how_runs_are_isolated(wctx.sandbox)

    @celery.task(name=PROCESS_DELIVERY, bind=True, max_retries=5)
    def process_delivery_task(self: Any, *, delivery_id: int) -> None:
        try:
            process_delivery(wctx, delivery_id=delivery_id)
        except Exception as error:
            record_failure(wctx, delivery_id, error)
            raise self.retry(exc=error, countdown=min(2**self.request.retries, 60)) from error

    # A job survives its worker dying: the lease runs out and the reconciler requeues it,
    # so the task is acknowledged late and proven idempotent by the lease.
    @celery.task(name=RUN_JOB, acks_late=True, reject_on_worker_lost=True)
    def run_job_task(*, job_id: int) -> None:
        run_job(wctx, job_id=job_id)

    @celery.task(name=CLEANUP)
    def cleanup_task(*, plan_id: int) -> None:
        cleanup_plan(wctx, plan_id=plan_id)

    @celery.task(name=RECONCILE)
    def reconcile_task() -> None:
        reconcile(wctx)

    _reap_this_machine(wctx)
    embed_scheduler(celery, settings.database_url)
    _relay_outbox(celery, wctx)
    return celery


def _relay_outbox(celery: Celery, wctx: WorkerContext) -> None:
    """Have a worker of the deliveries' queue hand stored deliveries to the broker while it
    runs (bot/outbox.py)."""
    relay = Relay(
        wctx.db, lambda delivery_id: wctx.send_task(PROCESS_DELIVERY, delivery_id=delivery_id)
    )

    def start(**_: Any) -> None:
        if QUEUE_OF[PROCESS_DELIVERY] in celery.amqp.queues.consume_from:
            relay.start()

    worker_ready.connect(start, weak=False)
    worker_shutdown.connect(lambda **_: relay.stop(), weak=False)


def _set_up_logs(mask: SecretMask, *, json_lines: bool) -> None:
    """Mask every log record the worker writes and mark it with the delivery, plan and job
    it is about (as JSON lines when asked), with the handlers Celery sets up later too."""

    def set_up(logger: logging.Logger) -> None:
        mask_logs(mask, [logger])
        structure_logs([logger], json_lines=json_lines)

    set_up(logging.getLogger())
    # Celery replaces the root logger's handlers when the worker starts, and gives the task
    # logger its own: each signal hands over the logger it has just set up.
    for configured in (after_setup_logger, after_setup_task_logger):
        configured.connect(lambda logger, **_: set_up(logger), weak=False)


def _say_how_runs_are_isolated(sandbox: Sandbox) -> None:
    """Log, once the worker is up, whether agents and checks can run here and how."""

    def say(**_: Any) -> None:
        if not sandbox.enabled:
            LOG.warning("sandbox: none: agents and checks run without isolation")
            return
        try:
            sandbox.check()
        except SandboxUnavailable as missing:
            LOG.error("%s", missing)
            return
        LOG.info("agents and checks run in the sandbox (bubblewrap)")
        if (no_groups := cgroups_unavailable()) is not None:
            LOG.warning("limits apply per process, not per run: %s", no_groups)

    worker_ready.connect(say, weak=False)


def _reap_this_machine(wctx: WorkerContext) -> None:
    """Reap this machine's worktrees on a timer while the worker runs: beat sees only its own."""
    every_s = reap_every_s(wctx.setting("reap_every_s", REAP_EVERY_S))
    if every_s is None:
        return
    reaper = MachineReaper(lambda: reap_worktrees(wctx), every_s)
    worker_ready.connect(lambda **_: reaper.start(), weak=False)
    worker_shutdown.connect(lambda **_: reaper.stop(), weak=False)


def _concurrency(queues: str, settings: Settings) -> int:
    """Jobs at once: on the agent queue, more than the machine's agent slots, so that other
    jobs' git, checks and GitHub work go on beside the agents (tasks/agent_slots.py)."""
    if "agent" in queues.split(","):
        return JOBS_PER_SLOT * agent_slots(settings.server_config.get("agent_slots"))
    return 2


def main(argv: list[str] | None = None) -> None:
    """Start a worker on the queues given, e.g. `python -m tasks.worker github --beat`."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tasks.worker")
    parser.add_argument("queues", help="comma-separated: github, agent")
    parser.add_argument("--concurrency", type=int, default=None)
    parser.add_argument("--beat", action="store_true", help="also run the periodic scheduler")
    parser.add_argument("--name", default=None)
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env(calling_github=True)
        threads = args.concurrency or _concurrency(args.queues, settings)
    except (SettingsError, ValueError) as error:
        print(f"gaffer worker: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    # Command parsing builds its table of invisible characters on first use, a few tenths
    # of a second that the first command after each start would otherwise wait for.
    drop_invisible("")
    # A fresh GAFFER_HOME: beat's schedule file, the mirrors and the jobs live under it.
    settings.home.mkdir(parents=True, exist_ok=True)
    # Celery's command line takes BROKER_URL from the environment as its --broker, which
    # would replace the broker (and transport) the settings chose: gaffer has read it.
    os.environ.pop("BROKER_URL", None)
    celery = create_worker(settings)
    options = [
        "worker",
        "-Q",
        args.queues,
        "--pool",
        "threads",
        "-c",
        str(threads),
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
    ]
    if args.name:
        options += ["-n", args.name]
    if args.beat:
        options += ["-B", "-s", str(settings.home / "beat-schedule")]
    codes: list[int] = []
    worker_shutdown.connect(lambda sender, **_: codes.append(sender.exitcode or 0), weak=False)
    celery.worker_main(options)
    # worker_main drops the worker's exit code: a worker stopped by a failure must show it.
    sys.exit(max(codes, default=0))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        # Ctrl-C before Celery has put in its own handlers (still importing, say) is a stop
        # asked for, not a failure: end as a shell does for SIGINT, without a traceback.
        sys.exit(128 + signal.SIGINT)
