"""The outbox: deliveries stored by the receiver, handed to the broker by a relay.

The receiver's request stores a delivery with `enqueued_at` empty and answers; it never
waits on the broker. A relay (run by the workers of the `github` queue) claims unsent rows
with a compare-and-swap on `enqueued_at`, so that two relays never send one row, then sends
each as `gaffer.process_delivery`. A relay that dies between its claim and its send leaves
the row claimed; the reconciler sends it again once it is stale (tasks/recovery/
reconcile.py). Processing checks `processed_at` first, so a row sent twice runs once.

On PostgreSQL the statement that stores deliveries notifies the relays (bot/intake.py),
which LISTEN and wake at once; on SQLite, where web and workers share one machine, the
writer rings the relays' doorbell (bot/doorbell.py) once its rows are committed. Either way
they look again every `IDLE_CHECK_S`, and every `POLL_S` where no doorbell can be had.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy import select, text, update

from bot.db import Database
from bot.doorbell import Doorbell
from bot.models import Delivery, utcnow

log = logging.getLogger(__name__)

CHANNEL = "gaffer_deliveries"
BATCH = 200
POLL_S = 0.1
IDLE_CHECK_S = 5.0
# After the broker refused a send, wait this long before the next try.
BROKER_BACKOFF_S = 2.0

Send = Callable[[int], None]


def outbox_doorbell(db_url: str) -> Doorbell:
    """The doorbell the writer rings for the relays of the SQLite database at db_url."""
    return Doorbell.named("outbox", db_url)


def claim_unsent(db: Database, limit: int = BATCH) -> list[int]:
    """Mark up to limit unsent deliveries as sent now and return their ids; a row another
    relay claimed first is left to it."""
    unsent = (
        select(Delivery.id)
        .where(Delivery.enqueued_at.is_(None), Delivery.processed_at.is_(None))
        .order_by(Delivery.id)
        .limit(limit)
    )
    claim = (
        update(Delivery)
        .where(Delivery.id.in_(unsent.scalar_subquery()), Delivery.enqueued_at.is_(None))
        .values(enqueued_at=utcnow())
        .returning(Delivery.id)
    )
    with db.session() as session:
        return sorted(session.scalars(claim, execution_options={"synchronize_session": False}))


def release(db: Database, ids: list[int]) -> None:
    """Put claimed deliveries back in the outbox: the broker did not take them."""
    if ids:
        with db.session() as session:
            session.execute(
                update(Delivery).where(Delivery.id.in_(ids)).values(enqueued_at=None),
                execution_options={"synchronize_session": False},
            )


def relay_once(db: Database, send: Send) -> int:
    """Claim unsent deliveries and send them; return how many were sent. Those the broker
    refused go back to the outbox and the error is raised."""
    ids = claim_unsent(db)
    for done, delivery_id in enumerate(ids):
        try:
            send(delivery_id)
        except Exception:
            release(db, ids[done:])
            raise
    return len(ids)


class Relay:
    """A thread that hands the outbox to the broker until stopped."""

    def __init__(self, db: Database, send: Send) -> None:
        self.db, self.send = db, send
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="gaffer-relay", daemon=True)
        self._listener: Any = None
        self._bell = None if self._postgres else outbox_doorbell(str(db.engine.url))

    def start(self) -> Relay:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            if self._postgres:  # it may be listening: a notification ends the wait now
                with contextlib.suppress(Exception), self.db.engine.connect() as connection:
                    connection.execute(text(f"NOTIFY {CHANNEL}"))
                    connection.commit()
            if self._bell is not None:
                self._bell.ring_here()
            self.thread.join(timeout=10)

    def _run(self) -> None:
        failing = False
        if self._bell is not None:
            self._bell.wait(0)  # listen before the first look, so no ring is missed
        while not self.stopped.is_set():
            try:
                if self._postgres:
                    self._listen()  # before looking: a row stored after the look wakes it
                if relay_once(self.db, self.send) == BATCH:
                    continue  # there may be more
            except Exception:  # noqa: BLE001 - the database or the broker is away; try again
                if not failing:  # said once per outage, not at every try
                    log.warning("deliveries wait in the outbox: not handed on", exc_info=True)
                failing = True
                self._close_listener()
                self.stopped.wait(BROKER_BACKOFF_S)
                continue
            if failing:
                log.info("the outbox is moving again")
                failing = False
            self._wait_for_news()
        self._close_listener()
        if self._bell is not None:
            self._bell.close()

    @property
    def _postgres(self) -> bool:
        return self.db.engine.dialect.name == "postgresql"

    def _wait_for_news(self) -> None:
        if self._bell is not None:
            if not self._bell.wait(IDLE_CHECK_S):
                self.stopped.wait(POLL_S)
            return
        # One notification is enough: the next look finds every row stored since.
        for _ in self._listen().notifies(timeout=IDLE_CHECK_S, stop_after=1):
            pass

    def _listen(self) -> Any:
        if self._listener is None:
            raw = self.db.engine.raw_connection()
            raw.driver_connection.autocommit = True  # type: ignore[union-attr]
            raw.driver_connection.execute(f"LISTEN {CHANNEL}")  # type: ignore[union-attr]
            self._listener = raw
        return self._listener.driver_connection

    def _close_listener(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(Exception):  # it is being thrown away
                self._listener.invalidate()
            self._listener = None
