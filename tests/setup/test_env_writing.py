"""Saving an App in `.env` keeps every other setting as written and reads back unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from dotenv import dotenv_values

from bot.env_file import AppCredentials, AppSettingsPresent, save_app_credentials

APP = AppCredentials(
    app_id=42,
    slug="gaffer-acme",
    pem="-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----\n",
    webhook_secret="it's a $ecret \\ to everybody",
    client_id="Iv23liabc",
    client_secret="0123abcd",
)


def test_other_settings_stay_and_an_old_app_is_replaced_only_when_asked(tmp_path: Path) -> None:
    env_path = tmp_path / ".env"
    env_path.write_text(
        "# ours\nDATABASE_URL=postgresql://db/gaffer\n"
        'PRIVATE_KEY="-----BEGIN KEY-----\nold\n-----END KEY-----"\nGAFFER_PORT=9000'
    )
    with pytest.raises(AppSettingsPresent, match="already holds PRIVATE_KEY"):
        save_app_credentials(env_path, APP, replace=False)
    save_app_credentials(env_path, APP, replace=True)
    assert env_path.read_text().startswith("# ours\nDATABASE_URL=postgresql://db/gaffer\n")
    assert dotenv_values(env_path, interpolate=False) == {
        "DATABASE_URL": "postgresql://db/gaffer",
        "GAFFER_PORT": "9000",
        "APP_ID": "42",
        "PRIVATE_KEY_PATH": "gaffer-acme.private-key.pem",
        "WEBHOOK_SECRET": APP.webhook_secret,
        "GITHUB_CLIENT_ID": "Iv23liabc",
        "GITHUB_CLIENT_SECRET": "0123abcd",
    }
    assert (tmp_path / "gaffer-acme.private-key.pem").read_text() == APP.pem
