"""Slow and hostile clients cannot stall intake: `gaffer web` as a deployer starts it.

Each test runs the real front (gunicorn's event-loop worker with bot/asgi.py) in a child
process on this test's database and broker, and attacks it over real sockets. Client
timeouts here only guard against a hang; GitHub itself waits 10 s for an answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from sqlalchemy import func, select

from bot.models import Delivery
from bot.settings import Settings
from double.webhooks import issue, labeled, repository, sign
from tests.conftest import WEBHOOK_SECRET
from tests.support import WebProcess

HEADERS = b"POST /webhooks/github HTTP/1.1\r\nHost: gaffer\r\nContent-Type: application/json\r\n"


@pytest.fixture
def web(app, settings: Settings, tmp_path: Path) -> Iterator[WebProcess]:
    """Serve gaffer's web front with `gaffer web` on this test's backend."""
    env = {
        **os.environ,
        "WEBHOOK_SECRET": WEBHOOK_SECRET,
        "GAFFER_HOME": str(settings.home),
        "DATABASE_URL": settings.database_url,
        "BROKER_URL": settings.broker_url,
        "GAFFER_BROKER_PREFIX": settings.broker_key_prefix,
        "GAFFER_BODY_SECONDS": "3",
    }
    server = WebProcess.start(env, tmp_path / "web.log")
    try:
        yield server
    finally:
        server.stop()


class Tricklers:
    """Connections that send their headers, then their body one byte at a time."""

    def __init__(
        self, port: int, count: int, length: int = 100_000, pieces: int | None = None
    ) -> None:
        self.pieces = pieces  # bytes each sends, one every half second; None: without end
        self.sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
        for each in self.sockets:
            each.sendall(HEADERS + f"Content-Length: {length}\r\n\r\n".encode() + b"{")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self) -> None:
        sent = 0
        while not self.stop.wait(0.5) and (self.pieces is None or sent < self.pieces):
            sent += 1
            for each in self.sockets:
                with contextlib.suppress(OSError):  # cut off by the front, as it should
                    each.sendall(b" ")

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for each in self.sockets:
            each.close()


def signed_delivery(port: int, number: int) -> requests.Response:
    body = json.dumps(labeled(repository("acme/widgets", "/dev/null"), issue(number))).encode()
    return requests.post(
        f"http://127.0.0.1:{port}/webhooks/github",
        data=body,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "issues",
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(body, WEBHOOK_SECRET),
        },
        timeout=5,  # a hang guard: a stalled front never answers at all
    )


def read_until_closed(connection: socket.socket) -> bytes:
    chunks = []
    while chunk := connection.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)


def stored(app) -> int:
    with app.extensions["gaffer_db"].session() as session:
        return int(session.scalar(select(func.count()).select_from(Delivery)) or 0)


def test_signed_deliveries_are_answered_while_100_clients_trickle_bodies(
    app, web: WebProcess
) -> None:
    tricklers = Tricklers(web.port, 100)
    try:
        answers = [signed_delivery(web.port, number).status_code for number in range(1, 11)]
    finally:
        tricklers.close()
    assert answers == [202] * 10
    assert stored(app) == 10


def test_a_body_that_trickles_past_the_deadline_is_cut_off_with_408(web: WebProcess) -> None:
    # It falls silent before the deadline: a byte arriving after the front closed would
    # make the kernel reset the connection and could take the 408 with it.
    tricklers = Tricklers(web.port, 1, pieces=3)
    [connection] = tricklers.sockets
    connection.settimeout(20)  # a hang guard; the front's deadline here is 3 s
    try:
        answer = read_until_closed(connection)
    finally:
        tricklers.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"not received within 3 s" in answer


def test_a_declared_body_over_the_limit_is_refused_before_it_is_read(web: WebProcess) -> None:
    with socket.create_connection(("127.0.0.1", web.port), timeout=10) as connection:
        connection.sendall(HEADERS + f"Content-Length: {26 * 1024 * 1024}\r\n\r\n".encode())
        answer = read_until_closed(connection)
    assert answer.startswith(b"HTTP/1.1 413"), answer


def test_a_client_that_goes_away_mid_body_leaves_nothing(app, web: WebProcess) -> None:
    with socket.create_connection(("127.0.0.1", web.port), timeout=10) as connection:
        connection.sendall(HEADERS + b"Content-Length: 1000\r\n\r\n{")
    time.sleep(0.2)  # let the front see the close before the next request
    assert signed_delivery(web.port, 1).status_code == 202
    assert stored(app) == 1


def test_sigterm_to_gaffer_web_stops_the_server_it_started(web: WebProcess) -> None:
    web.process.terminate()  # what a supervisor or `docker stop` sends
    assert web.process.wait(timeout=30) == 0
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", web.port), timeout=5).close()
