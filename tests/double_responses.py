"""Serve the GitHub double to code in the test process through `responses`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import SplitResult, urlsplit

import responses
from flask import Flask
from requests import PreparedRequest

# Headers the WSGI layer computes itself; forwarding them would contradict it.
HOP_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin_of(url: SplitResult) -> tuple[str, str, int | None]:
    """Return (scheme, host, port) with the scheme's default port made explicit."""
    return url.scheme, url.hostname or "", url.port or DEFAULT_PORTS.get(url.scheme)


def _path_under(base: SplitResult, url: str) -> str | None:
    """Return the path and query of url relative to base, or None when outside it."""
    target = urlsplit(url)
    base_path = base.path.rstrip("/")
    if _origin_of(target) != _origin_of(base):
        return None
    if target.path != base_path and not target.path.startswith(base_path + "/"):
        return None
    rest = target.path[len(base_path) :] or "/"
    return f"{rest}?{target.query}" if target.query else rest


class _ForwardToDouble(responses.CallbackResponse):
    """A `responses` registration answering every method and path under one base URL."""

    def __init__(self, base_url: str, callback: Callable[[Any], Any]) -> None:
        super().__init__("GET", base_url, callback, content_type=None)
        self.base = urlsplit(base_url)

    def matches(self, request: PreparedRequest) -> tuple[bool, str]:
        """Match any method; the double itself decides what exists."""
        if _path_under(self.base, str(request.url)) is None:
            return False, f"URL is not under {self.base.geturl()}"
        return True, ""


def mock_with_responses(
    rsps: responses.RequestsMock, flask_app: Flask, base_url: str
) -> responses.BaseResponse:
    """Serve every `requests` call under base_url from the double, in process."""
    base = urlsplit(base_url.rstrip("/"))
    client = flask_app.test_client()

    def forward(request: PreparedRequest) -> tuple[int, list[tuple[str, str]], bytes]:
        """Replay one intercepted request against the double's test client."""
        answer = client.open(
            _path_under(base, str(request.url)),
            base_url=base.geturl(),
            method=request.method or "GET",
            headers=[(k, v) for k, v in request.headers.items() if k.lower() not in HOP_HEADERS],
            data=_body_bytes(request.body),
        )
        headers = [(k, v) for k, v in answer.headers.items() if k.lower() not in HOP_HEADERS]
        return answer.status_code, headers, answer.get_data()

    return rsps.add(_ForwardToDouble(base.geturl(), forward))


def _body_bytes(body: Any) -> bytes:
    """Return a prepared request body as bytes."""
    if body is None:
        return b""
    return body.encode() if isinstance(body, str) else bytes(body)
