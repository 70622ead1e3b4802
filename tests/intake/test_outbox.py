"""The intake outbox: deliveries stored by the request, handed to the broker by a relay.

Each test runs on both backends: the relay wakes on PostgreSQL's NOTIFY or polls SQLite.
With real worker processes and a broker that is down and comes back, see
tests/faults/test_outbox_relay.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from bot.models import Delivery, utcnow
from bot.outbox import Relay, relay_once
from bot.webhooks import delivery_row
from tasks.recovery.reconcile import resend_outbox
from tests.support import deliver, issue, labeled, repository, wait_for

PAYLOAD = labeled(repository("octo/widgets", "/nowhere.git"), issue(1))


def rows(app) -> list[Delivery]:
    with app.extensions["gaffer_db"].session() as session:
        return list(session.scalars(select(Delivery).order_by(Delivery.id)))


class Broker:
    """A stand-in for the broker: takes deliveries while up, refuses them while down."""

    def __init__(self) -> None:
        self.up = True
        self.taken: list[int] = []
        self.lock = threading.Lock()

    def send(self, delivery_id: int) -> None:
        if not self.up:
            raise ConnectionError("the broker is down")
        with self.lock:
            self.taken.append(delivery_id)


@pytest.fixture
def broker() -> Broker:
    return Broker()


@pytest.fixture
def running_relay(app, broker: Broker, monkeypatch) -> Iterator[Relay]:
    """The relay a worker of the github queue runs, here on a thread of this process. It
    looks unprompted only once an hour: on PostgreSQL the store's notification wakes it."""
    monkeypatch.setattr("bot.outbox.IDLE_CHECK_S", 3600)
    relay = Relay(app.extensions["gaffer_db"], broker.send).start()
    yield relay
    relay.stop()


def test_a_running_relay_hands_on_each_delivery_stored_after_it_started(
    app, client, broker: Broker, running_relay: Relay
) -> None:
    for n in range(3):
        assert deliver(client, "issues", PAYLOAD, delivery_id=f"d-{n}").status_code == 202
    stored = [row.id for row in rows(app)]
    wait_for(lambda: sorted(broker.taken) == stored, what="every stored delivery handed on")
    assert all(row.enqueued_at is not None for row in rows(app))


def test_a_delivery_stored_while_the_broker_is_down_is_handed_on_when_it_returns(
    app, client, broker: Broker
) -> None:
    broker.up = False
    assert deliver(client, "issues", PAYLOAD, delivery_id="d-1").status_code == 202
    with pytest.raises(ConnectionError):
        relay_once(app.extensions["gaffer_db"], broker.send)
    [row] = rows(app)
    assert row.enqueued_at is None  # back in the outbox, not lost

    broker.up = True
    assert relay_once(app.extensions["gaffer_db"], broker.send) == 1
    assert relay_once(app.extensions["gaffer_db"], broker.send) == 0
    assert broker.taken == [row.id]


def test_a_running_relay_keeps_trying_while_the_broker_is_down(
    app, client, broker: Broker, monkeypatch
) -> None:
    monkeypatch.setattr("bot.outbox.BROKER_BACKOFF_S", 0.05)
    broker.up = False
    relay = Relay(app.extensions["gaffer_db"], broker.send).start()
    try:
        assert deliver(client, "issues", PAYLOAD, delivery_id="d-1").status_code == 202
        broker.up = True
        [row] = rows(app)
        wait_for(lambda: broker.taken == [row.id], what="the delivery handed on")
    finally:
        relay.stop()


def test_relays_racing_hand_each_delivery_on_once(app, client, broker: Broker) -> None:
    for n in range(40):
        deliver(client, "issues", PAYLOAD, delivery_id=f"d-{n}")
    db = app.extensions["gaffer_db"]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: relay_once(db, broker.send), range(8)))
    assert sorted(broker.taken) == [row.id for row in rows(app)]


def test_the_reconciler_does_not_resend_what_the_relay_just_sent(
    app, client, wctx, broker: Broker, monkeypatch
) -> None:
    sent_again: list[dict[str, Any]] = []
    monkeypatch.setattr(wctx, "send_task", lambda name, **kwargs: sent_again.append(kwargs))
    deliver(client, "issues", PAYLOAD, delivery_id="d-1")
    relay_once(app.extensions["gaffer_db"], broker.send)
    assert resend_outbox(wctx) == 0
    assert sent_again == []


def test_the_reconciler_resends_a_delivery_claimed_by_a_relay_that_died(
    app, client, wctx, monkeypatch
) -> None:
    sent_again: list[dict[str, Any]] = []
    monkeypatch.setattr(wctx, "send_task", lambda name, **kwargs: sent_again.append(kwargs))
    deliver(client, "issues", PAYLOAD, delivery_id="d-1")
    with app.extensions["gaffer_db"].session() as session:  # claimed, never sent, long ago
        session.execute(update(Delivery).values(enqueued_at=utcnow() - timedelta(hours=1)))
    [row] = rows(app)
    assert resend_outbox(wctx) == 1
    assert sent_again == [{"delivery_id": row.id}]


def deliveries_at_once(client_for: Callable[[], Any], ids: list[str]) -> list[int]:
    """Send one delivery per id, all at the same moment; return the status of each."""
    start = threading.Barrier(len(ids))

    def send(delivery_id: str) -> int:
        client = client_for()
        start.wait()
        return deliver(client, "issues", PAYLOAD, delivery_id=delivery_id).status_code

    with ThreadPoolExecutor(len(ids)) as pool:
        return list(pool.map(send, ids))


def test_deliveries_arriving_together_are_each_stored_once(app) -> None:
    ids = [f"d-{n % 12}" for n in range(36)]  # each id three times, all at once
    statuses = deliveries_at_once(app.test_client, ids)
    accepted = sorted(i for i, status in zip(ids, statuses, strict=True) if status == 202)
    assert accepted == sorted(set(ids))  # one 202 per delivery, 200 for its copies
    assert sorted(statuses) == [200] * 24 + [202] * 12
    assert sorted(row.delivery_id for row in rows(app)) == sorted(set(ids))


def test_a_database_that_refuses_the_write_gets_no_202(app, client, monkeypatch) -> None:
    engine = app.extensions["gaffer_intake"].engine

    def refuse(*_: Any, **__: Any) -> Any:
        raise ConnectionError("the database is away")

    monkeypatch.setattr(engine, "connect", refuse)
    app.config["PROPAGATE_EXCEPTIONS"] = False  # answered as gunicorn would, with a 500
    response = deliver(client, "issues", PAYLOAD, delivery_id="d-1")
    assert response.status_code == 500


def test_a_request_given_up_on_mid_write_does_not_stop_the_writer(app) -> None:
    """The front cancels a request whose client hung up (GitHub does after 10 s): its row is
    stored all the same, and the writer goes on storing the next ones."""
    writer = app.extensions["gaffer_intake"]

    def row(delivery_id: str) -> dict[str, Any]:
        return delivery_row(
            source="github",
            hook_id="1",
            delivery_id=delivery_id,
            event="issues",
            action="labeled",
            body=b"{}",
        )

    abandoned = writer.submit(row("d-gone"))
    abandoned.cancel()  # before the writer thread has had its turn
    assert writer.submit(row("d-next")).result(timeout=10) is True
    assert sorted(each.delivery_id for each in rows(app)) == ["d-gone", "d-next"]
