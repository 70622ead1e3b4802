"""Signing in to the dashboard with GitHub: the App's own user authorization (OAuth web
flow), and the repositories the person may write to, which are all they are shown."""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable, Iterator
from functools import wraps
from typing import Any
from urllib.parse import urlencode

import requests
from flask import Response, current_app, redirect, render_template, request, session, url_for

from bot.settings import Settings

SIGNED_IN_FOR_S = 8 * 3600  # then the list of repositories is read again at a new sign-in
WRITE_ROLES = ("admin", "maintain", "push")
TIMEOUT_S = 10


class SignInFailed(Exception):
    """GitHub did not confirm who the person is; the message says what went wrong."""


def signed_in(view: Callable[..., Any]) -> Callable[..., Any]:
    """Send a person who has not signed in (or whose sign-in is old) to GitHub first."""

    @wraps(view)
    def guarded(**kwargs: Any) -> Any:
        if time.time() - session.get("signed_at", 0) > SIGNED_IN_FOR_S:
            session.clear()
            return redirect(url_for("dashboard.sign_in", next=request.full_path))
        return view(**kwargs)

    return guarded


def writable() -> frozenset[str]:
    """The repositories (lower-case owner/name) the signed-in person may write to."""
    return frozenset(session.get("repositories", ()))


def start() -> Response | str:
    """Send the person to GitHub to authorize the App, with a one-time state."""
    settings: Settings = current_app.config["GAFFER"]
    if not (settings.github_client_id and settings.github_client_secret):
        return render_template("dashboard/signin_off.html")
    session.clear()
    session["oauth_state"] = secrets.token_urlsafe(24)
    session["next"] = _local(request.args.get("next", ""))
    query = urlencode(
        {
            "client_id": settings.github_client_id,
            "redirect_uri": url_for("dashboard.signed_in_callback", _external=True),
            "state": session["oauth_state"],
        }
    )
    return redirect(f"{settings.github_web_url}/login/oauth/authorize?{query}")  # type: ignore[return-value]


def finish() -> Response:
    """Take GitHub's answer: check the state, exchange the code, learn who and what."""
    expected = session.pop("oauth_state", None)
    given = request.args.get("state", "")
    if not expected or not hmac.compare_digest(expected, given):
        raise SignInFailed("the sign-in link is stale or was not started here; sign in again")
    if "code" not in request.args:
        raise SignInFailed(f"GitHub refused: {request.args.get('error', 'no code was given')}")
    settings: Settings = current_app.config["GAFFER"]
    token = _exchange(settings, request.args["code"])
    login, repositories = _who(settings, token)
    after = session.pop("next", "") or url_for("dashboard.queue")
    session.clear()
    session.update(login=login, repositories=sorted(repositories), signed_at=time.time())
    return redirect(after)  # type: ignore[return-value]


def _exchange(settings: Settings, code: str) -> str:
    answer = requests.post(
        f"{settings.github_web_url}/login/oauth/access_token",
        data={
            "client_id": settings.github_client_id,
            "client_secret": settings.github_client_secret,
            "code": code,
        },
        headers={"Accept": "application/json"},
        timeout=TIMEOUT_S,
    )
    body = answer.json() if answer.ok else {}
    if "access_token" not in body:
        why = body.get("error_description") or body.get("error") or f"HTTP {answer.status_code}"
        raise SignInFailed(f"GitHub did not give a token: {why}")
    return str(body["access_token"])


def _who(settings: Settings, token: str) -> tuple[str, set[str]]:
    """The person's login and the repositories, among the App's installations, they write."""
    user = _get(settings, token, "/user").json()
    repositories = set()
    for installation in _pages(settings, token, "/user/installations", "installations"):
        path = f"/user/installations/{installation['id']}/repositories"
        for repository in _pages(settings, token, path, "repositories"):
            roles = repository.get("permissions") or {}
            if any(roles.get(role) for role in WRITE_ROLES):
                repositories.add(repository["full_name"].lower())
    return user["login"], repositories


def _pages(settings: Settings, token: str, path: str, key: str) -> Iterator[dict[str, Any]]:
    url: str | None = f"{settings.github_api_url}{path}?per_page=100"
    while url:
        answer = _get(settings, token, url)
        yield from answer.json()[key]
        url = answer.links.get("next", {}).get("url")


def _get(settings: Settings, token: str, path_or_url: str) -> requests.Response:
    url = path_or_url if "://" in path_or_url else settings.github_api_url + path_or_url
    answer = requests.get(
        url,
        headers={"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"},
        timeout=TIMEOUT_S,
    )
    if not answer.ok:
        raise SignInFailed(f"GitHub answered {answer.status_code} to {url.split('?')[0]}")
    return answer


def _local(target: str) -> str:
    """Only a path on this site may be gone back to after signing in (no open redirect)."""
    return target if target.startswith("/") and not target.startswith(("//", "/\\")) else ""
