"""The web front answers GitHub's deliveries as Flask's route does.

`gaffer web` stores a signed delivery from its event loop (bot/asgi.py, GitHubIntake) and
hands every other request to the receiver's Flask route. Each case here is sent to both,
from an empty table, and must get the same answers and leave the same rows.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from sqlalchemy import delete, select

from bot.asgi import front
from bot.models import Delivery
from tests.support import WEBHOOK_SECRET, issue, labeled, repository, sign

BODY = json.dumps(labeled(repository("octo/widgets", "/nowhere.git"), issue(1))).encode()


def headers(body: bytes = BODY, **override: str | None) -> dict[str, str]:
    sent = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": "d-1",
        "X-GitHub-Hook-Installation-Target-ID": "4242",
        "X-Hub-Signature-256": sign(body, WEBHOOK_SECRET),
    }
    sent.update(override)
    return {name: value for name, value in sent.items() if value is not None}


CASES = [
    pytest.param([headers()], id="a signed delivery is stored and answered 202"),
    pytest.param([headers(), headers()], id="the same delivery again is answered 200, stored once"),
    pytest.param(
        [headers(), headers(**{"X-GitHub-Hook-Installation-Target-ID": "7"})],
        id="the same delivery id from another App is another delivery",
    ),
    pytest.param([headers(**{"X-Hub-Signature-256": None})], id="no signature is a 401"),
    pytest.param(
        [headers(**{"X-Hub-Signature-256": sign(BODY, "wrong")})], id="a wrong signature is a 401"
    ),
    pytest.param([headers(**{"X-GitHub-Delivery": None})], id="no delivery id is a 400"),
    pytest.param([headers(**{"Content-Type": "text/plain"})], id="a wrong content type is a 415"),
    pytest.param([headers(**{"X-GitHub-Event": "ping"})], id="ping answers pong"),
    pytest.param([headers(**{"X-GitHub-Event": "star"})], id="an ignored event is answered 200"),
]


def through_flask(app, requests: list[dict[str, str]]) -> list[tuple[int, Any]]:
    client = app.test_client()
    answers = [client.post("/webhooks/github", data=BODY, headers=each) for each in requests]
    return [(answer.status_code, answer.get_json()) for answer in answers]


def through_front(app, requests: list[dict[str, str]]) -> list[tuple[int, Any]]:
    served = front(app)
    return [asyncio.run(_post(served, each)) for each in requests]


async def _post(served: Any, sent: dict[str, str]) -> tuple[int, Any]:
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/webhooks/github",
        "root_path": "",
        "query_string": b"",
        "http_version": "1.1",
        "scheme": "http",
        "server": ("gaffer.test", 80),
        "client": ("127.0.0.1", 40000),
        "headers": [(k.lower().encode(), v.encode()) for k, v in sent.items()]
        + [(b"content-length", str(len(BODY)).encode())],
    }
    messages = [{"type": "http.request", "body": BODY, "more_body": False}]
    answer: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        answer.append(message)

    await served(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in answer if m["type"] == "http.response.body")
    return answer[0]["status"], json.loads(body)


def kept(app) -> list[tuple[str, str, str]]:
    with app.extensions["gaffer_db"].session() as session:
        rows = session.scalars(select(Delivery).order_by(Delivery.id))
        return [(row.hook_id, row.delivery_id, row.event) for row in rows]


@pytest.mark.parametrize("requests", CASES)
def test_the_front_answers_and_stores_as_flasks_route_does(
    make_app, settings, requests: list[dict[str, str]]
) -> None:
    by_flask = make_app(settings)
    flask_answers = through_flask(by_flask, requests)
    flask_rows = kept(by_flask)
    with by_flask.extensions["gaffer_db"].session() as session:
        session.execute(delete(Delivery))  # the front starts from the same empty table

    by_front = make_app(settings)
    assert through_front(by_front, requests) == flask_answers
    assert kept(by_front) == flask_rows


def test_the_front_stores_signed_deliveries_itself_and_hands_the_rest_to_flask(app) -> None:
    route = "webhooks.receive_github"
    flask_view, seen = app.view_functions[route], []
    app.view_functions[route] = lambda: seen.append(1) or flask_view()
    assert through_front(app, [headers()]) == [(202, {"message": "accepted"})]
    assert seen == []  # stored and answered on the loop
    unsigned = headers(**{"X-Hub-Signature-256": None, "X-GitHub-Delivery": "d-2"})
    assert through_front(app, [unsigned])[0][0] == 401
    assert seen == [1]  # refused by Flask's route, which logs why
