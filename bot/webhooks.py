"""Receive GitHub webhooks: check the signature, store the delivery once, answer.

Storing is all a request does that lasts: the relay hands the stored row to the broker
afterwards (bot/outbox.py), so a broker that is down or slow never reaches GitHub's request.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from flask import Blueprint, Response, current_app, request
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


@dataclass(frozen=True)
class Verdict:
    """What the receiver makes of one request: a delivery row to store, or an answer alone."""

    status: int
    message: str
    row: dict[str, Any] | None = None
    refused: bool = False  # refused, and logged as such


GITHUB_PATH = "/webhooks/github"


@bp.post(GITHUB_PATH)
def receive_github() -> tuple[Response, int]:
    """Accept one GitHub delivery."""
    body = request.get_data(cache=True)
    secrets = current_app.config["GAFFER"].webhook_secrets
    verdict = check_github(lambda name: request.headers.get(name, ""), body, secrets)
    if verdict.row is not None:
        return answer(*stored_answer(current_app.extensions["gaffer_intake"].store(verdict.row)))
    if verdict.refused:
        return refuse(verdict.message, verdict.status)
    return answer(verdict.message, verdict.status)


def check_github(header: Callable[[str], str], body: bytes, secrets: Sequence[str]) -> Verdict:
    """Check one request to the GitHub receiver; header(name) is the header's value or "".

    The web front calls this on its event loop (bot/asgi.py), and Flask's route above for
    what the front hands it: both give one answer to one request.
    """
    if not _signed(body, header("x-hub-signature-256"), secrets):
        return Verdict(401, "signature missing or wrong", refused=True)
    event = header("x-github-event")
    delivery_id = header("x-github-delivery")
    if not event or not delivery_id:
        return Verdict(400, "X-GitHub-Event and X-GitHub-Delivery are required", refused=True)
    if header("content-type").split(";", 1)[0].strip().lower() != "application/json":
        return Verdict(415, "the webhook content type must be application/json", refused=True)
    try:
        payload = json_object(body)
    except BodyRefused as refused:
        return Verdict(400, str(refused), refused=True)
    if event == "ping":
        return Verdict(200, "pong")
    if not handles(event, payload.get("action")):
        return Verdict(200, f"{event} is not handled; ignored")
    # Delivery GUIDs are unique per hook or App, not across them.
    hook_id = (
        header("x-github-hook-installation-target-id") or header("x-github-hook-id") or "unknown"
    )
    row = delivery_row(
        source="github",
        hook_id=hook_id,
        delivery_id=delivery_id,
        event=event,
        action=payload.get("action"),
        body=body,
    )
    return Verdict(202, "accepted", row=row)


def _signed(body: bytes, signature: str, secrets: Sequence[str]) -> bool:
    # Only sha256 counts: an sha1-only signature is refused like a missing one.
    if not signature.startswith("sha256="):
        return False
    for secret in secrets:
        try:
            validate_event(body, signature=signature, secret=secret)
            return True
        except ValidationFailure:
            continue
    return False


def delivery_row(
    *, source: str, hook_id: str, delivery_id: str, event: str, action: str | None, body: bytes
) -> dict[str, Any]:
    """Return the deliveries row for a checked delivery, as the intake writer stores it."""
    return {
        "source": source,
        "hook_id": hook_id,
        "delivery_id": delivery_id,
        "event": event,
        "action": action,
        "payload": body.decode("utf-8", errors="replace"),
        "received_at": utcnow(),
        "attempts": 0,
    }


def store(**delivery: Any) -> tuple[Response, int]:
    """Store a delivery once (see delivery_row) and answer after the commit."""
    row = delivery_row(**delivery)
    return answer(*stored_answer(current_app.extensions["gaffer_intake"].store(row)))


def stored_answer(new: bool) -> tuple[str, int]:
    """The answer to a stored delivery: 202 when it is new, 200 when it was stored before."""
    return ("accepted", 202) if new else ("duplicate delivery; nothing to do", 200)


def json_object(body: bytes) -> dict[str, Any]:
    """Return the body as a JSON object at most MAX_JSON_DEPTH deep, or raise BodyRefused."""
    try:
        # orjson reads a GitHub payload in a quarter of the standard library's time. It is
        # stricter (lone surrogates, NaN, a depth limit of its own): what it refuses, the
        # standard library decides, so a body gaffer takes is one json.loads takes.
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        payload = _loads(body)
    if not isinstance(payload, dict):
        raise BodyRefused("the body is not a JSON object")
    if _deeper_than(payload, MAX_JSON_DEPTH):
        raise BodyRefused(_TOO_DEEP)
    return payload


def _loads(body: bytes) -> Any:
    try:
        return json.loads(body)
    except RecursionError:
        raise BodyRefused(_TOO_DEEP) from None
    except (ValueError, UnicodeDecodeError):
        raise BodyRefused("the body is not a JSON object") from None


def _deeper_than(value: Any, limit: int) -> bool:
    """Say whether objects and arrays nest more than limit levels, without recursing."""
    level = [value]
    for _ in range(limit):
        # The containers one level down. json.loads makes plain dicts and lists, so an exact
        # type check suffices, and costs a third of isinstance on a 20 KB payload.
        level = [
            child
            for item in level
            for child in (item.values() if type(item) is dict else item)
            if type(child) is dict or type(child) is list
        ]
        if not level:
            return False
    return True


def answer(message: str, status: int) -> tuple[Response, int]:
    # Built directly: Flask's JSON provider costs more than the rest of a duplicate's answer.
    return Response(json.dumps({"message": message}), mimetype="application/json"), status


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
