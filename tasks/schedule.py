"""The scheduler a worker runs with --beat: each tick is recorded, its death stops the worker.

Celery's `-B` forks beat as a child of the worker and lets it die alone: the worker runs on
without a reconciler, a reaper pass or a redelivery catch-up. Here the worker watches its
beat and, if beat exits while the worker is not stopping, shuts down with a failure code, so
that a supervisor restarts both and the failure shows.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from celery import Celery
from celery.beat import PersistentScheduler
from celery.platforms import EX_FAILURE
from celery.signals import worker_ready, worker_shutting_down
from celery.worker import state as worker_state
from sqlalchemy.exc import SQLAlchemyError

from bot.db import Database
from bot.heartbeats import SCHEDULER, record_heartbeat

LOG = logging.getLogger("gaffer.schedule")
# Beat sleeps until its next entry is due, but never longer than this: while it runs, the
# tick /healthz shows is at most this old.
MAX_TICK_INTERVAL_S = 15.0
WATCH_EVERY_S = 1.0


def embed_scheduler(celery: Celery, database_url: str) -> None:
    """Make a --beat worker record beat's ticks and exit non-zero if beat dies."""
    celery.conf.beat_scheduler = recording_scheduler(database_url)
    celery.conf.beat_max_loop_interval = MAX_TICK_INTERVAL_S
    stopping = threading.Event()
    worker_shutting_down.connect(lambda **_: stopping.set(), weak=False)

    def watch(sender: Any, **_: Any) -> None:
        beat = sender.controller.beat  # the consumer's worker; None without --beat
        if beat is not None:
            threading.Thread(
                target=_watch, args=(beat, stopping), name="gaffer-beat-watch", daemon=True
            ).start()

    worker_ready.connect(watch, weak=False)


def recording_scheduler(database_url: str) -> type[PersistentScheduler]:
    """Return beat's scheduler class, which writes a heartbeat after each tick."""

    class RecordingScheduler(PersistentScheduler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            # Made in beat's own process: an engine is never shared across a fork.
            self.heartbeats = Database(database_url)
            super().__init__(*args, **kwargs)

        def tick(self, *args: Any, **kwargs: Any) -> float:
            interval = float(super().tick(*args, **kwargs))
            try:
                record_heartbeat(self.heartbeats, SCHEDULER)
            except SQLAlchemyError:
                LOG.warning("could not record the scheduler's tick", exc_info=True)
            return interval

    return RecordingScheduler


def _watch(beat: Any, stopping: threading.Event) -> None:
    """Wait for beat to exit; unless the worker is stopping anyway, stop it with a failure."""
    while beat.is_alive():
        time.sleep(WATCH_EVERY_S)
    # A worker asked to stop ends its beat too: give the signal a moment to be seen.
    if stopping.wait(WATCH_EVERY_S) or worker_state.should_stop is not None:
        return
    LOG.error(
        "the scheduler (beat) exited with code %s; stopping this worker so that it is "
        "restarted with one",
        getattr(beat, "exitcode", None),
    )
    # What Celery's own SIGTERM handler sets: the consumer loop shuts the worker down
    # warmly and exits with this code.
    worker_state.should_stop = EX_FAILURE
