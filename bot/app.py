"""Build gaffer's Flask app from settings."""

from __future__ import annotations

import logging
import os
from datetime import datetime
from typing import Any

from flask import Flask, Response, current_app, jsonify
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from bot.db import Database
from bot.heartbeats import RECONCILER, SCHEDULER, last_heartbeats, punctuality
from bot.intake import DeliveryWriter
from bot.logs import structure_logs
from bot.masking import SecretMask, mask_logs
from bot.metrics import GafferCollector
from bot.queue import make_celery
from bot.settings import Settings


def create_app(settings: Settings | None = None, **overrides: Any) -> Flask:
    """Return the web app: the webhook receivers and the health check."""
    settings = settings or Settings.from_env()
    app = Flask("gaffer")
    app.config.update(GAFFER=settings, MAX_CONTENT_LENGTH=settings.max_body_bytes, **overrides)
    app.extensions["gaffer_db"] = Database(settings.database_url)
    app.extensions["gaffer_intake"] = DeliveryWriter(app.extensions["gaffer_db"].engine)
    app.extensions["gaffer_celery"] = make_celery(settings, web=True)
    app.extensions["gaffer_mask"] = SecretMask.from_settings(settings, os.environ)
    # Records reach the root logger's handlers (or logging's last resort); Flask logs a
    # failed request through its own logger, and gunicorn through its error logger.
    loggers = [logging.getLogger(), app.logger, logging.getLogger("gunicorn.error")]
    mask_logs(app.extensions["gaffer_mask"], loggers)
    structure_logs(loggers, json_lines=settings.log_format == "json")

    from bot import api, webhooks
    from bot.dashboard import pages as dashboard

    app.register_blueprint(webhooks.bp)
    app.register_blueprint(api.bp)
    dashboard.init_app(app, settings)
    if settings.jam_webhook_secret:  # no secret, no route: unsigned Jam reports are never read
        from bot.jam import receiver

        receiver.init_app(app, settings.jam_webhook_secret)
    app.add_url_rule("/healthz", "healthz", _healthz)
    app.add_url_rule("/readyz", "readyz", _readyz)
    metrics = CollectorRegistry(auto_describe=False)  # nothing is read until a scrape
    metrics.register(GafferCollector(app.extensions["gaffer_db"]))
    app.extensions["gaffer_metrics"] = metrics
    app.add_url_rule("/metrics", "metrics", _metrics)
    return app


def _metrics() -> Response:
    """What gaffer did and holds, for Prometheus, read from the database (bot/metrics.py)."""
    text = generate_latest(current_app.extensions["gaffer_metrics"])
    return Response(text, mimetype=CONTENT_TYPE_LATEST)


def _healthz() -> tuple[Response, int]:
    """Say whether the receiver can store deliveries, and when beat and the reconciler ran.

    200 while the database answers, whatever the scheduler does: the web part is alive.
    `/readyz` is the stricter question.
    """
    beats = _heartbeats()
    if beats is None:
        return jsonify(status="the database is unreachable"), 503
    return jsonify(status="ok", **_background(beats)), 200


def _readyz() -> tuple[Response, int]:
    """Say whether all of gaffer runs: the database and the broker answer, and beat and the
    reconciler are on time (each ran within three reconciler intervals, at least three
    minutes). 503 says why."""
    beats = _heartbeats()
    if beats is None:
        return jsonify(status="the database is unreachable"), 503
    if not _broker_answers():
        return jsonify(status="the broker is unreachable"), 503
    background = _background(beats)
    late = [name for name in (SCHEDULER, RECONCILER) if background[name] != "on time"]
    if late:
        return jsonify(status=f"not ready: {', '.join(late)} not on time", **background), 503
    return jsonify(status="ok", **background), 200


def _broker_answers() -> bool:
    try:
        with current_app.extensions["gaffer_celery"].connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=2)
    except Exception:  # noqa: BLE001 - each transport fails in its own way
        return False
    return True


def _heartbeats() -> dict[str, datetime] | None:
    try:
        return last_heartbeats(current_app.extensions["gaffer_db"])
    except SQLAlchemyError:
        return None


def _background(beats: dict[str, datetime]) -> dict[str, str | None]:
    """When beat and the reconciler last ran, and whether that is on time, late or never."""
    settings = current_app.config["GAFFER"]
    return {
        "scheduler_last_tick": _iso(beats.get(SCHEDULER)),
        "reconciler_last_pass": _iso(beats.get(RECONCILER)),
        **punctuality(beats, settings.reconcile_every_s),
    }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None
