"""A. GitHub's own example payloads of every event type: signed ones answered 2xx, unsigned 401."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from sqlalchemy import select

from bot.models import Delivery, Installation
from tasks.deliveries import process_delivery
from tests.support import deliver

EXAMPLES = (
    Path(__file__).resolve().parents[1]
    / "contract/node_modules/@octokit"
    / "webhooks-examples/api.github.com/index.json"
)


@cache
def examples() -> list[tuple[str, dict]]:
    """Every (event, payload) in @octokit/webhooks-examples, GitHub's community-kept set."""
    if not EXAMPLES.exists():
        raise RuntimeError("run `npm ci --prefix tests/contract` to install the examples")
    return [
        (group["name"], example)
        for group in json.loads(EXAMPLES.read_text())
        for example in group["examples"]
    ]


def test_every_example_payload_signed_is_answered_without_a_5xx(app, client) -> None:
    statuses = {deliver(client, event, payload).status_code for event, payload in examples()}
    assert statuses <= {200, 202}, statuses
    assert len(examples()) > 300


def test_every_example_payload_unsigned_is_refused_and_nothing_is_stored(app, client) -> None:
    for event, payload in examples():
        response = client.post(
            "/webhooks/github",
            data=json.dumps(payload),
            headers={
                "Content-Type": "application/json",
                "X-GitHub-Event": event,
                "X-GitHub-Delivery": "x",
            },
        )
        assert response.status_code == 401, event
    with app.extensions["gaffer_db"].session() as session:
        assert session.scalars(select(Delivery)).all() == []


@pytest.mark.parametrize("event", ["installation", "installation_repositories"])
def test_installation_examples_keep_the_installations_table_true(app, client, wctx, event) -> None:
    for name, payload in examples():
        if name == event:
            deliver(client, name, payload)
    with wctx.db.session() as session:
        ids = session.scalars(select(Delivery.id)).all()
    for delivery_id in ids:
        process_delivery(wctx, delivery_id=delivery_id)
    with wctx.db.session() as session:
        installations = session.scalars(select(Installation)).all()
        assert installations and all(i.account_login for i in installations)
        assert all(d.processed_at for d in session.scalars(select(Delivery)))
