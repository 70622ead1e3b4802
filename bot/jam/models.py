"""One row per Jam gaffer has seen: where it went, its issue, or why it has none."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import DateTime, Enum, Integer, String, Text, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from bot.models import Base, utcnow


class JamStatus(StrEnum):
    CREATED = "created"
    UNROUTABLE = "unroutable"
    FAILED = "failed"


class JamReport(Base):
    """A Jam report and the issue made for it; the unique jam_id keeps it to one issue."""

    __tablename__ = "jam_reports"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    jam_id: Mapped[str] = mapped_column(String(200), unique=True)
    jam_url: Mapped[str | None] = mapped_column(Text)
    title: Mapped[str] = mapped_column(Text, default="")
    # NULL while no route matches the report.
    repository: Mapped[str | None] = mapped_column(String(200))
    issue_number: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[JamStatus] = mapped_column(
        Enum(
            JamStatus,
            values_callable=lambda e: [m.value for m in e],
            native_enum=False,
            length=20,
        ),
        index=True,
    )
    error: Mapped[str | None] = mapped_column(Text)
    payload: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )


def jam_reports(session: Session, status: JamStatus | None = None) -> list[JamReport]:
    """Return the Jams gaffer has seen, newest first, optionally only those in one status."""
    query = select(JamReport).order_by(JamReport.id.desc())
    if status is not None:
        query = query.where(JamReport.status == status)
    return list(session.scalars(query))
