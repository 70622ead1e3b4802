"""Webhook deliveries shaped like GitHub's, signed, for the double's users: tests and the demo."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import uuid
import zlib
from datetime import UTC, datetime
from typing import Any

_ids = itertools.count(9_000_001)


def sign(body: bytes, secret: str) -> str:
    """Return the X-Hub-Signature-256 header GitHub sends for body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def deliver(
    client: Any,
    event: str,
    payload: dict[str, Any],
    *,
    delivery_id: str | None = None,
    secret: str,
    hook_id: str = "4242",
    **headers: str,
) -> Any:
    """POST a signed delivery to the receiver the way GitHub does."""
    body = json.dumps(payload).encode()
    return client.post(
        "/webhooks/github",
        data=body,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
            "X-GitHub-Hook-ID": "1",
            "X-GitHub-Hook-Installation-Target-Type": "integration",
            "X-GitHub-Hook-Installation-Target-ID": hook_id,
            "X-Hub-Signature-256": sign(body, secret),
            "User-Agent": "GitHub-Hookshot/test",
            **headers,
        },
    )


def user(login: str, kind: str = "User") -> dict[str, Any]:
    return {
        "login": login,
        "id": zlib.crc32(login.encode()),  # the id the double's API gives the same login
        "type": kind,
        "html_url": f"https://github.test/{login}",
    }


def repository(full_name: str, clone_url: str, repo_id: int = 1296269) -> dict[str, Any]:
    owner, name = full_name.split("/")
    return {
        "id": repo_id,
        "name": name,
        "full_name": full_name,
        "private": False,
        "owner": user(owner, "Organization"),
        "clone_url": clone_url,
        "default_branch": "main",
        "html_url": f"https://github.test/{full_name}",
    }


def issue(
    number: int,
    *,
    title: str = "Widgets overflow",
    body: str = "They do.",
    author: str = "reporter",
    state: str = "open",
) -> dict[str, Any]:
    return {
        "id": 1000 + number,
        "number": number,
        "title": title,
        "body": body,
        "state": state,
        "locked": False,
        "user": user(author),
        "labels": [],
        "author_association": "CONTRIBUTOR",
    }


def labeled(
    repo: dict[str, Any],
    issue_: dict[str, Any],
    label: str = "gaffer",
    installation_id: int = 77,
    sender: str = "triager",
    action: str = "labeled",
) -> dict[str, Any]:
    """An `issues.labeled` payload (or `issues.unlabeled`, for the label taken away)."""
    return {
        "action": action,
        "issue": issue_,
        "label": {"id": 1, "name": label},
        "repository": repo,
        "sender": user(sender),
        "installation": {"id": installation_id, "node_id": "MDIz"},
    }


def commented(
    repo: dict[str, Any],
    issue_: dict[str, Any],
    body: str,
    *,
    login: str,
    comment_id: int | None = None,
    installation_id: int = 77,
    action: str = "created",
    kind: str = "User",
    created_at: datetime | None = None,
) -> dict[str, Any]:
    """An `issue_comment` payload, written now unless created_at says when."""
    written = (created_at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    number = comment_id or next(_ids)
    page = repo.get("html_url") or f"https://github.com/{repo['full_name']}"
    comment = {
        "id": number,
        "html_url": f"{page}/issues/{issue_['number']}#issuecomment-{number}",
        "body": body,
        "created_at": written,
        "updated_at": written,
        "user": user(login, kind),
        "author_association": "CONTRIBUTOR",
        "performed_via_github_app": None,
    }
    return {
        "action": action,
        "issue": issue_,
        "comment": comment,
        "repository": repo,
        "sender": user(login, kind),
        "installation": {"id": installation_id},
    }


def pull_request_event(
    repo: dict[str, Any],
    pull: dict[str, Any],
    *,
    action: str = "opened",
    installation_id: int = 77,
    sender: str | None = None,
) -> dict[str, Any]:
    """A `pull_request` payload for a pull request the double rendered."""
    return {
        "action": action,
        "number": pull["number"],
        "pull_request": pull,
        "repository": repo,
        "sender": user(sender or pull["user"]["login"], pull["user"]["type"]),
        "installation": {"id": installation_id},
    }


def review_submitted(
    repo: dict[str, Any],
    pull: dict[str, Any],
    body: str,
    *,
    login: str,
    state: str = "commented",
    installation_id: int = 77,
) -> dict[str, Any]:
    """A `pull_request_review` payload: someone submitted a review with a body."""
    number = next(_ids)
    review = {
        "id": number,
        "body": body,
        "state": state,
        "commit_id": pull["head"]["sha"],
        "html_url": f"{pull['html_url']}#pullrequestreview-{number}",
        "user": user(login),
        "author_association": "CONTRIBUTOR",
    }
    return {
        "action": "submitted",
        "review": review,
        "pull_request": pull,
        "repository": repo,
        "sender": user(login),
        "installation": {"id": installation_id},
    }


def review_comment(
    repo: dict[str, Any],
    pull: dict[str, Any],
    body: str,
    *,
    login: str,
    path: str,
    line: int,
    start_line: int | None = None,
    side: str = "RIGHT",
    installation_id: int = 77,
) -> dict[str, Any]:
    """A `pull_request_review_comment` payload: an inline comment on lines of the diff."""
    number = next(_ids)
    comment = {
        "id": number,
        "body": body,
        "path": path,
        "line": line,
        "start_line": start_line,
        "side": side,
        "commit_id": pull["head"]["sha"],
        "html_url": f"{pull['html_url']}#discussion_r{number}",
        "user": user(login),
        "author_association": "CONTRIBUTOR",
    }
    return {
        "action": "created",
        "comment": comment,
        "pull_request": pull,
        "repository": repo,
        "sender": user(login),
        "installation": {"id": installation_id},
    }


def check_run_rerequested(
    repo: dict[str, Any], run: dict[str, Any], *, login: str, installation_id: int
) -> dict[str, Any]:
    """The `check_run` event GitHub sends when someone clicks "Re-run" on a check run."""
    return {
        "action": "rerequested",
        "check_run": run,
        "repository": repo,
        "sender": user(login),
        "installation": {"id": installation_id},
    }


def check_suite_rerequested(
    repo: dict[str, Any], head_sha: str, *, login: str, installation_id: int, app_id: int
) -> dict[str, Any]:
    """The `check_suite` event GitHub sends for "Re-run all checks" on an App's suite."""
    suite = {"id": next(_ids), "head_sha": head_sha, "status": "completed", "app": {"id": app_id}}
    return {
        "action": "rerequested",
        "check_suite": suite,
        "repository": repo,
        "sender": user(login),
        "installation": {"id": installation_id},
    }
