"""When gaffer's background services last did their work: written by them, read by /healthz."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite

from bot.db import Database
from bot.models import Heartbeat, aware, utcnow

SCHEDULER = "scheduler"
RECONCILER = "reconciler"


def record_heartbeat(db: Database, name: str) -> None:
    """Note that the service called name did its work just now."""
    now = utcnow()
    with db.session() as session:
        dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
        session.execute(
            dialect.insert(Heartbeat)
            .values(name=name, at=now)
            .on_conflict_do_update(index_elements=["name"], set_={"at": now})
        )


def last_heartbeats(db: Database) -> dict[str, datetime]:
    """Return each service's last heartbeat by name; a service never seen is absent."""
    with db.session() as session:
        rows = session.execute(select(Heartbeat.name, Heartbeat.at)).all()
    return {name: aware(at) for name, at in rows}


def punctuality(beats: dict[str, datetime], reconcile_every_s: float) -> dict[str, str]:
    """Say of beat and the reconciler whether each is on time, late or never ran: on time
    means it ran within three reconciler intervals, at least three minutes."""
    allowed = timedelta(seconds=max(3 * reconcile_every_s, 180))
    now = utcnow()
    shown = {}
    for name in (SCHEDULER, RECONCILER):
        last = beats.get(name)
        # Never: no worker with --beat has run since the database was made, or it cannot run.
        shown[name] = "never ran" if last is None else "late" if now - last > allowed else "on time"
    return shown
