"""GitHub's web pages (`{github_web_url}`), the few gaffer sends people to: the App
manifest flow's new-App page, for a person's account or an organization.

GitHub shows the manifest, the person names the App and clicks "Create GitHub App", and
GitHub redirects to the manifest's `redirect_url` with a one-time `code` (good for an
hour) and the `state` it was given; the double does all that on the POST. The code is
traded for the App's credentials at `POST /app-manifests/{code}/conversions` (double/app.py).
These pages are not the REST API: GitHub's OpenAPI contract and tokens do not apply.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from flask import Blueprint, Response, current_app, redirect, request
from flask.typing import ResponseReturnValue

# The account the double's browser is signed in to.
SIGNED_IN = "octo-operator"
CODE_LIFETIME = timedelta(hours=1)

bp = Blueprint("github_web", __name__)


@dataclass
class ManifestApp:
    """An App created from a manifest, with what its one-time code hands over."""

    id: int
    slug: str
    owner: str
    owner_type: str
    manifest: dict[str, Any]
    code: str
    code_expires_at: datetime
    pem: str = field(repr=False)
    webhook_secret: str = field(repr=False)
    client_id: str = ""
    client_secret: str = field(default="", repr=False)
    converted: bool = False


class ManifestApps:
    """The Apps the new-App page created, and their one-time codes."""

    def __init__(self) -> None:
        self.created: list[ManifestApp] = []

    def create(
        self, app_id: int, manifest: dict[str, Any], owner: str, owner_type: str
    ) -> ManifestApp:
        """Create the App a manifest describes, as "Create GitHub App" does."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ).decode()
        app = ManifestApp(
            id=app_id,
            slug=re.sub(r"[^a-z0-9]+", "-", manifest["name"].lower()).strip("-"),
            owner=owner,
            owner_type=owner_type,
            manifest=manifest,
            code=secrets.token_hex(20),
            code_expires_at=datetime.now(UTC) + CODE_LIFETIME,
            pem=pem,
            webhook_secret=secrets.token_hex(20),
            client_id=f"Iv23li{secrets.token_hex(7)}",
            client_secret=secrets.token_hex(20),
        )
        self.created.append(app)
        return app

    def convert(self, code: str) -> ManifestApp | None:
        """Return the App a live code names, once; None for an unknown, used or old code."""
        for app in self.created:
            if app.code == code and not app.converted:
                app.converted = True
                return app if datetime.now(UTC) < app.code_expires_at else None
        return None


@bp.post("/settings/apps/new")
def new_app() -> ResponseReturnValue:
    """POST /settings/apps/new: create the manifest's App for the signed-in person."""
    return _create_from_manifest(SIGNED_IN, "User")


@bp.post("/organizations/<org>/settings/apps/new")
def new_organization_app(org: str) -> ResponseReturnValue:
    """POST /organizations/{org}/settings/apps/new: create the manifest's App for an org."""
    return _create_from_manifest(org, "Organization")


def _create_from_manifest(owner: str, owner_type: str) -> ResponseReturnValue:
    try:
        manifest = json.loads(request.form["manifest"])
    except (KeyError, ValueError):
        return _refused("The form carries no manifest, or it is not JSON.")
    problem = _manifest_problem(manifest)
    if problem:
        return _refused(problem)
    state = current_app.extensions["github_double"]
    with state.lock:
        app = state.manifest_apps.create(state.next_id(), manifest, owner, owner_type)
    answer = {
        "code": app.code,
        **({"state": request.args["state"]} if "state" in request.args else {}),
    }
    separator = "&" if "?" in manifest["redirect_url"] else "?"
    return redirect(f"{manifest['redirect_url']}{separator}{urlencode(answer)}", code=302)


def _manifest_problem(manifest: Any) -> str | None:
    """Say what GitHub's new-App page would reject in a manifest, or None."""
    if not isinstance(manifest, dict):
        return "The manifest must be a JSON object."
    hook = manifest.get("hook_attributes", {})
    for name, value in (
        ("name", manifest.get("name")),
        ("url", manifest.get("url")),
        ("redirect_url", manifest.get("redirect_url")),
        ("hook_attributes.url", hook.get("url") if isinstance(hook, dict) else None),
    ):
        if not isinstance(value, str) or not value:
            return f"The manifest needs {name}."
    return None


def _refused(message: str) -> Response:
    return Response(f"<p>{message}</p>", status=422, content_type="text/html; charset=utf-8")
