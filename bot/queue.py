"""The Celery app gaffer enqueues on: the broker, the queues, and task names."""

from __future__ import annotations

from typing import Any

from celery import Celery

from bot import redis_broker, sql_broker
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


def make_celery(settings: Settings, *, web: bool = False) -> Celery:
    """Return a Celery app for the configured broker, with gaffer's routing.

    The web app's (web=True) gives up on the broker at once: the receiver must answer
    GitHub, and a delivery it could not send stays in the outbox for the reconciler.
    """
    broker, transport = _broker(settings.broker_url)
    celery = Celery("gaffer", broker=broker, set_as_current=False)
    every = settings.reconcile_every_s
    if transport is not None:
        celery.conf.broker_transport = transport
    celery.conf.update(
        task_routes={name: {"queue": queue} for name, queue in QUEUE_OF.items()},
        task_default_queue="github",
        task_ignore_result=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        broker_transport_options=_transport_options(settings, web=web),
        beat_schedule={
            # A reconcile that waited past the next beat is dropped: the next one does its work,
            # so a worker back from an outage runs one pass, not one per minute it was away.
            "reconcile": {
                "task": RECONCILE,
                "schedule": float(every),
                "options": {"expires": every * 0.9},
            }
        },
        worker_hijack_root_logger=False,
    )
    return celery


def _broker(url: str) -> tuple[str, str | None]:
    """The broker URL for Celery, and kombu's transport with gaffer's fixes where they apply
    (bot/redis_broker.py, bot/sql_broker.py say why). Not for rediss://, whose TLS kombu
    turns on only when it picks the transport from the URL itself."""
    if url.startswith(sql_broker.URL_PREFIX):
        # The prefix would make kombu pick its own transport from the URL; given explicitly,
        # the SQL transport reads the rest of the URL as SQLAlchemy's.
        return url.removeprefix(sql_broker.URL_PREFIX), sql_broker.TRANSPORT
    if url.startswith("redis://"):
        return url, redis_broker.TRANSPORT
    return url, None


def _transport_options(settings: Settings, *, web: bool) -> dict[str, Any]:
    # kombu retries a refused connection for seconds (about 6 s on Redis) before a send's
    # `retry=False` applies; the web side does not wait for that.
    fast = {"max_retries": 0} if web else {}
    if settings.embedded:
        # The SQL transport hands these to create_engine: wait on SQLite's lock, don't fail.
        return {"connect_args": {"timeout": 30}, **fast}
    # A Redis that accepts connections but never answers must not hold a web request for
    # more than a second, nor a worker for long.
    seconds = 1.0 if web else 10.0
    return {
        "visibility_timeout": VISIBILITY_TIMEOUT_S,
        "global_keyprefix": settings.broker_key_prefix,
        "socket_connect_timeout": min(seconds, 5.0),
        "socket_timeout": seconds,
        **fast,
    }


def enqueue(celery: Celery, name: str, *, countdown: float | None = None, **kwargs: Any) -> None:
    """Send a task by name, to run now or countdown seconds from now; the web side never
    imports the tasks themselves."""
    celery.send_task(name, kwargs=kwargs, queue=QUEUE_OF[name], retry=False, countdown=countdown)
