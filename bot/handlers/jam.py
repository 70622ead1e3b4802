"""Jam reports: one issue per Jam, labeled to start a plan, in the repository its route names."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from bot.context import Asker, Context, Facts
from bot.db import Database
from bot.event_router import Router
from bot.handlers.installations import InstallationUnknown
from bot.jam.enrich import enrich, enrichment_options
from bot.jam.models import JamReport, JamStatus
from bot.jam.report import (
    JAM_CREATED,
    Jam,
    issue_marker,
    issue_title,
    parse_routes,
    read_envelope,
    render_issue,
)
from bot.models import Installation, Repository, utcnow
from bot.repo_config import RepoConfigError, fetch_repo_config, load_repo_config

router = Router()
# An issue an earlier attempt opened for this Jam was touched within this window: Jam
# retries a message for about a day and a half, gaffer's own retries are quicker.
LOOKBACK = timedelta(days=3)
UNROUTABLE = "no jam route matches and jam.default_repository is not set"


def gather(payload: dict[str, Any], ask: Asker) -> Facts:
    """Open the Jam's issue before the transaction that records it.

    Opening looks first for an issue an earlier attempt opened (by the Jam's marker), so a
    delivery tried again opens no second one.
    """
    jam = read_envelope(payload)
    with ask.db.session() as session:
        report = session.scalar(select(JamReport).where(JamReport.jam_id == jam.id))
        if report is not None and report.issue_number is not None:
            return Facts()  # another delivery of this Jam opened its issue
        full_name = parse_routes(ask.settings.server_config).repository_for(jam)
        installed = _installation_of(session, full_name) if full_name else None
    if installed is None:
        return Facts()  # the handler says why no issue is opened, or asks who installed it
    try:
        return Facts(opened_issue=_open_issue(ask, jam, *installed))
    except Exception as error:
        # The delivery is retried; meanwhile the Jam's row says what went wrong.
        _note_failure(ask.db, jam, payload, installed[1], error)
        raise


@router.register(JAM_CREATED)
def jam_created(ctx: Context, payload: dict[str, Any]) -> None:
    """Record the Jam's issue (opened by `gather`), or why it has none."""
    jam = read_envelope(payload)
    report = ctx.session.scalar(select(JamReport).where(JamReport.jam_id == jam.id))
    if report is not None and report.issue_number is not None:
        return  # another delivery of this Jam opened its issue
    full_name = parse_routes(ctx.settings.server_config).repository_for(jam)
    installed = _installation_of(ctx.session, full_name) if full_name else None
    if full_name and installed is None and full_name.lower() not in ctx.looked_up:
        # The App may have been installed before gaffer first started: ask GitHub.
        raise InstallationUnknown(full_name)
    report = report or _new_report(ctx.session, jam, payload)
    report.repository = installed[1] if installed else full_name
    if full_name is None:
        _mark(report, JamStatus.UNROUTABLE, UNROUTABLE)
    elif installed is None:
        _mark(report, JamStatus.FAILED, f"gaffer is not installed on {full_name}")
    elif ctx.facts.opened_issue is None:
        # Installed between the two looks: the delivery is tried again, and opens it then.
        raise RuntimeError(f"the issue for Jam {jam.id} was not opened yet")
    else:
        report.issue_number = ctx.facts.opened_issue
        _mark(report, JamStatus.CREATED, None)


def _open_issue(ask: Asker, jam: Jam, installation_id: int, full_name: str) -> int:
    client = ask.github(installation_id, full_name)
    label = _trigger_label(client, ask.settings.server_config.get("defaults"))
    url, budget_s = enrichment_options(ask.settings.server_config)
    extra = enrich(jam.id, ask.settings.jam_token, url=url, budget_s=budget_s)
    title, body = render_issue(jam, enriched=extra.sections, unavailable=extra.unavailable)
    since = utcnow() - LOOKBACK
    return client.open_issue_once(title, body, [label], issue_marker(jam.id), since)


def _trigger_label(client: Any, defaults: Any) -> str:
    try:
        return fetch_repo_config(client, defaults).label
    except RepoConfigError:
        # The usual label still starts the lifecycle, whose first reply names the broken file.
        return load_repo_config(None, defaults).label


def _installation_of(session: Session, full_name: str) -> tuple[int, str] | None:
    """Return (installation id, exact full name) of a repository gaffer is installed on."""
    repository = session.scalars(
        select(Repository)
        .join(Installation, Installation.id == Repository.installation_id)
        .where(
            func.lower(Repository.full_name) == full_name.lower(),
            Repository.removed_at.is_(None),
            Installation.removed_at.is_(None),
            Installation.suspended.is_(False),
        )
    ).first()
    if repository is None or repository.installation_id is None:
        return None
    return repository.installation_id, repository.full_name


def _new_report(session: Session, jam: Jam, payload: dict[str, Any]) -> JamReport:
    report = JamReport(
        jam_id=jam.id, jam_url=jam.url, title=issue_title(jam), payload=json.dumps(payload)
    )
    session.add(report)
    return report


def _mark(report: JamReport, status: JamStatus, error: str | None) -> None:
    report.status = status
    report.error = error


def _note_failure(
    db: Database, jam: Jam, payload: dict[str, Any], full_name: str, error: Exception
) -> None:
    with db.session() as session:
        existing = session.scalar(select(JamReport).where(JamReport.jam_id == jam.id))
        report = existing or _new_report(session, jam, payload)
        report.repository = full_name
        _mark(report, JamStatus.FAILED, f"{type(error).__name__}: {error}"[:2000])
