"""Serve the GitHub double over loopback HTTP, for worker processes and the demo."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from flask import Flask
from werkzeug.serving import WSGIRequestHandler, make_server


class _QuietRequestHandler(WSGIRequestHandler):
    """A request handler that does not log every request to stderr."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Skip the access log line."""


@contextmanager
def serve_on_loopback(flask_app: Flask) -> Iterator[str]:
    """Serve the double on 127.0.0.1 (a free port) and yield its base URL."""
    server = make_server(
        "127.0.0.1", 0, flask_app, threaded=True, request_handler=_QuietRequestHandler
    )
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.05},
        name="github-double",
        daemon=True,
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
