"""The embedded default's broker: two workers of one queue starting at once, and workers
woken when there is work rather than on a timer."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from kombu import Connection, Queue
from kombu.message import Message
from kombu.transport import sqlalchemy as kombu_sql

from bot.doorbell import Doorbell
from bot.sql_broker import TRANSPORT, URL_PREFIX
from tests.support import wait_for


def test_a_queue_row_another_worker_made_meanwhile_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kombu looks for a queue's row, then inserts it; a second worker that looked before
    the first one's insert landed inserts it again. With kombu's own transport that is an
    IntegrityError and the worker exits; with gaffer's the second worker uses the row."""
    url = f"sqlite:///{tmp_path / 'broker.sqlite'}"
    with Connection(url, transport=TRANSPORT) as first:  # the other worker makes the row
        Queue("agent").bind(first.default_channel).declare()
    looked_up = kombu_sql.Channel._get_or_create

    def looked_too_early(channel: kombu_sql.Channel, queue: str) -> object:
        monkeypatch.setattr(kombu_sql.Channel, "_get_or_create", looked_up)
        channel.session.add(channel.queue_cls(queue))  # inserts what it did not find
        channel.session.commit()
        return None

    monkeypatch.setattr(kombu_sql.Channel, "_get_or_create", looked_too_early)
    with Connection(url, transport=TRANSPORT) as second:
        Queue("agent").bind(second.default_channel).declare()
        second.default_channel._put("agent", {"body": "still works"})
        assert second.default_channel._size("agent") == 1


def test_a_queue_row_a_busy_database_did_not_store_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When a busy database refuses the commit of a queue's new row, kombu hands the unstored
    row back; a message put with it inserts the queue a second time beside the row another
    worker made meanwhile, and the unique violation ends the worker. gaffer's transport
    reads the stored row instead."""
    url = f"sqlite:///{tmp_path / 'broker.sqlite'}"
    looked_up = kombu_sql.Channel._get_or_create

    def refused(channel: kombu_sql.Channel, queue: str) -> object:
        monkeypatch.setattr(kombu_sql.Channel, "_get_or_create", looked_up)
        with Connection(url, transport=TRANSPORT) as other:  # another worker makes the row
            Queue(queue).bind(other.default_channel).declare()
        return channel.queue_cls(queue)  # what kombu returns after a refused commit

    with Connection(url, transport=TRANSPORT) as worker:
        monkeypatch.setattr(kombu_sql.Channel, "_get_or_create", refused)
        worker.default_channel._put("agent", {"body": "stored once"})
        assert worker.default_channel._size("agent") == 1


def test_a_waiting_worker_gets_a_message_when_it_is_put_not_at_its_next_look(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'broker.sqlite'}"
    got: list[object] = []
    with (
        _looking_rarely(Connection(url, transport=TRANSPORT)) as worker,
        Connection(url, transport=TRANSPORT) as web,
    ):
        Queue("github").bind(web.default_channel).declare()
        with worker.Consumer(Queue("github"), callbacks=[lambda body, _: got.append(body)]):
            waiting = _draining(worker)
            time.sleep(0.2)  # the worker is waiting by now, or finds it on its first look
            web.default_channel._put("github", _message("wake up"))
            waiting.join(timeout=WELL_BEFORE_ITS_NEXT_LOOK)
    assert got == ["wake up"]


def test_a_worker_with_no_room_takes_the_next_message_once_it_acknowledges_one(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'broker.sqlite'}"
    got: list[object] = []
    held: list[Message] = []
    with (
        _looking_rarely(Connection(url, transport=TRANSPORT)) as worker,
        Connection(url, transport=TRANSPORT) as web,
    ):
        Queue("agent").bind(web.default_channel).declare()
        web.default_channel._put("agent", _message("first"))
        web.default_channel._put("agent", _message("second"))
        keep = [lambda body, message: (got.append(body), held.append(message))]
        with worker.Consumer(Queue("agent"), callbacks=keep) as consumer:
            consumer.qos(prefetch_count=1)
            worker.drain_events(timeout=20)  # the first, which takes the only room
            waiting = _draining(worker)
            time.sleep(0.2)
            held[0].ack()
            waiting.join(timeout=WELL_BEFORE_ITS_NEXT_LOOK)
    assert got == ["first", "second"]


def test_a_put_is_not_held_up_by_a_worker_reading_the_queue(tmp_path: Path) -> None:
    """The web side stores a delivery's task while a worker reads the queue: in SQLite's
    write-ahead log a reader never blocks a writer. (In its default rollback journal, the
    put would wait out the reader, for up to SQLite's 30 s busy timeout.)"""
    url = f"sqlite:///{tmp_path / 'broker.sqlite'}"
    with Connection(url, transport=TRANSPORT) as web:
        Queue("github").bind(web.default_channel).declare()
        reader = sqlite3.connect(tmp_path / "broker.sqlite", isolation_level=None)
        try:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM kombu_message").fetchone()  # holds its read
            put = threading.Thread(
                target=web.default_channel._put, args=("github", _message("stored")), daemon=True
            )
            put.start()
            put.join(timeout=20)
            stored_while_read = not put.is_alive()
        finally:
            reader.close()
        put.join()
        assert stored_while_read
        assert web.default_channel._size("github") == 1


# A worker in these tests looks for messages on its own once an hour: one it gets within
# this many seconds was announced to it.
WELL_BEFORE_ITS_NEXT_LOOK = 20


def _looking_rarely(connection: Connection) -> Connection:
    connection.transport.polling_interval = 3600
    return connection


def _draining(connection: Connection) -> threading.Thread:
    """Wait for one message in the background, as a worker's loop does."""
    waiting = threading.Thread(target=connection.drain_events, daemon=True)
    waiting.start()
    return waiting


def _message(body: str) -> dict[str, object]:
    return {
        "body": json.dumps(body),
        "content-type": "application/json",
        "content-encoding": "utf-8",
        "headers": {},
        "properties": {
            "delivery_tag": body,
            "delivery_info": {"exchange": "", "routing_key": ""},
            "body_encoding": "utf-8",
        },
    }


@pytest.mark.parametrize("backend", ["embedded"], indirect=True)
def test_a_worker_given_an_embedded_broker_url_uses_gaffers_transport(
    settings, start_worker
) -> None:
    """Celery's command line reads BROKER_URL from the environment as its own --broker; a
    `sqla+` URL taken that way would bring back kombu's transport (no doorbell, the queue
    row race). The worker listens on the broker's doorbell only with gaffer's."""
    worker = start_worker("agent")
    bell = Doorbell.named("broker", settings.broker_url.removeprefix(URL_PREFIX))
    wait_for(
        lambda: any(name.startswith(f"{worker.process.pid}-") for name in _listening(bell)),
        timeout=30,
        what="the worker to wait on the broker's doorbell",
    )


def _listening(bell: Doorbell) -> list[str]:
    return [path.name for path in bell.folder.iterdir()] if bell.folder.is_dir() else []
