"""Receive Jam's webhooks: check the Standard Webhooks signature, store once, enqueue."""

from __future__ import annotations

import json
from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify, request
from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError
from werkzeug.datastructures import Headers

from bot.jam.report import JAM_CREATED
from bot.models import Delivery, utcnow
from bot.webhooks import publish_delivery

bp = Blueprint("jam", __name__)
VERIFIER = "gaffer_jam_webhook"
# Jam signs through Svix, which names its headers svix-*; the standard names are webhook-*.
HEADER_NAMES = ("id", "timestamp", "signature")
MAX_DELIVERY_ID = 128


def init_app(app: Flask, secret: str) -> None:
    """Add POST /webhooks/jam to the app, verifying with the Jam webhook's secret."""
    app.extensions[VERIFIER] = Webhook(secret)
    app.register_blueprint(bp)


@bp.post("/webhooks/jam")
def receive_jam() -> tuple[Response, int]:
    """Accept one Jam delivery."""
    body = request.get_data(cache=True)
    headers = _signature_headers(request.headers)
    if headers is None or not _verified(body, headers):
        return _answer("signature missing, wrong or outside the 5 minute window", 401)
    message_id = headers["webhook-id"]
    if len(message_id) > MAX_DELIVERY_ID:
        return _answer("the message id is too long", 400)
    payload = _json_object(body)
    if payload is None:
        return _answer("the body is not a JSON object", 400)
    if payload.get("type") != JAM_CREATED:
        return _answer(f"{payload.get('type')!s:.64} is not handled; ignored", 200)
    return _store_and_enqueue(message_id, body)


def _signature_headers(headers: Headers) -> dict[str, str] | None:
    found = {}
    for name in HEADER_NAMES:
        value = headers.get(f"webhook-{name}") or headers.get(f"svix-{name}")
        if not value:
            return None
        found[f"webhook-{name}"] = value
    return found


def _verified(body: bytes, headers: dict[str, str]) -> bool:
    verifier: Webhook = current_app.extensions[VERIFIER]
    try:
        verifier.verify(body, headers, json_parse=False)
    # The library lets malformed signatures and bodies through as ValueError.
    except (WebhookVerificationError, ValueError):
        return False
    return True


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return payload if isinstance(payload, dict) else None


def _store_and_enqueue(message_id: str, body: bytes) -> tuple[Response, int]:
    # Jam retries a message with the same id for hours: the unique key makes it one row.
    stored = (
        insert(Delivery)
        .returning(Delivery.id)
        .values(
            source="jam",
            hook_id="jam",
            delivery_id=message_id,
            event=JAM_CREATED,
            action=None,
            payload=body.decode("utf-8", errors="replace"),
            received_at=utcnow(),
            attempts=0,
            enqueued_at=utcnow(),
        )
    )
    try:
        with current_app.extensions["gaffer_db"].engine.begin() as connection:
            row_id = connection.execute(stored).scalar_one()
    except IntegrityError:
        return _answer("duplicate delivery; nothing to do", 200)
    publish_delivery(row_id)
    return _answer("accepted", 202)


def _answer(message: str, status: int) -> tuple[Response, int]:
    return jsonify(message=message), status
