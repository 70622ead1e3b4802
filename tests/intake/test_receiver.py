"""The webhook receiver's own endpoints and bookkeeping.

What it answers GitHub's deliveries, and what it stores, is in tests/reliability/test_a_intake.py
and test_b_exactly_once.py.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from sqlalchemy import func, select, update

from bot.heartbeats import RECONCILER, SCHEDULER, record_heartbeat
from bot.models import Delivery, Heartbeat, utcnow
from tasks.recovery.reconcile import reconcile
from tests.support import deliver, issue, labeled, repository, sign

PAYLOAD = labeled(repository("octo/widgets", "/nowhere.git"), issue(1))


def test_health_check_before_any_scheduler_tick_or_reconciler_pass(client) -> None:
    assert client.get("/healthz").get_json() == {
        "status": "ok",
        "scheduler_last_tick": None,
        "reconciler_last_pass": None,
        "scheduler": "never ran",
        "reconciler": "never ran",
    }
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.get_json()["status"] == "not ready: scheduler, reconciler not on time"


def test_ready_when_beat_and_the_reconciler_ran_lately_and_not_when_they_are_late(
    app, client
) -> None:
    db = app.extensions["gaffer_db"]
    record_heartbeat(db, SCHEDULER)
    record_heartbeat(db, RECONCILER)
    ready = client.get("/readyz")
    assert (ready.status_code, ready.get_json()["status"]) == (200, "ok")
    with db.session() as session:  # the scheduler's worker died four minutes ago
        session.execute(
            update(Heartbeat)
            .where(Heartbeat.name == SCHEDULER)
            .values(at=utcnow() - timedelta(minutes=4))
        )
    late = client.get("/readyz")
    assert late.status_code == 503
    assert late.get_json()["scheduler"] == "late"
    assert client.get("/healthz").status_code == 200  # the web part itself is alive


def test_not_ready_while_the_broker_cannot_be_reached(make_app, settings) -> None:
    away = make_app(dataclasses.replace(settings, broker_url="redis://127.0.0.1:1/0"))
    record_heartbeat(away.extensions["gaffer_db"], SCHEDULER)
    record_heartbeat(away.extensions["gaffer_db"], RECONCILER)
    ready = away.test_client().get("/readyz")
    assert (ready.status_code, ready.get_json()) == (503, {"status": "the broker is unreachable"})


def test_health_check_shows_the_reconcilers_last_pass(client, wctx) -> None:
    before = utcnow()
    reconcile(wctx)
    health = client.get("/healthz").get_json()
    assert before <= datetime.fromisoformat(health["reconciler_last_pass"]) <= utcnow()
    assert health["scheduler_last_tick"] is None  # only beat's scheduler writes that


def test_health_check_is_503_when_the_database_cannot_be_read(make_app, settings, tmp_path) -> None:
    unmigrated = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    lost = make_app(dataclasses.replace(settings, database_url=unmigrated))
    response = lost.test_client().get("/healthz")
    assert response.status_code == 503


def test_deliveries_are_counted_per_hook(app, client) -> None:
    for n in range(3):
        deliver(client, "issues", PAYLOAD, delivery_id=f"x-{n}")
    with app.extensions["gaffer_db"].session() as session:
        assert session.scalar(select(func.count()).select_from(Delivery)) == 3


def test_a_refused_delivery_is_logged_with_why(app, client, caplog) -> None:
    caplog.set_level("WARNING", logger="bot.webhooks")
    wrong = deliver(client, "issues", PAYLOAD, secret="not the secret", delivery_id="d-1")
    assert wrong.status_code == 401
    [record] = [r for r in caplog.records if r.name == "bot.webhooks"]
    assert record.getMessage() == (
        "refused a delivery to /webhooks/github with 401: signature missing or wrong "
        "(event 'issues', delivery 'd-1', from 127.0.0.1)"
    )
    caplog.clear()
    body = b'{"a": 1}'
    headers = {"X-GitHub-Event": "issues", "X-GitHub-Delivery": "d-2\x1b[2J"}
    headers["X-Hub-Signature-256"] = sign(body)
    client.post("/webhooks/github", data=body, headers=headers, content_type="text/plain")
    [record] = [r for r in caplog.records if r.name == "bot.webhooks"]
    assert "with 415: the webhook content type must be application/json" in record.getMessage()
    # What the sender wrote is quoted: a terminal escape reaches the log as text.
    assert "delivery 'd-2\\x1b[2J'" in record.getMessage()
