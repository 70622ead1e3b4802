"""Run Alembic migrations against the URL gaffer hands in."""

from alembic import context
from sqlalchemy import create_engine

import bot.jam.models  # noqa: F401 - registers the Jam table on Base
from bot.models import Base

url = context.config.get_main_option("sqlalchemy.url") or ""
if context.is_offline_mode():
    context.configure(url=url, target_metadata=Base.metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection, target_metadata=Base.metadata, render_as_batch=True
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()
