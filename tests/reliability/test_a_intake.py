"""A. Intake: what the receiver answers GitHub, what it stores, and what the outbox's relay
then hands to the broker.

Also covered elsewhere: with a real worker, the receiver answers while the broker is
stopped, and the stored deliveries are processed once when it returns
(tests/faults/test_faults.py).
"""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from bot.models import Delivery, Installation
from bot.settings import Settings, SettingsError
from bot.webhooks import MAX_JSON_DEPTH
from tasks.deliveries import process_delivery
from tests.reliability.conftest import as_body, post_raw, stored
from tests.support import WEBHOOK_SECRET, deliver, issue, labeled, repository, sign

# Not a speed limit: only how long a test waits before calling the receiver hung.
HANG_GUARD_S = 60
PAYLOAD = labeled(repository("octo/widgets", "/nowhere.git"), issue(1))
BODY = as_body(PAYLOAD)


def test_signature_matches_githubs_published_example() -> None:
    assert sign(b"Hello, World!", "It's a Secret to Everybody") == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    )


def test_a_signed_delivery_is_stored_once_and_relayed(app, client, relayed) -> None:
    response = deliver(client, "issues", PAYLOAD, delivery_id="d-1")
    assert response.status_code == 202
    [row] = stored(app)
    assert (row.event, row.action, row.delivery_id, row.hook_id) == (
        "issues",
        "labeled",
        "d-1",
        "4242",
    )
    assert row.enqueued_at is None and row.processed_at is None  # in the outbox
    assert relayed() == [row.id]
    assert relayed() == []  # handed on once
    [row] = stored(app)
    assert row.enqueued_at is not None and row.processed_at is None


SIGNATURES = [
    pytest.param({"X-Hub-Signature-256": None}, id="no signature is refused with 401"),
    pytest.param(
        {"X-Hub-Signature-256": sign(BODY, "wrong")},
        id="a signature by a wrong secret is refused with 401",
    ),
    pytest.param(
        {"X-Hub-Signature-256": None, "X-Hub-Signature": "sha1=" + "0" * 40},
        id="an sha1-only signature is refused with 401",
    ),
    pytest.param(
        {"X-Hub-Signature-256": sign(b"{}")},
        id="a signature over another body is refused with 401",
    ),
    pytest.param(
        {"X-Hub-Signature-256": sign(BODY).removeprefix("sha256=")},
        id="a signature without its sha256 prefix is refused with 401",
    ),
]


@pytest.mark.parametrize("override", SIGNATURES)
def test_unsigned_or_wrongly_signed_deliveries_store_and_enqueue_nothing(
    app, client, relayed, override
) -> None:
    assert post_raw(client, BODY, **override).status_code == 401
    assert stored(app) == []
    assert relayed() == []


ROTATION = [
    pytest.param("new", 202, id="while rotating the new secret is accepted"),
    pytest.param(WEBHOOK_SECRET, 202, id="while rotating the old secret is accepted"),
    pytest.param("retired", 401, id="a retired secret is refused with 401 and nothing stored"),
]


@pytest.mark.parametrize(("secret", "status"), ROTATION)
def test_old_and_new_secrets_both_work_while_rotating(
    make_app, settings: Settings, secret: str, status: int
) -> None:
    rotating = make_app(dataclasses.replace(settings, webhook_secrets=("new", WEBHOOK_SECRET)))
    response = deliver(rotating.test_client(), "issues", PAYLOAD, secret=secret)
    assert response.status_code == status
    assert len(stored(rotating)) == (1 if status == 202 else 0)


STARTUP = [
    pytest.param({}, id="the app refuses to start without a webhook secret"),
    pytest.param({"WEBHOOK_SECRET": ""}, id="the app refuses to start with an empty secret"),
    pytest.param({"WEBHOOK_SECRET": " , "}, id="the app refuses to start with only blank secrets"),
]


@pytest.mark.parametrize("env", STARTUP)
def test_gaffer_refuses_to_start_without_a_webhook_secret(env: dict[str, str]) -> None:
    with pytest.raises(SettingsError, match="WEBHOOK_SECRET"):
        Settings.from_env({"GAFFER_HOME": "/tmp/x", **env})


NOT_JSON = b"not json \xff"
REQUESTS = [
    pytest.param(BODY, {"X-GitHub-Delivery": None}, 400, id="a missing delivery id is a 400"),
    pytest.param(BODY, {"X-GitHub-Event": None}, 400, id="a missing event name is a 400"),
    pytest.param(
        NOT_JSON, {"X-Hub-Signature-256": sign(NOT_JSON)}, 400, id="a non-JSON body is a 400"
    ),
    pytest.param(
        b"[1, 2]", {"X-Hub-Signature-256": sign(b"[1, 2]")}, 400, id="a JSON array is a 400"
    ),
    pytest.param(
        BODY,
        {"Content-Type": "application/x-www-form-urlencoded"},
        415,
        id="a form-encoded body is a 415",
    ),
]


@pytest.mark.parametrize(("body", "override", "status"), REQUESTS)
def test_malformed_deliveries_get_a_4xx_and_store_nothing(
    app, client, relayed, body: bytes, override, status: int
) -> None:
    assert post_raw(client, body, **override).status_code == status
    assert stored(app) == []
    assert relayed() == []


def test_a_body_over_the_size_cap_is_a_413_and_stores_nothing(make_app, settings: Settings) -> None:
    small = make_app(dataclasses.replace(settings, max_body_bytes=1024))
    body = json.dumps({"pad": "x" * 4096}).encode()
    response = post_raw(small.test_client(), body)
    assert response.status_code == 413
    assert stored(small) == []


def nested(depth: int, payload: dict[str, Any]) -> bytes:
    """Return payload with a key holding objects nested until the body is depth levels deep."""
    inner = b'{"x": ' * (depth - 1) + b"1" + b"}" * (depth - 1)
    return json.dumps(payload)[:-1].encode() + b', "x": ' + inner + b"}"


DEEP = [
    pytest.param(nested(10_000, PAYLOAD), id="objects nested 10000 levels deep are a 400"),
    pytest.param(
        b'{"x": ' + b"[" * 10_000 + b"]" * 10_000 + b"}",
        id="arrays nested 10000 levels deep are a 400",
    ),
    pytest.param(nested(MAX_JSON_DEPTH + 1, PAYLOAD), id="one level over the limit is a 400"),
]


@pytest.mark.parametrize("body", DEEP)
def test_a_signed_body_nested_too_deep_is_a_400_saying_so(app, client, relayed, body) -> None:
    response = post_raw(client, body)
    assert response.status_code == 400
    assert response.get_json()["message"] == (
        f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels"
    )
    assert stored(app) == [] and relayed() == []


def test_a_signed_body_as_deep_as_the_limit_is_stored_once(app, client, relayed) -> None:
    body = nested(MAX_JSON_DEPTH, PAYLOAD)
    assert post_raw(client, body).status_code == 202
    assert post_raw(client, body).status_code == 200  # the same delivery again
    [row] = stored(app)
    assert row.payload == body.decode() and len(relayed()) == 1


IGNORED = [
    pytest.param(
        "ping",
        {"zen": "Keep it logically awesome.", "hook_id": 1, "hook": {"app_id": 4242}},
        id="ping answers 200 with no side effects",
    ),
    pytest.param("star", {"action": "created"}, id="an event gaffer does not handle is ignored"),
    pytest.param(
        "issues", {**PAYLOAD, "action": "pinned"}, id="an action gaffer does not handle is ignored"
    ),
]


@pytest.mark.parametrize(("event", "payload"), IGNORED)
def test_events_gaffer_does_not_act_on_are_answered_200_and_ignored(
    app, client, github_http, relayed, event, payload
) -> None:
    assert deliver(client, event, payload).status_code == 200
    assert stored(app) == []
    assert relayed() == []
    assert github_http.requests == []


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """A Redis URL whose server accepts connections and never answers: a hung broker."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"


def answered(send: Callable[[], Any]) -> Any:
    """Return send()'s response, failing (not hanging) if it never comes."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(send).result(timeout=HANG_GUARD_S)


@pytest.mark.parametrize(
    "broker",
    [
        pytest.param("down", id="the receiver answers while the broker is down"),
        pytest.param("silent", id="the receiver answers while the broker hangs"),
    ],
)
def test_the_receiver_answers_while_the_broker_is_down_or_hangs(
    make_app, settings: Settings, silent_broker: str, broker: str
) -> None:
    url = silent_broker if broker == "silent" else "redis://127.0.0.1:1/0"
    web = make_app(dataclasses.replace(settings, broker_url=url))
    response = answered(lambda: deliver(web.test_client(), "issues", PAYLOAD, delivery_id="d-5"))
    assert response.status_code == 202
    [row] = stored(web)  # in the outbox, for the relay
    assert row.enqueued_at is None and row.processed_at is None


def test_the_receiver_answers_without_waiting_on_github_or_a_worker(
    app, client, github_http
) -> None:
    response = answered(lambda: deliver(client, "issues", PAYLOAD, delivery_id="d-6"))
    assert response.status_code == 202
    assert github_http.requests == []  # the receiver never asks GitHub, so it cannot wait on it
    [row] = stored(app)
    assert row.enqueued_at is None and row.processed_at is None  # left to the relay, not done here


# GitHub's own example payloads of every event type ------------------------------------

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
        response = post_raw(
            client, as_body(payload), **{"X-GitHub-Event": event, "X-Hub-Signature-256": None}
        )
        assert response.status_code == 401, event
    assert stored(app) == []


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
