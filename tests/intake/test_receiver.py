"""The webhook receiver: what GitHub's deliveries get back, and what is stored."""

from __future__ import annotations

import dataclasses
import json

import pytest
from sqlalchemy import func, select

from bot.models import Delivery
from bot.settings import Settings, SettingsError
from tests.support import WEBHOOK_SECRET, deliver, issue, labeled, repository, sign

PAYLOAD = labeled(repository("octo/widgets", "/nowhere.git"), issue(1))


def stored(app) -> list[Delivery]:
    with app.extensions["gaffer_db"].session() as session:
        return list(session.scalars(select(Delivery)))


def test_signature_matches_githubs_published_example() -> None:
    assert sign(b"Hello, World!", "It's a Secret to Everybody") == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    )


def test_signed_delivery_is_stored_once_and_enqueued(app, client) -> None:
    response = deliver(client, "issues", PAYLOAD, delivery_id="d-1")
    assert response.status_code == 202
    [row] = stored(app)
    assert (row.event, row.action, row.delivery_id, row.hook_id) == (
        "issues",
        "labeled",
        "d-1",
        "4242",
    )
    assert row.enqueued_at is not None and row.processed_at is None


def test_redelivery_answers_200_and_stores_nothing_new(app, client) -> None:
    assert deliver(client, "issues", PAYLOAD, delivery_id="d-1").status_code == 202
    again = deliver(client, "issues", PAYLOAD, delivery_id="d-1")
    assert again.status_code == 200
    assert "duplicate" in again.get_json()["message"]
    assert len(stored(app)) == 1


def test_same_delivery_id_from_another_app_is_another_delivery(app, client) -> None:
    deliver(client, "issues", PAYLOAD, delivery_id="d-1", hook_id="1")
    deliver(client, "issues", PAYLOAD, delivery_id="d-1", hook_id="2")
    assert len(stored(app)) == 2


BODY = json.dumps(PAYLOAD).encode()
REFUSED = [
    pytest.param({"X-Hub-Signature-256": None}, 401, id="no signature is refused"),
    pytest.param({"X-Hub-Signature-256": sign(BODY, "wrong")}, 401, id="a wrong secret is refused"),
    pytest.param(
        {"X-Hub-Signature-256": sign(b"{}")}, 401, id="a signature over another body is refused"
    ),
    pytest.param(
        {"X-Hub-Signature-256": None, "X-Hub-Signature": "sha1=" + "0" * 40},
        401,
        id="an sha1-only signature is refused",
    ),
    pytest.param({"X-GitHub-Delivery": None}, 400, id="a missing delivery id is refused"),
    pytest.param(
        {"Content-Type": "application/x-www-form-urlencoded"},
        415,
        id="a form-encoded body is refused",
    ),
]


@pytest.mark.parametrize(("override", "status"), REFUSED)
def test_bad_deliveries_store_nothing(app, client, override, status) -> None:
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": "d-2",
        "X-Hub-Signature-256": sign(BODY),
    }
    headers.update(override)
    sent = {name: value for name, value in headers.items() if value is not None}
    response = client.post("/webhooks/github", data=BODY, headers=sent)
    assert response.status_code == status
    assert stored(app) == []


def test_non_json_body_is_refused(app, client) -> None:
    body = b"not json \xff"
    response = client.post(
        "/webhooks/github",
        data=body,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "issues",
            "X-GitHub-Delivery": "d-3",
            "X-Hub-Signature-256": sign(body),
        },
    )
    assert response.status_code == 400
    assert stored(app) == []


def test_body_over_the_cap_is_refused_with_413(make_app, settings: Settings) -> None:
    small = make_app(dataclasses.replace(settings, max_body_bytes=1024))
    body = json.dumps({"pad": "x" * 4096}).encode()
    response = small.test_client().post(
        "/webhooks/github",
        data=body,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "issues",
            "X-GitHub-Delivery": "d-4",
            "X-Hub-Signature-256": sign(body),
        },
    )
    assert response.status_code == 413
    assert stored(small) == []


def test_old_and_new_secrets_both_work_while_rotating(make_app, settings: Settings) -> None:
    rotating = make_app(dataclasses.replace(settings, webhook_secrets=("new", WEBHOOK_SECRET)))
    client = rotating.test_client()
    assert deliver(client, "issues", PAYLOAD, secret="new").status_code == 202
    assert deliver(client, "issues", PAYLOAD, secret=WEBHOOK_SECRET).status_code == 202
    assert deliver(client, "issues", PAYLOAD, secret="retired").status_code == 401


@pytest.mark.parametrize(
    ("event", "payload"),
    [
        pytest.param(
            "ping",
            {"zen": "Keep it logically awesome.", "hook_id": 1, "hook": {"app_id": 4242}},
            id="ping answers 200 and stores nothing",
        ),
        pytest.param("star", {"action": "created"}, id="an unhandled event is ignored cheaply"),
        pytest.param(
            "issues", {**PAYLOAD, "action": "pinned"}, id="an unhandled action is ignored"
        ),
    ],
)
def test_events_gaffer_does_not_act_on(app, client, event, payload) -> None:
    assert deliver(client, event, payload).status_code == 200
    assert stored(app) == []


def test_gaffer_refuses_to_start_without_a_webhook_secret() -> None:
    with pytest.raises(SettingsError, match="WEBHOOK_SECRET"):
        Settings.from_env({"GAFFER_HOME": "/tmp/x"})


def test_broker_down_keeps_the_delivery_in_the_outbox(make_app, settings: Settings) -> None:
    down = make_app(dataclasses.replace(settings, broker_url="redis://127.0.0.1:1/0"))
    down.extensions["gaffer_celery"].conf.broker_connection_timeout = 0.5
    response = deliver(down.test_client(), "issues", PAYLOAD, delivery_id="d-5")
    assert response.status_code == 202
    [row] = stored(down)
    assert row.enqueued_at is None and row.processed_at is None


def test_health_check(client) -> None:
    assert client.get("/healthz").get_json() == {"status": "ok"}


def test_deliveries_are_counted_per_hook(app, client) -> None:
    for n in range(3):
        deliver(client, "issues", PAYLOAD, delivery_id=f"x-{n}")
    with app.extensions["gaffer_db"].session() as session:
        assert session.scalar(select(func.count()).select_from(Delivery)) == 3
