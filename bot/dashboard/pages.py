"""The dashboard's pages: the queue, a plan's timeline, a job's flight recorder, the costs.

Every page shows only what concerns repositories the signed-in person may write to; a plan
or job of any other repository is answered as not found.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from flask import Blueprint, Flask, Response, abort, current_app, render_template
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from bot import views
from bot.cost_report import cost_totals
from bot.dashboard import charts, insights, signin
from bot.dashboard.bundle import make_bundle
from bot.models import Job, JobState, Plan, Repository, aware, utcnow
from bot.settings import Settings
from bot.states import ACTIVE

bp = Blueprint("dashboard", __name__, url_prefix="/dashboard", template_folder="templates")
LIVE_REFRESH_S = 3  # how often a running job's page reloads its transcript


def init_app(app: Flask, settings: Settings) -> None:
    """Serve the dashboard under /dashboard, its session signed with a key of its own."""
    app.config.update(
        SECRET_KEY=_session_key(settings),
        SESSION_COOKIE_NAME="gaffer_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        PERMANENT_SESSION_LIFETIME=timedelta(seconds=signin.SIGNED_IN_FOR_S),
    )
    app.register_blueprint(bp)


def _session_key(settings: Settings) -> str:
    """GAFFER_SESSION_SECRET, else one derived from the client secret, so that every web
    process of a deployment signs alike; without either, nobody can sign in anyway."""
    if settings.session_secret:
        return settings.session_secret
    if settings.github_client_secret:
        derived = hmac.new(
            settings.github_client_secret.encode(), b"gaffer dashboard session", hashlib.sha256
        )
        return derived.hexdigest()
    return secrets.token_hex(32)


@bp.app_template_filter("when")
def when(moment: datetime | str | None) -> str:
    """A time as people read it, to the second, in UTC; nothing for none."""
    if not moment:
        return ""
    parsed = datetime.fromisoformat(moment) if isinstance(moment, str) else moment
    return f"{aware(parsed).astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


@bp.get("/signin")
def sign_in() -> Any:
    return signin.start()


@bp.get("/signin/callback")
def signed_in_callback() -> Any:
    return signin.finish()


@bp.post("/signout")
def sign_out() -> Any:
    signin.session.clear()
    return render_template("dashboard/signed_out.html")


@bp.errorhandler(signin.SignInFailed)
def sign_in_failed(error: signin.SignInFailed) -> tuple[str, int]:
    return render_template("dashboard/signin_failed.html", why=str(error)), 403


@bp.get("/")
@signin.signed_in
def queue() -> str:
    repositories = signin.writable()
    with _db().session() as session:
        plans = _plans(session, repositories, active=True)
        jobs = _jobs(session, repositories, (JobState.QUEUED, JobState.RUNNING))
    now = utcnow()
    parked = [job for job, _ in jobs if job.parked_until and aware(job.parked_until) > now]
    return render_template(
        "dashboard/queue.html",
        plans=plans,
        by_state=Counter((plan["repository"], plan["state"]) for plan in plans),
        states=sorted({plan["state"] for plan in plans}),
        running=[(job, ref) for job, ref in jobs if job.state == JobState.RUNNING],
        waiting=[(job, ref) for job, ref in jobs if job.state == JobState.QUEUED],
        parked=parked,
        slots=Counter(job.agent or "default" for job, _ in jobs if job.state == JobState.RUNNING),
    )


@bp.get("/plans/<int:plan_id>")
@signin.signed_in
def plan(plan_id: int) -> str:
    with _db().session() as session:
        detail = _readable(lambda: views.plan_detail(session, plan_id))
    return render_template("dashboard/plan.html", plan=detail, web=_settings().github_web_url)


@bp.get("/jobs/<int:job_id>")
@signin.signed_in
def job(job_id: int) -> str:
    detail, folder = _job(job_id)
    files = {path.name: path.read_text(errors="replace") for path in _files(folder)}
    return render_template(
        "dashboard/job.html",
        job=detail,
        prompt=files.pop("prompt.md", None),
        files=files,
        on_this_machine=folder.is_dir(),
        refresh=LIVE_REFRESH_S if detail["state"] in ("queued", "running") else None,
    )


@bp.get("/jobs/<int:job_id>/bundle")
@signin.signed_in
def bundle(job_id: int) -> Response:
    detail, folder = _job(job_id)
    with _db().session() as session:
        plan_row = views.plan_detail(session, detail["plan_id"])
    name = f"gaffer-job-{job_id}.json"
    return Response(
        make_bundle(detail, plan_row, folder),
        mimetype="application/json",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@bp.get("/costs")
@signin.signed_in
def costs() -> str:
    repositories = signin.writable()
    with _db().session() as session:
        totals = cost_totals(session, repositories=repositories)
        leads = insights.lead_times(session, repositories)
        passes = insights.first_pass(session, repositories)
    return render_template(
        "dashboard/costs.html",
        totals=totals,
        leads=leads,
        passes=passes,
        by_repository=charts.bars("dollars by repository", _floats(totals.by_repository), _dollars),
        by_agent=charts.bars("dollars by agent and model", _floats(totals.by_agent), _dollars),
        by_day=charts.bars("dollars by day", _floats(totals.by_day), _dollars),
        lead_chart=charts.stacked(
            "lead time from label to merge",
            {lead.reference: (lead.people_s, lead.machine_s, lead.parked_s) for lead in leads},
            ("waiting for people", "machine time", "parked"),
            _duration,
        ),
        pass_chart=charts.bars(
            "first-pass check success",
            {each.agent: 100 * each.rate for each in passes},
            lambda percent: f"{percent:.0f}%",
        ),
    )


def _job(job_id: int) -> tuple[dict[str, Any], Any]:
    with _db().session() as session:
        found = _readable(lambda: views.job(session, job_id))
        _readable(lambda: views.plan_detail(session, found.plan_id))  # the repository's check
        return views.job_row(found), views.job_folder(_settings().home, found)


def _readable(read: Any) -> Any:
    """What read() returns, if it belongs to a writable repository; 404 otherwise."""
    try:
        found = read()
    except views.Unknown:
        abort(404)
    repository = found["repository"] if isinstance(found, dict) else None
    if repository is not None and repository.lower() not in signin.writable():
        abort(404)
    return found


def _plans(session: Session, repositories: frozenset[str], *, active: bool) -> list[dict]:
    rows = [row for row in views.plans(session) if row["repository"].lower() in repositories]
    return [row for row in rows if not active or row["state"] in ACTIVE]


def _jobs(
    session: Session, repositories: frozenset[str], states: tuple[JobState, ...]
) -> list[tuple[Job, str]]:
    query = (
        select(Job, Repository.full_name, Plan.issue_number)
        .join(Plan, Plan.id == Job.plan_id)
        .join(Repository, Repository.id == Plan.repository_id)
        .where(Job.state.in_(states), func.lower(Repository.full_name).in_(repositories))
        .order_by(Job.id)
    )
    return [(job, f"{name}#{number}") for job, name, number in session.execute(query)]


def _files(folder: Any) -> list[Any]:
    if not folder.is_dir():
        return []
    return sorted(
        (path for path in folder.iterdir() if path.is_file()),
        key=lambda path: (path.name != "prompt.md", path.stat().st_mtime, path.name),
    )


def _floats(values: dict[str, Decimal]) -> dict[str, float]:
    return {key: float(value) for key, value in values.items()}


def _dollars(value: float) -> str:
    return f"${value:,.4f}"


def _duration(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {rest:02d}s"


def _db() -> Any:
    return current_app.extensions["gaffer_db"]


def _settings() -> Settings:
    settings: Settings = current_app.config["GAFFER"]
    return settings
