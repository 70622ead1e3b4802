"""Signing in to the dashboard: what is refused before GitHub is ever asked."""

from __future__ import annotations

import dataclasses
from urllib.parse import parse_qs, urlsplit

import pytest

from double.oauth import CLIENT_ID, CLIENT_SECRET


@pytest.fixture
def signing_in(make_app, settings):
    app = make_app(
        dataclasses.replace(
            settings,
            github_web_url="https://github.test",
            github_client_id=CLIENT_ID,
            github_client_secret=CLIENT_SECRET,
        )
    )
    return app.test_client()


def test_without_a_client_the_dashboard_says_how_to_turn_sign_in_on(client) -> None:
    page = client.get("/dashboard/signin").get_data(as_text=True)
    assert "GITHUB_CLIENT_ID" in page and "/dashboard/signin/callback" in page


def test_a_person_not_signed_in_is_sent_to_github_and_back_to_the_page(signing_in) -> None:
    first = signing_in.get("/dashboard/plans/7")
    assert first.status_code == 302 and "/dashboard/signin?next=" in first.location
    to_github = signing_in.get(first.location)
    assert to_github.location.startswith("https://github.test/login/oauth/authorize?")
    query = parse_qs(urlsplit(to_github.location).query)
    assert query["client_id"] == [CLIENT_ID] and len(query["state"][0]) >= 32
    with signing_in.session_transaction() as session:
        assert session["next"] == "/dashboard/plans/7?"


@pytest.mark.parametrize(
    "state",
    [pytest.param(None, id="no state"), pytest.param("guessed", id="a state not handed out")],
)
def test_a_callback_with_a_state_gaffer_did_not_hand_out_is_refused(signing_in, state) -> None:
    signing_in.get("/dashboard/signin")  # a sign-in started, with its own state
    query = {"code": "stolen-code", **({"state": state} if state else {})}
    answer = signing_in.get("/dashboard/signin/callback", query_string=query)
    assert answer.status_code == 403
    assert "stale or was not started here" in answer.get_data(as_text=True)
    assert signing_in.get("/dashboard/").status_code == 302  # still not signed in


@pytest.mark.parametrize("target", ["//evil.test/x", "/\\evil.test", "https://evil.test/"])
def test_after_sign_in_only_a_page_of_this_site_is_gone_back_to(signing_in, target) -> None:
    signing_in.get("/dashboard/signin", query_string={"next": target})
    with signing_in.session_transaction() as session:
        assert session["next"] == ""
