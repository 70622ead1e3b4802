"""Build gaffer's Flask app from settings."""

from __future__ import annotations

import logging
import os
from datetime import datetime
from typing import Any

from flask import Flask, Response, current_app, jsonify
from sqlalchemy.exc import SQLAlchemyError

from bot.db import Database
from bot.heartbeats import RECONCILER, SCHEDULER, last_heartbeats
from bot.masking import SecretMask, mask_logs
from bot.queue import make_celery
from bot.settings import Settings


def create_app(settings: Settings | None = None, **overrides: Any) -> Flask:
    """Return the web app: the webhook receivers and the health check."""
    settings = settings or Settings.from_env()
    app = Flask("gaffer")
    app.config.update(GAFFER=settings, MAX_CONTENT_LENGTH=settings.max_body_bytes, **overrides)
    app.extensions["gaffer_db"] = Database(settings.database_url)
    app.extensions["gaffer_celery"] = make_celery(settings, web=True)
    app.extensions["gaffer_mask"] = SecretMask.from_settings(settings, os.environ)
    # Records reach the root logger's handlers (or logging's last resort); Flask logs a
    # failed request through its own logger, and gunicorn through its error logger.
    loggers = [logging.getLogger(), app.logger, logging.getLogger("gunicorn.error")]
    mask_logs(app.extensions["gaffer_mask"], loggers)

    from bot import webhooks

    app.register_blueprint(webhooks.bp)
    if settings.jam_webhook_secret:  # no secret, no route: unsigned Jam reports are never read
        from bot.jam import receiver

        receiver.init_app(app, settings.jam_webhook_secret)
    app.add_url_rule("/healthz", "healthz", _healthz)
    return app


def _healthz() -> tuple[Response, int]:
    """Say whether the receiver can store deliveries, and when beat and the reconciler ran."""
    try:
        beats = last_heartbeats(current_app.extensions["gaffer_db"])
    except SQLAlchemyError:
        return jsonify(status="the database is unreachable"), 503
    # Null until the first tick or pass: a worker with --beat has not run since the database
    # was made, or its scheduler cannot run.
    return jsonify(
        status="ok",
        scheduler_last_tick=_iso(beats.get(SCHEDULER)),
        reconciler_last_pass=_iso(beats.get(RECONCILER)),
    ), 200


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None
