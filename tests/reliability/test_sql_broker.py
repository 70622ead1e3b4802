"""The embedded default's broker when two workers of one queue start at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from kombu import Connection, Queue
from kombu.transport import sqlalchemy as kombu_sql

from bot.sql_broker import TRANSPORT


def test_a_queue_row_another_worker_made_meanwhile_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kombu looks for a queue's row, then inserts it; a second worker that looked before
    the first one's insert landed inserts it again. With kombu's own transport that is an
    IntegrityError and the worker exits; with gaffer's the second worker uses the row."""
    url = f"sqlite:///{tmp_path / 'broker.sqlite'}"
    with Connection(url, transport=TRANSPORT) as first:  # the other worker makes the row
        Queue("agent").bind(first.default_channel).declare()
    looked_up = kombu_sql.Channel._get_or_create

    def looked_too_early(channel: kombu_sql.Channel, queue: str) -> object:
        monkeypatch.setattr(kombu_sql.Channel, "_get_or_create", looked_up)
        channel.session.add(channel.queue_cls(queue))  # inserts what it did not find
        channel.session.commit()
        return None

    monkeypatch.setattr(kombu_sql.Channel, "_get_or_create", looked_too_early)
    with Connection(url, transport=TRANSPORT) as second:
        Queue("agent").bind(second.default_channel).declare()
        second.default_channel._put("agent", {"body": "still works"})
        assert second.default_channel._size("agent") == 1
