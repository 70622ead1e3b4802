"""Store deliveries once, durably: the requests a web process receives together share a commit.

Each request hands its delivery to the process's writer and waits (a Flask thread on a
future's result, the web front's event loop on the same future). The writer takes
every delivery waiting at that moment, inserts them in one statement, its own transaction
(telling the outbox's relays: a notification on PostgreSQL, a doorbell on SQLite; see
bot/outbox.py), and wakes each
request when the commit is done, saying whether its delivery was new. A request answers
GitHub only after that, so an answered delivery is on disk. With one request in flight a
transaction holds one row, as before; under load one commit serves many requests, which
costs the database and the web process far less than a transaction each.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, func
from sqlalchemy.dialects import postgresql, sqlite

from bot.models import Delivery
from bot.outbox import CHANNEL, outbox_doorbell

# At most this many deliveries in one statement: a few megabytes of payloads.
MAX_BATCH = 64
# A writer with nothing to do for this long ends; the next delivery starts another.
IDLE_S = 10.0


@dataclass
class _Waiting:
    row: dict[str, Any]
    done: Future[bool] = field(default_factory=Future)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.row["source"], self.row["hook_id"], self.row["delivery_id"]


class DeliveryWriter:
    """Store the deliveries of one web process's requests, those that arrive together at once."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.postgres = engine.dialect.name == "postgresql"
        self.insert = _insert_once(self.postgres)
        self._bell = None if self.postgres else outbox_doorbell(str(engine.url))
        self._pending: list[_Waiting] = []
        self._wakeup = threading.Condition()
        self._writing = False
        # The writer's connection, kept while batches follow each other: no checkout and
        # ping per batch under load, back in the pool when nothing waits.
        self._connection: Connection | None = None

    def store(self, row: dict[str, Any]) -> bool:
        """Store one delivery row and return True once committed, or False if a delivery
        with its key (source, hook_id, delivery_id) was stored before. Raises what the
        database raised."""
        return self.submit(row).result()

    def submit(self, row: dict[str, Any]) -> Future[bool]:
        """Hand one delivery row to the writer; the future says what store() returns."""
        waiting = _Waiting(row)
        with self._wakeup:
            self._pending.append(waiting)
            if not self._writing:
                self._writing = True
                threading.Thread(target=self._write_all, name="gaffer-intake", daemon=True).start()
            self._wakeup.notify()
        return waiting.done

    def _write_all(self) -> None:
        try:
            self._write_batches()
        except BaseException:  # the thread dies: the next delivery must start another
            with self._wakeup:
                self._writing = False
            raise

    def _write_batches(self) -> None:
        while True:
            with self._wakeup:
                idle = not self._pending
            if idle:  # under load a batch is waiting by the time the last one is written
                self._let_go()
            with self._wakeup:
                if not self._pending:
                    self._wakeup.wait(IDLE_S)
                if not self._pending:
                    self._writing = False
                    return
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            self._write(batch)

    def _write(self, batch: list[_Waiting]) -> None:
        # A request whose client went away has cancelled its future: its row is written
        # all the same, and nobody is told. The others can no longer be cancelled.
        for each in batch:
            each.done.set_running_or_notify_cancel()
        try:
            if self._connection is None:
                # One statement is one transaction: committed, on disk, when it returns.
                connection = self.engine.connect()
                self._connection = connection.execution_options(isolation_level="AUTOCOMMIT")
            rows = self._connection.execute(self.insert, [each.row for each in batch])
            new = {tuple(row)[:3] for row in rows}
            if new and self._bell is not None:
                self._bell.ring()
        except BaseException as error:  # every waiting request answers with it
            self._let_go(broken=True)
            for each in batch:
                if not each.done.cancelled():
                    each.done.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        for each in batch:
            # The same key twice in one batch: the first is the one stored.
            if not each.done.cancelled():
                each.done.set_result(each.key in new)
            new.discard(each.key)

    def _let_go(self, *, broken: bool = False) -> None:
        if self._connection is None:
            return
        with contextlib.suppress(Exception):  # a broken connection may fail to close
            if broken:
                self._connection.invalidate()
            self._connection.close()
        self._connection = None


def _insert_once(postgres: bool) -> Any:
    """The batch's one statement: a row whose key is taken is not stored and returns
    nothing. Built once, as only the values change from one batch to the next."""
    key = (Delivery.source, Delivery.hook_id, Delivery.delivery_id)
    statement = (
        (postgresql if postgres else sqlite)
        .insert(Delivery)
        .on_conflict_do_nothing(index_elements=[column.name for column in key])
    )
    if postgres:
        # Each stored row tells the outbox's relays, in the same statement (PostgreSQL sends
        # one notification per transaction, at its commit), saving a round trip.
        return statement.returning(*key, func.pg_notify(CHANNEL, ""))
    return statement.returning(*key)
