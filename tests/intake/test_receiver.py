"""The webhook receiver's own endpoints and bookkeeping.

What it answers GitHub's deliveries, and what it stores, is in tests/reliability/test_a_intake.py
and test_b_exactly_once.py.
"""

from __future__ import annotations

from sqlalchemy import func, select

from bot.models import Delivery
from tests.support import deliver, issue, labeled, repository

PAYLOAD = labeled(repository("octo/widgets", "/nowhere.git"), issue(1))


def test_health_check(client) -> None:
    assert client.get("/healthz").get_json() == {"status": "ok"}


def test_deliveries_are_counted_per_hook(app, client) -> None:
    for n in range(3):
        deliver(client, "issues", PAYLOAD, delivery_id=f"x-{n}")
    with app.extensions["gaffer_db"].session() as session:
        assert session.scalar(select(func.count()).select_from(Delivery)) == 3
