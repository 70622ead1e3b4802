"""Apply gaffer's database migrations."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from bot.db import Database

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    """Return an Alembic config pointed at gaffer's migrations and the given database."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str) -> None:
    """Bring the database at url up to the newest schema."""
    Database(url).dispose()  # creating it makes the SQLite folder when needed
    command.upgrade(alembic_config(url), "head")
