"""The REST API under /api/v1: plans, jobs, job logs and costs, read-only, for a token.

Tokens are listed in GAFFER_API_TOKENS (comma-separated); without any, the API answers
every request 401 saying how to turn it on. A request carries one as
`Authorization: Bearer <token>`, compared in constant time. The OpenAPI description is
served at /api/v1/openapi.json, without a token.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from datetime import UTC, datetime
from functools import wraps
from pathlib import Path
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from bot import views
from bot.cost_report import cost_totals
from bot.settings import Settings

bp = Blueprint("api", __name__, url_prefix="/api/v1")
DESCRIPTION = Path(__file__).parent / "api_openapi.json"


def _authorised(view: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(view)
    def guarded(**kwargs: Any) -> Any:
        settings: Settings = current_app.config["GAFFER"]
        if not settings.api_tokens:
            return _error("the API is off: set GAFFER_API_TOKENS to turn it on", 401)
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not any(hmac.compare_digest(given, token) for token in settings.api_tokens):
            return _error("a valid `Authorization: Bearer <token>` is required", 401)
        try:
            return view(**kwargs)
        except views.Unknown as unknown:
            return _error(str(unknown), 404)

    return guarded


@bp.get("/openapi.json")
def description() -> Response:
    return Response(DESCRIPTION.read_text(), mimetype="application/json")


@bp.get("/plans")
@_authorised
def list_plans() -> Response:
    with current_app.extensions["gaffer_db"].session() as session:
        found = views.plans(
            session, repository=request.args.get("repo"), state=request.args.get("state")
        )
    return jsonify(plans=found)


@bp.get("/plans/<int:plan_id>")
@_authorised
def show_plan(plan_id: int) -> Response:
    with current_app.extensions["gaffer_db"].session() as session:
        return jsonify(views.plan_detail(session, plan_id))


@bp.get("/jobs/<int:job_id>")
@_authorised
def show_job(job_id: int) -> Response:
    with current_app.extensions["gaffer_db"].session() as session:
        return jsonify(views.job_row(views.job(session, job_id)))


@bp.get("/jobs/<int:job_id>/log")
@_authorised
def job_log(job_id: int) -> Response:
    with current_app.extensions["gaffer_db"].session() as session:
        found = views.job(session, job_id)
        logs = views.job_logs(current_app.config["GAFFER"].home, found)
    text = "".join(f"==> {path.name} <==\n{path.read_text(errors='replace')}" for path in logs)
    return Response(text, mimetype="text/plain")


@bp.get("/costs")
@_authorised
def costs() -> Response | tuple[Response, int]:
    since = request.args.get("since")
    try:
        start = datetime.fromisoformat(since).replace(tzinfo=UTC) if since else None
    except ValueError:
        return _error(f"since must be a date such as 2026-11-30, not {since!r}", 400)
    with current_app.extensions["gaffer_db"].session() as session:
        totals = cost_totals(session, since=start, repository=request.args.get("repo"))
    return jsonify(totals.to_json())


def _error(message: str, status: int) -> tuple[Response, int]:
    return jsonify(message=message), status
