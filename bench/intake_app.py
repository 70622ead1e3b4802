"""The app the intake benches serve: gaffer's receiver beside a bare endpoint."""

from __future__ import annotations

from flask import Flask

from bot.app import create_app
from bot.asgi import WholeRequests, front


def create_bench_app() -> Flask:
    """Return gaffer's app with `/bare`, which reads the body and answers 202, nothing else."""
    app = create_app()

    @app.post("/bare")
    def bare() -> tuple[str, int]:
        from flask import request

        request.get_data()
        return "", 202

    return app


def create_bench_asgi_app() -> WholeRequests:
    """Return the bench app behind gaffer's whole-request front, as `gaffer web` serves it."""
    return front(create_bench_app())
