"""The GitHub double's manifest flow: the new-App page and the one-time code's conversion."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest

MANIFEST = {
    "name": "Gaffer Acme",
    "url": "https://gaffer.example.com",
    "hook_attributes": {"url": "https://gaffer.example.com/webhooks/github"},
    "redirect_url": "http://127.0.0.1:8001/callback",
    "default_permissions": {"issues": "write"},
    "default_events": ["issues"],
}


def create(client, manifest: dict | None = None, path: str = "/settings/apps/new"):
    form = {"manifest": json.dumps(manifest or MANIFEST)}
    return client.post(f"{path}?state=s3cret", data=form)


def code_of(answer) -> str:
    assert answer.status_code == 302, answer.text
    location = urlsplit(answer.headers["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == MANIFEST["redirect_url"]
    query = parse_qs(location.query)
    assert query["state"] == ["s3cret"]
    return query["code"][0]


@pytest.fixture
def client(github):
    return github.flask_app.test_client()


def test_the_code_is_traded_once_for_the_app_github_documents(github, client) -> None:
    code = code_of(create(client))
    traded = client.post(f"/app-manifests/{code}/conversions")  # no token, as GitHub takes it
    assert traded.status_code == 201, traded.json
    body = traded.json
    [created] = github.manifest_apps.created
    assert body["id"] == created.id
    assert (body["slug"], body["name"], body["owner"]["login"]) == (
        "gaffer-acme",
        "Gaffer Acme",
        "octo-operator",
    )
    assert {"node_id", "client_id", "client_secret", "webhook_secret", "pem"} <= body.keys()
    assert body["pem"].startswith("-----BEGIN RSA PRIVATE KEY-----")
    assert (body["permissions"], body["events"]) == ({"issues": "write"}, ["issues"])
    assert client.post(f"/app-manifests/{code}/conversions").status_code == 404
    assert github.contract_errors == []


def test_an_unknown_or_expired_code_is_not_found(github, client) -> None:
    assert client.post("/app-manifests/never-issued/conversions").status_code == 404
    code = code_of(create(client))
    github.manifest_apps.created[0].code_expires_at = datetime.now(UTC) - timedelta(seconds=1)
    assert client.post(f"/app-manifests/{code}/conversions").status_code == 404


def test_an_organizations_app_belongs_to_it(github, client) -> None:
    code_of(create(client, path="/organizations/octo-org/settings/apps/new"))
    assert github.manifest_apps.created[0].owner == "octo-org"


@pytest.mark.parametrize(
    ("manifest", "missing"),
    [
        pytest.param({**MANIFEST, "url": None}, "url", id="no homepage url"),
        pytest.param({**MANIFEST, "hook_attributes": {}}, "hook_attributes.url", id="no hook"),
        pytest.param({**MANIFEST, "redirect_url": ""}, "redirect_url", id="no way back"),
    ],
)
def test_a_manifest_github_would_not_take_is_refused(client, manifest: dict, missing: str) -> None:
    refused = create(client, manifest)
    assert refused.status_code == 422
    assert f"The manifest needs {missing}." in refused.text
