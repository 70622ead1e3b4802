"""GitHub's user authorization for an App (the OAuth web flow), as the dashboard uses it.

A person's browser opens `/login/oauth/authorize`, GitHub shows "Authorize" for the account
the browser is signed in to, and redirects to the App's callback with a one-time `code`
and the `state` it was given; the App trades the code at `/login/oauth/access_token` for
a user token (`ghu_…`), with which it reads `/user` and `/user/installations` (double/app.py).
These pages are not the REST API: GitHub's OpenAPI contract and tokens do not apply.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from urllib.parse import urlencode

from flask import Blueprint, current_app, jsonify, redirect, request
from flask.typing import ResponseReturnValue
from markupsafe import escape

CLIENT_ID = "Iv1.gafferdouble"
CLIENT_SECRET = "double-client-secret"

bp = Blueprint("github_oauth", __name__)


@dataclass
class UserGrants:
    """Who the double's browser is signed in as, and the codes and tokens handed out."""

    browser_login: str = "maintainer"
    client_id: str = CLIENT_ID
    client_secret: str = field(default=CLIENT_SECRET, repr=False)
    codes: dict[str, tuple[str, str]] = field(default_factory=dict)  # code: login, redirect
    tokens: dict[str, str] = field(default_factory=dict)  # user token: login

    def login_of(self, token: str | None) -> str | None:
        """The person a user token was given to, if it is one."""
        return self.tokens.get(token or "")


def _grants() -> UserGrants:
    grants: UserGrants = current_app.extensions["github_double"].user_grants
    return grants


@bp.get("/favicon.ico")
def favicon() -> ResponseReturnValue:
    """Browsers ask every site for one; GitHub's is not the double's business."""
    return "", 404


@bp.get("/login/oauth/authorize")
def authorize_page() -> ResponseReturnValue:
    """The page asking the signed-in person to authorize the App."""
    grants = _grants()
    if request.args.get("client_id") != grants.client_id:
        return "The client_id is not an App's.", 404
    hidden = "".join(
        f'<input type="hidden" name="{key}" value="{escape(request.args.get(key, ""))}">'
        for key in ("client_id", "redirect_uri", "state")
    )
    return (
        f"<!doctype html><title>Authorize gaffer</title><h1>Authorize gaffer</h1>"
        f"<p>Signed in as <strong>{escape(grants.browser_login)}</strong></p>"
        f'<form method="post" action="/login/oauth/authorize">{hidden}'
        f'<button id="authorize" type="submit">Authorize</button></form>'
    )


@bp.post("/login/oauth/authorize")
def authorize() -> ResponseReturnValue:
    """ "Authorize" clicked: back to the App's callback with a one-time code."""
    grants = _grants()
    code = secrets.token_hex(10)
    redirect_uri = request.form["redirect_uri"]
    grants.codes[code] = (grants.browser_login, redirect_uri)
    query = urlencode({"code": code, "state": request.form.get("state", "")})
    return redirect(f"{redirect_uri}?{query}")


@bp.post("/login/oauth/access_token")
def access_token() -> ResponseReturnValue:
    """Trade a code for a user token; errors come back with 200, as GitHub sends them."""
    grants = _grants()
    form = request.form
    if (form.get("client_id"), form.get("client_secret")) != (
        grants.client_id,
        grants.client_secret,
    ):
        return jsonify(error="incorrect_client_credentials")
    granted = grants.codes.pop(form.get("code", ""), None)
    if granted is None:
        return jsonify(
            error="bad_verification_code",
            error_description="The code passed is incorrect or expired.",
        )
    token = f"ghu_{secrets.token_hex(16)}"
    grants.tokens[token] = granted[0]
    return jsonify(access_token=token, token_type="bearer", scope="")
