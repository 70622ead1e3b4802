"""When gaffer's background services last did their work: written by them, read by /healthz."""

from __future__ import annotations

from datetime import datetime

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
