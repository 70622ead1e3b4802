"""Process one stored webhook delivery: route it, commit, then run its effects."""

from __future__ import annotations

import json
import logging

from bot.context import Asker, Context, Facts
from bot.handlers.installations import InstallationUnknown
from bot.handlers.routes import dispatch, gather
from bot.logs import about
from bot.models import Delivery, utcnow
from tasks.context import WorkerContext
from tasks.installations import discover_installation

log = logging.getLogger(__name__)

# Each of these events must say which installation and repository it concerns.
_NEEDS_REPOSITORY = {"issues", "issue_comment", "pull_request", "check_run", "check_suite"}


def process_delivery(wctx: WorkerContext, *, delivery_id: int) -> None:
    """Handle a delivery once; a redelivered task finds it processed and stops.

    A handler that names a repository gaffer has no installation row for rolls back; the
    installation is looked up with the App's JWT and the delivery handled again, once.
    """
    looked_up: frozenset[str] = frozenset()
    while True:
        try:
            with about(delivery=delivery_id):
                return _handle(wctx, delivery_id, looked_up)
        except InstallationUnknown as unknown:
            name = unknown.full_name.lower()
            if name in looked_up:
                raise RuntimeError(f"{unknown} after asking GitHub") from unknown
            discover_installation(wctx, unknown.full_name)
            looked_up |= {name}


def _handle(wctx: WorkerContext, delivery_id: int, looked_up: frozenset[str]) -> None:
    with wctx.db.session() as session:
        row = session.get(Delivery, delivery_id)
        if row is None or row.processed_at is not None:
            return
        event, payload = row.event, json.loads(row.payload)
    # What the handlers need from GitHub is asked now, with no transaction open.
    facts = (
        Facts()
        if _malformed(event, payload)
        else gather(event, payload, Asker(wctx.client, wctx.settings, wctx.db))
    )
    ctx: Context | None = None
    with wctx.db.session() as session:
        row = session.get(Delivery, delivery_id)
        if row is None or row.processed_at is not None:
            return
        row.processed_at = utcnow()
        row.attempts += 1
        problem = _malformed(row.event, payload)
        if problem:
            row.error = problem
            return
        ctx = Context(
            session,
            wctx.db,
            wctx.settings,
            wctx.client,
            wctx.send_task,
            looked_up=looked_up,
            delivery=row.id,
            facts=facts,
        )
        dispatch(ctx, row.event, payload)
    for effect in ctx.committed():
        effect()
    log.info("delivery %s (%s %s) handled", delivery_id, event, payload.get("action") or "")


def record_failure(wctx: WorkerContext, delivery_id: int, error: BaseException) -> None:
    """Note why a delivery failed; it stays unprocessed for the next attempt."""
    with wctx.db.session() as session:
        row = session.get(Delivery, delivery_id)
        if row is not None:
            row.attempts += 1
            row.error = f"{type(error).__name__}: {error}"[:2000]


def _malformed(event: str, payload: dict) -> str | None:
    if event in _NEEDS_REPOSITORY and not (
        isinstance(payload.get("installation"), dict)
        and isinstance(payload.get("repository"), dict)
    ):
        return f"{event} delivery without installation or repository; ignored"
    if event.startswith("installation") and not isinstance(payload.get("installation"), dict):
        return f"{event} delivery without installation; ignored"
    return None
