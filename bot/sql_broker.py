"""kombu's SQL transport (the embedded default's broker), made safe for two workers that
start at once.

kombu creates a queue's row on first use: it looks for the row and inserts it when none is
found, with a lock that only holds within one process. Two workers of one queue starting
together can both find nothing; the second insert then fails on the unique name, and
Celery calls that unrecoverable and exits. Here the second insert gives way: its session
is rolled back and the row the first one made is used.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import sqlalchemy as kombu_sql
from sqlalchemy.exc import IntegrityError

TRANSPORT = "bot.sql_broker:Transport"
URL_PREFIX = "sqla+"  # what BROKER_URL starts with on the embedded default


class Channel(kombu_sql.Channel):
    def _get_or_create(self, queue: str) -> Any:
        try:
            return super()._get_or_create(queue)
        except IntegrityError:
            self.session.rollback()
            return super()._get_or_create(queue)


class Transport(kombu_sql.Transport):
    Channel = Channel
