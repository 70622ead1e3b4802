"""The web front: whole requests are read on an event loop, then Flask answers in a thread.

gunicorn's asyncio worker runs this. A request's body is read in full, within
`GAFFER_BODY_SECONDS` and `max_body_bytes`, before asgiref's WSGI adapter hands it to
the Flask app on a thread. A client that trickles its body holds a coroutine and a
socket, never one of the threads that answer GitHub, and is cut off at the deadline
with 408. Run it with `gunicorn --worker-class asgi 'bot.asgi:create_asgi_app()'`;
`gaffer web` and `gaffer run` do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from asgiref.wsgi import WsgiToAsgi
from flask import Flask

from bot.app import create_app

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class _TooLarge(Exception):
    pass


class _Gone(Exception):
    pass


class WholeRequests:
    """Buffer each HTTP request's body within a deadline and a size, then call the app."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, seconds: float) -> None:
        self.app, self.max_bytes, self.seconds = app, max_bytes, seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets here
        if _declared_length(scope) > self.max_bytes:
            await _answer(send, 413, "request body too large")
            return
        try:
            body = await asyncio.wait_for(self._body(receive), self.seconds)
        except TimeoutError:
            await _answer(send, 408, f"request body not received within {self.seconds:g} s")
            return
        except _TooLarge:
            await _answer(send, 413, "request body too large")
            return
        except _Gone:
            return
        # Each request gets its own thread: one that waits on the database or the broker
        # does not hold up the others.
        async with ThreadSensitiveContext():
            await self.app(scope, _replay(body), send)

    async def _body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone
            chunk = message.get("body") or b""
            size += len(chunk)
            if size > self.max_bytes:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    """Give the app the whole body in one message, then report the client gone."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _declared_length(scope: Scope) -> int:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0  # the server refuses a malformed length before we see it
    return 0


async def _answer(send: Send, status: int, text: str) -> None:
    body = f'{{"error": "{text}"}}'.encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    # The Flask app is built before the worker serves; there is nothing to start or stop.
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def create_asgi_app() -> WholeRequests:
    """Build gaffer's Flask app behind the whole-request front."""
    return front(create_app())


def front(app: Flask) -> WholeRequests:
    """Put a Flask app built by create_app behind the whole-request front."""
    settings = app.config["GAFFER"]
    return WholeRequests(
        WsgiToAsgi(app), max_bytes=settings.max_body_bytes, seconds=settings.body_seconds
    )
