"""Connect to the database and hand out sessions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from sqlalchemy import create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import CursorResult, Engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql.expression import Executable


class Database:
    """An engine and its session factory."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = _make_engine(url)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """Yield a session that commits on success and rolls back on error."""
        with self.sessions() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self.engine.dispose()


def _make_engine(url: str) -> Engine:
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True)
    path = url.split("///", 1)[-1]
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 30})
    event.listen(engine, "connect", sqlite_pragmas)
    return engine


def sqlite_pragmas(connection: Any, _record: Any) -> None:
    """Set up a new SQLite connection of gaffer's (also the embedded broker's).

    The web server, the worker and beat share one file: WAL lets readers and one writer
    proceed together, and foreign keys are off by default in SQLite."""
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def rows_changed(session: Session, statement: Executable) -> int:
    """Execute an UPDATE or DELETE and return how many rows it changed."""
    result = cast(CursorResult[Any], session.execute(statement))
    return int(result.rowcount)


def insert_missing(session: Session, model: type[Any], **values: Any) -> None:
    """Insert a row unless its key exists, also when another transaction is adding it now.

    A plain get-then-add lets two transactions each find nothing and the second fail on
    commit; ON CONFLICT DO NOTHING waits for the first and then leaves its row alone.
    """
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    session.execute(dialect.insert(model).values(**values).on_conflict_do_nothing())


def without_password(url: str) -> str:
    """Return a database or broker URL fit to print: any password in it left out."""
    if "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    return f"{scheme}://…@{rest.split('@', 1)[1]}"
