"""Receive GitHub webhooks: check the signature, store the delivery once, answer.

Storing is all a request does that lasts: the relay hands the stored row to the broker
afterwards (bot/outbox.py), so a broker that is down or slow never reaches GitHub's request.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request
from gidgethub import ValidationFailure
from gidgethub.sansio import validate_event

from bot.handlers.routes import handles
from bot.models import utcnow

bp = Blueprint("webhooks", __name__)
log = logging.getLogger(__name__)
# GitHub's and Jam's payloads nest about a dozen levels; a deeper body is an attack on the
# parser (Python's JSON decoder recurses and fails near 1,000 levels).
MAX_JSON_DEPTH = 64
_TOO_DEEP = f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels"


class BodyRefused(ValueError):
    """A signed body gaffer will not store; the message is the answer's text."""


@bp.post("/webhooks/github")
def receive_github() -> tuple[Response, int]:
    """Accept one GitHub delivery."""
    body = request.get_data(cache=True)
    if not _signed(body, request.headers.get("X-Hub-Signature-256", "")):
        return refuse("signature missing or wrong", 401)
    event = request.headers.get("X-GitHub-Event", "")
    delivery_id = request.headers.get("X-GitHub-Delivery", "")
    if not event or not delivery_id:
        return refuse("X-GitHub-Event and X-GitHub-Delivery are required", 400)
    if request.mimetype != "application/json":
        return refuse("the webhook content type must be application/json", 415)
    try:
        payload = json_object(body)
    except BodyRefused as refused:
        return refuse(str(refused), 400)
    if event == "ping":
        return answer("pong", 200)
    if not handles(event, payload.get("action")):
        return answer(f"{event} is not handled; ignored", 200)
    return store(
        source="github",
        hook_id=_hook_id(),
        delivery_id=delivery_id,
        event=event,
        action=payload.get("action"),
        body=body,
    )


def _signed(body: bytes, signature: str) -> bool:
    # Only sha256 counts: an sha1-only signature is refused like a missing one.
    if not signature.startswith("sha256="):
        return False
    for secret in current_app.config["GAFFER"].webhook_secrets:
        try:
            validate_event(body, signature=signature, secret=secret)
            return True
        except ValidationFailure:
            continue
    return False


def _hook_id() -> str:
    # Delivery GUIDs are unique per hook or App, not across them.
    return (
        request.headers.get("X-GitHub-Hook-Installation-Target-ID")
        or request.headers.get("X-GitHub-Hook-ID")
        or "unknown"
    )


def store(
    *, source: str, hook_id: str, delivery_id: str, event: str, action: str | None, body: bytes
) -> tuple[Response, int]:
    """Store a delivery once and answer 202 after the commit; a duplicate answers 200."""
    row = {
        "source": source,
        "hook_id": hook_id,
        "delivery_id": delivery_id,
        "event": event,
        "action": action,
        "payload": body.decode("utf-8", errors="replace"),
        "received_at": utcnow(),
        "attempts": 0,
    }
    if not current_app.extensions["gaffer_intake"].store(row):
        return answer("duplicate delivery; nothing to do", 200)
    return answer("accepted", 202)


def json_object(body: bytes) -> dict[str, Any]:
    """Return the body as a JSON object at most MAX_JSON_DEPTH deep, or raise BodyRefused."""
    try:
        payload = json.loads(body)
    except RecursionError:
        raise BodyRefused(_TOO_DEEP) from None
    except (ValueError, UnicodeDecodeError):
        raise BodyRefused("the body is not a JSON object") from None
    if not isinstance(payload, dict):
        raise BodyRefused("the body is not a JSON object")
    if _deeper_than(payload, MAX_JSON_DEPTH):
        raise BodyRefused(_TOO_DEEP)
    return payload


def _deeper_than(value: Any, limit: int) -> bool:
    """Say whether objects and arrays nest more than limit levels, without recursing."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        pending += [(child, depth + 1) for child in children if isinstance(child, dict | list)]
    return False


def answer(message: str, status: int) -> tuple[Response, int]:
    return jsonify(message=message), status


def refuse(message: str, status: int) -> tuple[Response, int]:
    """Answer a delivery gaffer will not store, and log why, so an operator can tell a
    wrong secret from a wrong content type. What the sender wrote is quoted, cut short."""
    headers = request.headers
    log.warning(
        "refused a delivery to %s with %d: %s (event %.64r, delivery %.128r, from %s)",
        request.path,
        status,
        message,
        headers.get("X-GitHub-Event", ""),
        headers.get("X-GitHub-Delivery") or headers.get("webhook-id", ""),
        request.remote_addr,
    )
    return answer(message, status)
