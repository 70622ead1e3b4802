"""kombu's SQL transport (the embedded default's broker), made safe for two workers that
start at once, and prompt without polling.

kombu creates a queue's row on first use: it looks for the row and inserts it when none is
found, with a lock that only holds within one process. Two workers of one queue starting
together can both find nothing; the second insert then fails on the unique name, and
Celery calls that unrecoverable and exits. Here the second insert gives way: its session
is rolled back and the row the first one made is used.

kombu's transport looks for messages on a timer: a message waits for the next look, and
each look takes SQLite's write lock. Here a worker with nothing to do waits on a doorbell
instead: a socket of its own in a folder kept for the broker on this machine, to which
whoever puts a message (the web side, a worker) sends a byte, as a worker does to its own
when it acknowledges a message and so has room for the next. A worker still looks every
QUIET_POLL_S seconds, for messages put from another machine or a ring that went astray.
"""

from __future__ import annotations

from queue import Empty
from time import monotonic, sleep
from typing import Any

from kombu.transport import sqlalchemy as kombu_sql
from sqlalchemy import event, inspect
from sqlalchemy.exc import IntegrityError

from bot.db import sqlite_pragmas
from bot.doorbell import Doorbell

TRANSPORT = "bot.sql_broker:Transport"
URL_PREFIX = "sqla+"  # what BROKER_URL starts with on the embedded default
# How often a worker looks for messages when no doorbell rings, and when it has none.
QUIET_POLL_S = 1.0
BELL_LESS_POLL_S = 0.1
# A queue's row is looked for (and made) this many times while the database is busy.
QUEUE_ROW_TRIES = 20
QUEUE_ROW_WAIT_S = 0.05


class Channel(kombu_sql.Channel):
    def _engine_from_config(self) -> Any:
        """kombu's engine, with SQLite in its write-ahead log as gaffer's own database is
        (bot/db.py): a worker reading the queue never holds up the web side's put, and a
        commit syncs one file, not a journal, the database and its folder."""
        engine = super()._engine_from_config()
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", sqlite_pragmas)
        return engine

    def _get_or_create(self, queue: str) -> Any:
        """The queue's row, made if missing. kombu's own gives up quietly when a busy
        database refuses its commit, handing back a row never stored; a message put with it
        would then insert the queue again beside the one another process made (a unique
        violation). So a row is returned only once it is stored."""
        for _ in range(QUEUE_ROW_TRIES):
            try:
                found = super()._get_or_create(queue)
            except IntegrityError:  # another process made it first: read theirs
                self.session.rollback()
                continue
            if inspect(found).persistent:
                return found
            self.session.rollback()
            sleep(QUEUE_ROW_WAIT_S)
        return super()._get_or_create(queue)  # still busy: as kombu does

    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super()._put(queue, payload, **kwargs)
        if (doorbell := self._doorbell()) is not None:
            doorbell.ring()

    def basic_ack(self, delivery_tag: Any, multiple: bool = False) -> None:
        super().basic_ack(delivery_tag, multiple)
        if (doorbell := self._doorbell()) is not None:
            doorbell.ring_here()

    def basic_reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        super().basic_reject(delivery_tag, requeue)
        if (doorbell := self._doorbell()) is not None:
            doorbell.ring_here()

    def _doorbell(self) -> Doorbell | None:
        # A closed channel has let go of its transport.
        return getattr(self.connection, "doorbell", None)


# (The two `type: ignore[override]`: kombu's stubs give its base classes signatures that
# disagree with each other, so no override can match both.)


class Transport(kombu_sql.Transport):
    Channel = Channel

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        self.doorbell = Doorbell.named("broker", client.hostname)
        self.polling_interval = QUIET_POLL_S

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:  # type: ignore[override]
        """Deliver one message, waiting on the doorbell between looks (kombu sleeps)."""
        started = monotonic()
        while True:
            try:
                self.cycle.get(self._deliver, timeout=timeout)  # type: ignore[attr-defined]
                return
            except Empty:
                pass
            waited = monotonic() - started
            if timeout is not None and waited >= timeout:
                raise TimeoutError  # socket.timeout, which Celery's loop expects
            wait = self.polling_interval
            if timeout is not None:
                wait = min(wait, timeout - waited)
            if not self.doorbell.wait(wait):
                sleep(min(wait, BELL_LESS_POLL_S))

    def close_connection(self, connection: Any) -> None:
        try:
            super().close_connection(connection)
        finally:
            self.doorbell.close()
