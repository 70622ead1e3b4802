"""The manifest `gaffer setup` hands to GitHub's App manifest flow, built from app.yml.

GitHub takes `name`, `url`, `hook_attributes`, `redirect_url`, `callback_urls`, `public`,
`default_permissions` and `default_events` (and a few more gaffer does not set) from a
form field named `manifest`, posted to `{web}/settings/apps/new` or, for an organization,
`{web}/organizations/{org}/settings/apps/new`; the `state` query parameter comes back
with the one-time code on the redirect to `redirect_url`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import yaml

# The checkout's app.yml; an installed gaffer is given one with --app-yml.
APP_YML = Path(__file__).resolve().parents[1] / "app.yml"
# The dashboard's sign-in route (bot/dashboard/pages.py), served beside the webhook receiver.
SIGNIN_CALLBACK_PATH = "/dashboard/signin/callback"
# GitHub keeps at most this many user-authorization callback URLs per App.
MAX_CALLBACK_URLS = 10
_ORGANIZATION = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")


class ManifestError(Exception):
    """app.yml or an option cannot make a manifest GitHub would take."""


def read_app_yml(path: Path = APP_YML) -> dict[str, Any]:
    """Read app.yml, or say why it cannot be read."""
    try:
        loaded = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ManifestError(f"{path} cannot be read: {error}") from error
    if not isinstance(loaded, dict) or not loaded.get("url"):
        raise ManifestError(f"{path} is not an App manifest: it needs at least `url`")
    return loaded


def build_manifest(
    app_yml: dict[str, Any],
    *,
    webhook_url: str,
    redirect_url: str,
    name: str | None = None,
    callback_urls: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Return the manifest: app.yml's App, with this deployment's name and addresses; the
    dashboard's sign-in callback is on the webhook URL's host."""
    if not _web_address(webhook_url):
        raise ManifestError(
            f"--webhook-url must be an http(s) address GitHub can reach: {webhook_url!r}"
        )
    hook = urlsplit(webhook_url)
    signin = f"{hook.scheme}://{hook.netloc}{SIGNIN_CALLBACK_PATH}"
    callbacks = list(dict.fromkeys([signin, *app_yml.get("callback_urls", []), *callback_urls]))
    if len(callbacks) > MAX_CALLBACK_URLS or not all(_web_address(url) for url in callbacks):
        raise ManifestError(
            f"callback URLs must be at most {MAX_CALLBACK_URLS} http(s) addresses: {callbacks}"
        )
    manifest = {
        "name": name or app_yml.get("name", "gaffer"),
        "url": app_yml["url"],
        "description": app_yml.get("description", ""),
        "hook_attributes": {"url": webhook_url, "active": True},
        "redirect_url": redirect_url,
        "callback_urls": callbacks,
        "public": bool(app_yml.get("public", False)),
        "default_permissions": dict(app_yml.get("default_permissions", {})),
        "default_events": list(app_yml.get("default_events", [])),
    }
    return manifest


def new_app_url(web_url: str, state: str, organization: str | None = None) -> str:
    """Return GitHub's new-App page that takes the manifest, for a person or an organization."""
    if organization is not None and not _ORGANIZATION.fullmatch(organization):
        raise ManifestError(f"--org must be an organization's login, not {organization!r}")
    owner = f"/organizations/{quote(organization)}" if organization else ""
    return f"{web_url.rstrip('/')}{owner}/settings/apps/new?{urlencode({'state': state})}"


def _web_address(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)
