"""`gaffer setup`'s one-time page on loopback: hand GitHub the manifest, take back the code.

The page answers only requests from a loopback address that name it by its loopback
address in `Host` (a page on another site whose name resolves to 127.0.0.1 sends its own
name: DNS rebinding). It serves the manifest form once, and takes the redirect back from
GitHub once: the `state` must be the random token it put in the form's address, and the
first callback that carries it uses the page up, whatever happens next. A wrong state is
refused without using it up. After the callback the page answers "used already" for a
few seconds, so a reload says so instead of failing to connect, then it stops.
"""

from __future__ import annotations

import hmac
import html
import ipaddress
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from werkzeug.serving import WSGIRequestHandler, make_server

CALLBACK_PATH = "/callback"
# How long the used page goes on answering after the callback, for a reload.
LINGER_SECONDS = 3.0
_HEADERS = [
    ("Content-Type", "text/html; charset=utf-8"),
    ("Cache-Control", "no-store"),
    # The code and the state are in this page's address: never send it to another site.
    ("Referrer-Policy", "no-referrer"),
    ("Content-Security-Policy", "frame-ancestors 'none'"),
]


class SetupFailed(Exception):
    """The code could not be turned into an App's credentials; the message says why."""


@dataclass
class Outcome:
    """How the callback ended: what to tell the person, and whether the App was saved."""

    saved: bool
    message: str


@dataclass
class SetupPage:
    """The WSGI app behind the page: guards, the manifest form, and the callback."""

    port: int
    new_app_url: str
    manifest: dict[str, Any]
    state: str
    # Turns the code into the App's credentials and saves them; says what to tell the person.
    finish: Callable[[str], str]
    form_served: bool = False
    outcome: Outcome | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        status, body = self.answer(environ)
        start_response(status, _HEADERS)
        return [_page(body).encode()]

    def answer(self, environ: dict[str, Any]) -> tuple[str, str]:
        """Return the status and the page's text for one request."""
        refusal = self._refusal(environ)
        if refusal:
            return "403 Forbidden", refusal
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "")
        if method != "GET" or path not in ("/", CALLBACK_PATH):
            return "404 Not Found", "Nothing here."
        if self.outcome is not None or (path == "/" and self.form_served):
            return "410 Gone", (
                "This setup page works once and was used already. Run "
                "<code>gaffer setup</code> again to create another App."
            )
        if path == "/":
            self.form_served = True
            return "200 OK", self._form()
        return self._callback(parse_qs(environ.get("QUERY_STRING", "")))

    def _refusal(self, environ: dict[str, Any]) -> str | None:
        if not _loopback(environ.get("REMOTE_ADDR", "")):
            return "This page answers only this machine."
        if environ.get("HTTP_HOST") != f"127.0.0.1:{self.port}":
            return f"Open this page as {html.escape(self.url)}."
        return None

    def _form(self) -> str:
        manifest = html.escape(json.dumps(self.manifest), quote=True)
        return (
            f'<form method="post" action="{html.escape(self.new_app_url, quote=True)}">'
            f'<input type="hidden" name="manifest" value="{manifest}">'
            f"<p>gaffer asks GitHub to create the App <b>{html.escape(self.manifest['name'])}"
            '</b>.</p><button type="submit">Create it on GitHub</button></form>'
            "<script>document.forms[0].submit()</script>"
        )

    def _callback(self, query: dict[str, list[str]]) -> tuple[str, str]:
        state, code = query.get("state", [""])[-1], query.get("code", [""])[-1]
        if not hmac.compare_digest(state.encode(), self.state.encode()):
            return "403 Forbidden", (
                "The state does not match the one this page sent to GitHub: this answer "
                "did not come from the setup started here. Nothing was saved."
            )
        if not code:
            return "400 Bad Request", "GitHub's answer carries no code."
        self.outcome = Outcome(False, "")  # used up from here on, whatever follows
        try:
            self.outcome = Outcome(True, self.finish(code))
        except SetupFailed as error:
            self.outcome = Outcome(False, str(error))
            return "502 Bad Gateway", html.escape(str(error))
        return "200 OK", html.escape(self.outcome.message)


def serve_until_used(page: SetupPage) -> Outcome:
    """Serve the page on 127.0.0.1 until its callback has been handled; return how it ended."""
    server = make_server("127.0.0.1", page.port, page, request_handler=_QuietRequestHandler)
    server.timeout = 0.2
    try:
        while page.outcome is None:
            server.handle_request()
        deadline = time.monotonic() + LINGER_SECONDS
        while time.monotonic() < deadline:
            server.handle_request()
    finally:
        server.server_close()
    return page.outcome


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _page(body: str) -> str:
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>gaffer setup</title>'
        f"</head><body>{body}</body></html>"
    )


class _QuietRequestHandler(WSGIRequestHandler):
    """Log no request lines: the callback's address carries the one-time code."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Skip the access log line."""
