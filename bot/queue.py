"""The Celery app gaffer enqueues on: the broker, the queues, and task names."""

from __future__ import annotations

from typing import Any

from celery import Celery

from bot.settings import Settings

PROCESS_DELIVERY = "gaffer.process_delivery"
RUN_JOB = "gaffer.run_job"
RECONCILE = "gaffer.reconcile"
CLEANUP = "gaffer.cleanup_plan"

# Short API work and long agent work never wait behind each other.
QUEUE_OF = {PROCESS_DELIVERY: "github", RUN_JOB: "agent", RECONCILE: "github", CLEANUP: "agent"}

# Above the longest job gaffer allows (agent timeout plus checks), so Redis never hands
# a running task to a second worker (celery#7918).
VISIBILITY_TIMEOUT_S = 6 * 3600


def make_celery(settings: Settings) -> Celery:
    """Return a Celery app for the configured broker, with gaffer's routing."""
    celery = Celery("gaffer", broker=settings.broker_url, set_as_current=False)
    celery.conf.update(
        task_routes={name: {"queue": queue} for name, queue in QUEUE_OF.items()},
        task_default_queue="github",
        task_ignore_result=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        broker_transport_options=_transport_options(settings),
        beat_schedule={
            # A reconcile that waited past the next beat is dropped: the next one does its work,
            # so a worker back from an outage runs one pass, not one per minute it was away.
            "reconcile": {"task": RECONCILE, "schedule": 60.0, "options": {"expires": 55.0}}
        },
        worker_hijack_root_logger=False,
    )
    return celery


def _transport_options(settings: Settings) -> dict[str, Any]:
    if settings.embedded:
        # The SQL transport hands these to create_engine: wait on SQLite's lock, don't fail.
        return {"connect_args": {"timeout": 30}}
    return {
        "visibility_timeout": VISIBILITY_TIMEOUT_S,
        "global_keyprefix": settings.broker_key_prefix,
        # A Redis that accepts connections but never answers must not hold a web request
        # (or a worker) for long; the outbox keeps what could not be sent.
        "socket_connect_timeout": 5,
        "socket_timeout": 10,
    }


def enqueue(celery: Celery, name: str, **kwargs: Any) -> None:
    """Send a task by name; the web side never imports the tasks themselves."""
    celery.send_task(name, kwargs=kwargs, queue=QUEUE_OF[name], retry=False)
