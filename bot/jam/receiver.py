"""Receive Jam's webhooks: check the Standard Webhooks signature, store once, enqueue."""

from __future__ import annotations

from flask import Blueprint, Flask, Response, current_app, request
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError
from werkzeug.datastructures import Headers

from bot.jam.report import JAM_CREATED
from bot.webhooks import BodyRefused, answer, json_object, refuse, store

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
        return refuse("signature missing, wrong or outside the 5 minute window", 401)
    message_id = headers["webhook-id"]
    if len(message_id) > MAX_DELIVERY_ID:
        return refuse("the message id is too long", 400)
    try:
        payload = json_object(body)
    except BodyRefused as refused:
        return refuse(str(refused), 400)
    if payload.get("type") != JAM_CREATED:
        return answer(f"{payload.get('type')!s:.64} is not handled; ignored", 200)
    # Jam retries a message with the same id for hours: the unique key makes it one row.
    return store(
        source="jam",
        hook_id="jam",
        delivery_id=message_id,
        event=JAM_CREATED,
        action=None,
        body=body,
    )


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
