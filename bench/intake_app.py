"""The apps the intake benches serve: a bare Flask endpoint, and gaffer's app beside one."""

from __future__ import annotations

from flask import Flask, request

from bot.app import create_app
from bot.asgi import WholeRequests, front
from bot.settings import Settings


def create_bare_app() -> Flask:
    """Return a Flask app of its own whose `/bare` reads the body and answers 202, nothing else."""
    app = Flask("bare")
    # The front reads its body limits from here, as it does from gaffer's app.
    app.config.update(GAFFER=Settings.from_env())
    app.add_url_rule("/bare", "bare", _bare, methods=["POST"])
    app.add_url_rule("/healthz", "healthz", lambda: ("ok", 200))
    return app


def create_bare_asgi_app() -> WholeRequests:
    """Return the bare app behind gaffer's whole-request front, as `gaffer web` serves gaffer."""
    return front(create_bare_app())


def create_bench_app() -> Flask:
    """Return gaffer's app with `/bare`, which reads the body and answers 202, nothing else."""
    app = create_app()
    app.add_url_rule("/bare", "bare", _bare, methods=["POST"])
    return app


def create_bench_asgi_app() -> WholeRequests:
    """Return the bench app behind gaffer's whole-request front, as `gaffer web` serves it."""
    return front(create_bench_app())


def _bare() -> tuple[str, int]:
    request.get_data()
    return "", 202
