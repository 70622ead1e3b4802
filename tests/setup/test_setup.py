"""`gaffer setup` creates the GitHub App from app.yml through GitHub's manifest flow, once,
for this machine only, and saves it where `gaffer` reads it."""

from __future__ import annotations

import http.client
import ipaddress
import socket
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
import pytest
import requests
import yaml
from cryptography.hazmat.primitives import serialization
from dotenv import dotenv_values
from github import Auth

from bot.settings import Settings
from tests.setup.conftest import ROOT, WEBHOOK_URL, SetupProcess

APP_YML = yaml.safe_load((ROOT / "app.yml").read_text())


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def callback_of(setup: SetupProcess, github_server: str) -> str:
    """Go through the flow up to GitHub's redirect back; return the callback address."""
    back = setup.create_app(github_server)
    assert back.status_code == 302, back.text
    return back.headers["Location"]


def with_state(callback: str, state: str) -> str:
    parts = urlsplit(callback)
    query = {name: values[-1] for name, values in parse_qs(parts.query).items()}
    return parts._replace(query=urlencode({**query, "state": state})).geturl()


def non_loopback_address() -> str | None:
    """An address of this machine's own that is not loopback, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # a datagram socket sends nothing to connect
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if ipaddress.ip_address(address).is_loopback else address


def test_setup_saves_the_app_github_created_in_env_and_exits(
    start_setup, github, github_server: str
) -> None:
    setup = start_setup("--name", "gaffer-acme")
    callback = callback_of(setup, github_server)
    assert callback.startswith(f"http://127.0.0.1:{setup.port}/callback?")
    done = requests.get(callback, timeout=30)
    assert done.status_code == 200, done.text
    assert "gaffer-acme" in done.text
    assert setup.finish() == 0, setup.log()
    [created] = github.manifest_apps.created
    assert dotenv_values(setup.env_path) == {
        "APP_ID": str(created.id),
        "PRIVATE_KEY_PATH": "gaffer-acme.private-key.pem",
        "WEBHOOK_SECRET": created.webhook_secret,
        "GITHUB_CLIENT_ID": created.client_id,
        "GITHUB_CLIENT_SECRET": created.client_secret,
    }
    key = setup.folder / "gaffer-acme.private-key.pem"
    assert key.read_text() == created.pem
    assert (mode(setup.env_path), mode(key)) == (0o600, 0o600)


def test_github_receives_app_yml_with_the_webhook_url_and_the_way_back(
    start_setup, github, github_server: str
) -> None:
    setup = start_setup()
    requests.get(callback_of(setup, github_server), timeout=30)
    assert setup.finish() == 0, setup.log()
    [created] = github.manifest_apps.created
    assert created.manifest == {
        "name": APP_YML["name"],
        "url": APP_YML["url"],
        "description": APP_YML["description"],
        "hook_attributes": {"url": WEBHOOK_URL, "active": True},
        "redirect_url": f"http://127.0.0.1:{setup.port}/callback",
        "callback_urls": ["https://gaffer.example.com/dashboard/signin/callback"],
        "public": False,
        "default_permissions": APP_YML["default_permissions"],
        "default_events": APP_YML["default_events"],
    }
    assert (created.owner, created.converted) == ("octo-operator", True)


def test_an_organizations_app_is_created_on_its_new_app_page(
    start_setup, github, github_server: str
) -> None:
    setup = start_setup("--org", "octo-org")
    requests.get(callback_of(setup, github_server), timeout=30)
    assert setup.finish() == 0, setup.log()
    assert [(app.owner, app.owner_type) for app in github.manifest_apps.created] == [
        ("octo-org", "Organization")
    ]


def test_gaffer_reads_the_saved_app_and_signs_as_it(
    start_setup, github, github_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup = start_setup()
    requests.get(callback_of(setup, github_server), timeout=30)
    assert setup.finish() == 0, setup.log()
    [created] = github.manifest_apps.created
    monkeypatch.chdir(setup.folder)  # PRIVATE_KEY_PATH is relative to where gaffer starts
    settings = Settings.from_env(
        {**dotenv_values(".env"), "GAFFER_HOME": str(setup.folder / "home")}, calling_github=True
    )
    assert settings.webhook_secrets == (created.webhook_secret,)
    token = Auth.AppAuth(settings.app_id, settings.private_key).create_jwt()
    public_key = serialization.load_pem_private_key(created.pem.encode(), None).public_key()
    assert jwt.decode(token, public_key, algorithms=["RS256"])["iss"] == str(created.id)


def test_a_second_use_of_the_callback_is_refused(start_setup, github, github_server: str) -> None:
    setup = start_setup()
    callback = callback_of(setup, github_server)
    assert requests.get(callback, timeout=30).status_code == 200
    saved = setup.env_path.read_text()
    again = requests.get(callback, timeout=10)
    assert again.status_code == 410
    assert "works once and was used already" in again.text
    assert requests.get(setup.url, timeout=10).status_code == 410
    assert setup.finish() == 0, setup.log()
    assert setup.env_path.read_text() == saved


def test_a_wrong_state_is_refused_and_the_code_is_not_traded(
    start_setup, github, github_server: str
) -> None:
    setup = start_setup()
    callback = callback_of(setup, github_server)
    forged = requests.get(with_state(callback, "forged"), timeout=10)
    assert forged.status_code == 403
    assert "state does not match" in forged.text
    assert not setup.env_path.exists()
    assert [app.converted for app in github.manifest_apps.created] == [False]
    # A forgery does not use the page up: the real answer still goes through.
    assert requests.get(callback, timeout=30).status_code == 200
    assert setup.finish() == 0, setup.log()


def test_a_host_that_is_not_loopback_is_refused_against_dns_rebinding(
    start_setup, github, github_server: str
) -> None:
    setup = start_setup()
    rebound = {"Host": f"rebound.example:{setup.port}"}
    page = requests.get(setup.url, headers=rebound, timeout=10)
    assert page.status_code == 403
    assert "manifest" not in page.text  # neither the form nor its state
    callback = callback_of(setup, github_server)
    assert requests.get(callback, headers=rebound, timeout=10).status_code == 403
    assert [app.converted for app in github.manifest_apps.created] == [False]
    assert requests.get(callback, timeout=30).status_code == 200
    assert setup.finish() == 0, setup.log()


def test_a_request_from_an_address_that_is_not_loopback_is_refused(start_setup) -> None:
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    setup = start_setup()
    connection = http.client.HTTPConnection(
        "127.0.0.1", setup.port, timeout=10, source_address=(address, 0)
    )
    connection.request("GET", "/")
    answer = connection.getresponse()
    assert answer.status == 403
    assert b"manifest" not in answer.read()
    connection.close()
    assert requests.get(setup.url, timeout=10).status_code == 200  # not used up


def test_an_env_holding_an_app_is_kept_unless_forced(
    start_setup, setup_env: dict[str, str], operator_folder: Path, github, github_server: str
) -> None:
    env_path = operator_folder / ".env"
    env_path.write_text("DATABASE_URL=sqlite:///kept.sqlite\nAPP_ID=7\nWEBHOOK_SECRET=old\n")
    refused = subprocess.run(
        [sys.executable, "-m", "bot.cli", "setup", "--webhook-url", WEBHOOK_URL],
        cwd=operator_folder,
        env=setup_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"gaffer: {env_path} already holds APP_ID, WEBHOOK_SECRET: move it aside, "
        "or pass --force to replace them"
    )
    assert env_path.read_text().endswith("APP_ID=7\nWEBHOOK_SECRET=old\n")
    setup = start_setup("--force")
    requests.get(callback_of(setup, github_server), timeout=30)
    assert setup.finish() == 0, setup.log()
    [created] = github.manifest_apps.created
    saved = dotenv_values(env_path)
    assert (saved["DATABASE_URL"], saved["APP_ID"]) == ("sqlite:///kept.sqlite", str(created.id))
    assert saved["WEBHOOK_SECRET"] == created.webhook_secret


def test_github_refusing_the_code_saves_nothing_and_fails(
    start_setup, github, github_server: str
) -> None:
    setup = start_setup()
    github.fail_next("POST", r"^/app-manifests/[^/]+/conversions$", 500)
    failed = requests.get(callback_of(setup, github_server), timeout=30)
    assert failed.status_code == 502
    assert "GitHub refused the code (500 answer)" in failed.text
    assert setup.finish() == 1
    assert not setup.env_path.exists()
    assert list(setup.folder.glob("*.pem")) == []


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        pytest.param(
            ["--webhook-url", "ftp://gaffer.example.com/hook"],
            "gaffer: --webhook-url must be an http(s) address GitHub can reach: "
            "'ftp://gaffer.example.com/hook'",
            id="a webhook URL GitHub cannot post to",
        ),
        pytest.param(
            ["--webhook-url", WEBHOOK_URL, "--org", "../settings"],
            "gaffer: --org must be an organization's login, not '../settings'",
            id="an organization that is not a login",
        ),
    ],
)
def test_options_github_would_not_take_are_refused_before_serving(
    setup_env: dict[str, str], operator_folder: Path, options: list[str], refusal: str
) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "bot.cli", "setup", *options],
        cwd=operator_folder,
        env=setup_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (refused.returncode, refused.stderr.strip()) == (1, refusal)
