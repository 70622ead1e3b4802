"""The web front: whole requests are read on an event loop, then Flask answers in a thread.

gunicorn's asyncio worker runs this. A request's body is read in full, within
`GAFFER_BODY_SECONDS` and `max_body_bytes`, before the Flask app is called with it on one
of a pool of threads. A client that trickles its body holds a coroutine and a socket,
never one of the threads that answer GitHub, and is cut off at the deadline with 408.
Run it with `gunicorn --worker-class asgi 'bot.asgi:create_asgi_app()'`; `gaffer web`
and `gaffer run` do.

A signed GitHub delivery that gaffer stores is answered by the front itself: the checks of
bot/webhooks.py run on the loop, the delivery goes to the process's intake writer
(bot/intake.py) and the loop answers once it is committed, with no thread of the pool and
no Flask. Every other request to the receiver (refused, ping, an event gaffer ignores) goes
on to Flask's route, which checks it the same way, answers and logs it.

Flask's answer is collected whole on its thread and sent in one message: gaffer's answers
are small (a JSON line, a dashboard page, a bundle built in memory), and one hop back to
the loop per request costs far less than one per chunk.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from flask import Flask

from bot.app import create_app
from bot.intake import DeliveryWriter
from bot.webhooks import GITHUB_PATH, check_github, stored_answer

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


# Threads per web worker process that answer requests: enough that requests waiting on
# GitHub (the dashboard's sign-in) or a hung broker leave threads for GitHub's deliveries.
WEB_THREADS = 64


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


class GitHubIntake:
    """Store signed GitHub deliveries from the loop; hand every other request to app."""

    def __init__(self, app: ASGIApp, writer: DeliveryWriter, secrets: Sequence[str]) -> None:
        self.app, self.writer, self.secrets = app, writer, secrets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] != GITHUB_PATH or scope["method"] != "POST" or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        body = (await receive()).get("body") or b""
        headers = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers") or ()
        }
        verdict = check_github(lambda name: headers.get(name, ""), body, self.secrets)
        if verdict.row is None:
            await self.app(scope, _replay(body), send)
            return
        new = await asyncio.wrap_future(self.writer.submit(verdict.row))
        message, status = stored_answer(new)
        await _answer(send, status, message, key="message", close=False)


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class WsgiOnThreads:
    """Answer each whole request with a WSGI app on a pool of threads.

    The pool keeps its threads and starts another only when all are busy, so a request
    that waits on the database, the broker or GitHub does not hold up the others.
    """

    def __init__(self, app: WSGIApp, *, threads: int) -> None:
        self.app = app
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="gaffer-web")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        environ = wsgi_environ(scope, message.get("body") or b"")
        loop = asyncio.get_running_loop()
        status, headers, body = await loop.run_in_executor(self.pool, self._respond, environ)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _respond(self, environ: dict[str, Any]) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        started: list[tuple[int, list[tuple[bytes, bytes]]]] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None):
            if exc_info and started:
                raise exc_info[1].with_traceback(exc_info[2])
            encoded = [
                (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers
            ]
            started[:] = [(int(status.split(" ", 1)[0]), encoded)]

        chunks = self.app(environ, start_response)
        try:
            body = b"".join(chunks)
        finally:
            if hasattr(chunks, "close"):
                chunks.close()
        return *started[0], body


def wsgi_environ(scope: Scope, body: bytes) -> dict[str, Any]:
    """Return the WSGI environ (PEP 3333) of an ASGI HTTP request whose body is body."""
    root = scope.get("root_path", "").encode().decode("latin-1")
    path = scope["path"].encode().decode("latin-1")
    server = scope.get("server") or ("localhost", 80)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": root,
        "PATH_INFO": path.removeprefix(root),
        "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
        "SERVER_NAME": server[0],
        "SERVER_PORT": str(server[1] or 0),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    if scope.get("client"):
        environ["REMOTE_ADDR"] = scope["client"][0]
    for raw_name, raw_value in scope.get("headers") or ():
        name = raw_name.decode("latin-1").upper().replace("-", "_")
        if name not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            name = f"HTTP_{name}"
        value = raw_value.decode("latin-1")
        # Repeated headers are joined, as a WSGI server joins them.
        environ[name] = f"{environ[name]},{value}" if name in environ else value
    return environ


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


async def _answer(
    send: Send, status: int, text: str, *, key: str = "error", close: bool = True
) -> None:
    body = json.dumps({key: text}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if close:
        headers.append((b"connection", b"close"))
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
    flask = WsgiOnThreads(app, threads=WEB_THREADS)
    intake = app.extensions.get("gaffer_intake")
    return WholeRequests(
        GitHubIntake(flask, intake, settings.webhook_secrets) if intake else flask,
        max_bytes=settings.max_body_bytes,
        seconds=settings.body_seconds,
    )
