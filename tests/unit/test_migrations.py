"""The migrations build exactly the schema the models describe, on both databases."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine

import bot.jam.models  # noqa: F401  (registers the Jam tables on the metadata)
from bot.models import Base


def test_the_migrated_database_matches_the_models(backend) -> None:
    engine = create_engine(backend.database_url)
    try:
        with engine.connect() as conn:
            differences = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    finally:
        engine.dispose()
    assert differences == []
