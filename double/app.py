"""An in-memory GitHub REST API (the subset gaffer uses), checked against GitHub's contract."""

from __future__ import annotations

import base64
import itertools
import re
import subprocess
import threading
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jwt
from flask import Blueprint, Flask, Response, current_app, g, jsonify, request
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException

from . import contract, oauth, web

APP_EVENTS = [
    "issues",
    "issue_comment",
    "check_run",
    "check_suite",
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
]
REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")
# The Checks API takes at most this many annotations in one request.
MAX_ANNOTATIONS = 50
INSTALLATION_PERMISSIONS = {
    "checks": "write",
    "contents": "write",
    "issues": "write",
    "members": "read",
    "metadata": "read",
    "pull_requests": "write",
}
# The collaborator-permission API folds the five roles into admin, write and read.
PERMISSION_OF_ROLE = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
}
FIXED_TIME = "2024-01-01T00:00:00Z"


def _now() -> datetime:
    """Return the current UTC time to the second."""
    return datetime.now(UTC).replace(microsecond=0)


def _iso(moment: datetime | None) -> str | None:
    """Format a time the way GitHub does."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment else None


# --------------------------------------------------------------------------- records


@dataclass
class Label:
    """A repository label."""

    id: int
    name: str
    color: str = "ededed"
    description: str | None = None


@dataclass
class Repository:
    """A repository whose git data lives in a bare origin on disk."""

    id: int
    full_name: str
    origin: Path
    default_branch: str
    installation_id: int
    private: bool = False
    labels: dict[str, Label] = field(default_factory=dict)
    protected_branches: set[str] = field(default_factory=set)


@dataclass
class Issue:
    """An issue, or the issue half of a pull request."""

    id: int
    repo: str
    number: int
    title: str
    body: str | None
    author: str
    author_type: str = "User"
    labels: list[str] = field(default_factory=list)
    state: str = "open"
    state_reason: str | None = None
    is_pull: bool = False
    created_at: datetime = field(default_factory=_now)
    updated_at: datetime = field(default_factory=_now)
    closed_at: datetime | None = None
    parent_id: int | None = None  # the issue this one is a sub-issue of
    sub_issue_order: int = 0
    blocked_by: list[int] = field(default_factory=list)  # ids of the issues blocking it


@dataclass
class Comment:
    """An issue comment."""

    id: int
    repo: str
    issue_number: int
    body: str
    author: str
    author_type: str = "User"
    author_association: str = "NONE"
    via_app: bool = False
    created_at: datetime = field(default_factory=_now)
    updated_at: datetime = field(default_factory=_now)
    # What the comment said before each edit, oldest first (GitHub keeps an edit history).
    earlier: list[str] = field(default_factory=list)


@dataclass
class Reaction:
    """A reaction on an issue comment."""

    id: int
    comment_id: int
    content: str
    user: str
    user_type: str = "Bot"
    created_at: datetime = field(default_factory=_now)


@dataclass
class CheckRun:
    """A check run created by the App."""

    id: int
    repo: str
    name: str
    head_sha: str
    status: str = "queued"
    conclusion: str | None = None
    external_id: str | None = None
    details_url: str | None = None
    output: dict[str, Any] = field(default_factory=dict)
    annotations: list[dict[str, Any]] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    started_at: str | None = None
    completed_at: str | None = None


@dataclass
class PullRequest:
    """The pull-request half of a pull request; title, body and state live on its Issue."""

    id: int
    repo: str
    number: int
    head_ref: str
    head_sha: str
    base_ref: str
    draft: bool = False
    merged: bool = False
    maintainer_can_modify: bool = False
    # The repository holding the head branch when it is not the base's own: a fork.
    head_repo: str | None = None

    def head_full_name(self) -> str:
        return self.head_repo or self.repo


@dataclass
class Delivery:
    """A webhook delivery as the App's delivery log shows it."""

    id: int
    guid: str
    event: str
    action: str | None = None
    status_code: int = 200
    redelivery: bool = False
    delivered_at: datetime = field(default_factory=_now)


@dataclass
class IssuedToken:
    """An installation access token the double handed out."""

    token: str
    installation_id: int
    expires_at: datetime


@dataclass
class Fault:
    """A scripted failure for requests matching a method and a path pattern."""

    method: str
    path_pattern: re.Pattern[str]
    status: int
    headers: dict[str, str]
    remaining: int
    after_success: bool


@dataclass(frozen=True)
class RecordedRequest:
    """One request the double received."""

    method: str
    path: str
    query: dict[str, str]
    json: Any
    token: str | None


# --------------------------------------------------------------------------- git origin


class GitOrigin:
    """A bare repository standing in for GitHub's copy: read, and a branch deleted."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _git(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        """Run git in the origin and return the finished process."""
        return subprocess.run(["git", "-C", str(self.path), *args], capture_output=True)

    def _text(self, *args: str) -> str | None:
        """Run git and return its stripped output, or None when it fails."""
        done = self._git(*args)
        return done.stdout.decode().strip() if done.returncode == 0 else None

    def resolve(self, ref: str) -> str | None:
        """Return the commit SHA a ref or SHA names, or None."""
        if not ref or ref.startswith("-"):
            return None
        return self._text("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")

    def branch_sha(self, branch: str) -> str | None:
        """Return the SHA at the tip of a branch, or None."""
        return self.resolve(f"refs/heads/{branch}")

    def delete_ref(self, ref: str) -> bool:
        """Delete a ref (`refs/heads/x`); False when there is no such ref."""
        if ref.startswith("-") or self.resolve(ref) is None:
            return False
        return self._git("update-ref", "-d", ref).returncode == 0

    def object_type(self, commit: str, path: str) -> str | None:
        """Return 'blob' or 'tree' for a path at a commit, or None when missing."""
        return self._text("cat-file", "-t", f"{commit}:{path}")

    def object_sha(self, commit: str, path: str) -> str:
        """Return the object SHA of a path at a commit."""
        return self._text("rev-parse", f"{commit}:{path}") or ""

    def read_blob(self, commit: str, path: str) -> bytes:
        """Return a file's bytes at a commit."""
        return self._git("cat-file", "blob", f"{commit}:{path}").stdout

    def list_tree(self, commit: str, path: str) -> list[tuple[str, str, int, str]]:
        """Return (type, sha, size, name) for each entry of a directory at a commit."""
        entries = []
        for line in (self._text("ls-tree", "-l", f"{commit}:{path}") or "").splitlines():
            meta, name = line.split("\t", 1)
            _mode, kind, sha, size = meta.split()
            entries.append((kind, sha, 0 if size == "-" else int(size), name))
        return entries

    def parents(self, sha: str) -> list[str]:
        """Return the parent SHAs of a commit."""
        return (self._text("rev-parse", f"{sha}^@") or "").split()

    def count_commits(self, revision_range: str) -> int:
        """Return how many commits a range such as 'a..b' holds."""
        return int(self._text("rev-list", "--count", revision_range) or 0)

    def merge_base(self, base: str, head: str) -> str:
        """Return the best common ancestor of two commits."""
        return self._text("merge-base", base, head) or ""

    def commits(self, revision_range: str) -> list[tuple[str, str]]:
        """Return (sha, message) for each commit of a range, oldest first."""
        out = self._git("log", "--reverse", "--format=%H%x00%B%x1e", revision_range).stdout
        records = [r.strip("\n") for r in out.decode().split("\x1e") if r.strip()]
        return [(sha, message) for sha, _, message in (r.partition("\x00") for r in records)]

    def changed_files(self, base: str, head: str) -> list[tuple[str, int, int]]:
        """Return (path, additions, deletions) for each file changed between two commits."""
        changes = []
        for line in (self._text("diff", "--numstat", base, head) or "").splitlines():
            added, deleted, path = line.split("\t", 2)
            changes.append((path, int(added.strip("-") or 0), int(deleted.strip("-") or 0)))
        return changes


# --------------------------------------------------------------------------- JSON shapes


class GitHubJson:
    """Render the double's records as the JSON GitHub sends, URLs rooted at `api`."""

    def __init__(self, state: GitHubState, api: str) -> None:
        self.state = state
        self.api = api.rstrip("/")
        self.web = state.web_url

    def repo_url(self, full_name: str) -> str:
        """Return a repository's API URL."""
        return f"{self.api}/repos/{full_name}"

    def user(self, login: str, kind: str = "User") -> dict[str, Any]:
        """Render a user, organization or bot account."""
        user_id = zlib.crc32(login.encode())
        return {
            "login": login,
            "id": user_id,
            "node_id": _node_id("U", user_id),
            "type": kind,
            "site_admin": False,
            "url": f"{self.api}/users/{quote(login)}",
            "html_url": f"{self.web}/{quote(login)}",
            "avatar_url": f"https://avatars.githubusercontent.com/u/{user_id}",
        }

    def app(self) -> dict[str, Any]:
        """Render the GitHub App."""
        return {
            "id": self.state.app_id,
            "slug": self.state.app_slug,
            "node_id": _node_id("A", self.state.app_id),
            "name": self.state.app_slug,
            "owner": self.user("gaffer-org", "Organization"),
            "description": "",
            "external_url": "https://gaffer.invalid",
            "html_url": f"{self.web}/apps/{self.state.app_slug}",
            "created_at": FIXED_TIME,
            "updated_at": FIXED_TIME,
            "permissions": INSTALLATION_PERMISSIONS,
            "events": APP_EVENTS,
        }

    def manifest_app(self, app: web.ManifestApp) -> dict[str, Any]:
        """Render an App made from a manifest, with what its code hands over once."""
        manifest = app.manifest
        return {
            "id": app.id,
            "slug": app.slug,
            "node_id": _node_id("A", app.id),
            "client_id": app.client_id,
            "owner": self.user(app.owner, app.owner_type),
            "name": manifest["name"],
            "description": manifest.get("description") or None,
            "external_url": manifest["url"],
            "html_url": f"{self.web}/apps/{app.slug}",
            "created_at": FIXED_TIME,
            "updated_at": FIXED_TIME,
            "permissions": manifest.get("default_permissions", {}),
            "events": manifest.get("default_events", []),
            "client_secret": app.client_secret,
            "webhook_secret": app.webhook_secret,
            "pem": app.pem,
        }

    def installation(self, installation_id: int) -> dict[str, Any]:
        """Render an installation of the App."""
        owners = sorted(
            r.full_name.split("/")[0]
            for r in self.state.repos.values()
            if r.installation_id == installation_id
        )
        account = owners[0] if owners else "gaffer-org"
        return {
            "id": installation_id,
            "app_id": self.state.app_id,
            "app_slug": self.state.app_slug,
            "account": self.user(account, "Organization"),
            "target_id": zlib.crc32(account.encode()),
            "target_type": "Organization",
            "permissions": INSTALLATION_PERMISSIONS,
            "events": APP_EVENTS,
            "repository_selection": "selected",
            "access_tokens_url": f"{self.api}/app/installations/{installation_id}/access_tokens",
            "repositories_url": f"{self.api}/installation/repositories",
            "html_url": f"{self.web}/organizations/{account}/settings/installations/"
            f"{installation_id}",
            "created_at": FIXED_TIME,
            "updated_at": FIXED_TIME,
            "single_file_name": None,
            "suspended_at": None,
            "suspended_by": None,
        }

    def repository(self, repo: Repository) -> dict[str, Any]:
        """Render a repository; its clone_url is the bare origin on disk."""
        owner, name = repo.full_name.split("/")
        url = self.repo_url(repo.full_name)
        return {
            "id": repo.id,
            "node_id": _node_id("R", repo.id),
            "name": name,
            "full_name": repo.full_name,
            "owner": self.user(owner, "Organization"),
            "private": repo.private,
            "visibility": "private" if repo.private else "public",
            "fork": False,
            "archived": False,
            "disabled": False,
            "url": url,
            "html_url": f"{self.web}/{repo.full_name}",
            "clone_url": str(repo.origin),
            "git_url": repo.origin.as_uri(),
            "default_branch": repo.default_branch,
            "issues_url": f"{url}/issues{{/number}}",
            "pulls_url": f"{url}/pulls{{/number}}",
            "created_at": FIXED_TIME,
            "updated_at": FIXED_TIME,
            "pushed_at": FIXED_TIME,
        }

    def label(self, repo: Repository, name: str) -> dict[str, Any]:
        """Render a repository label."""
        label = repo.labels[name.lower()]
        return {
            "id": label.id,
            "node_id": _node_id("L", label.id),
            "url": f"{self.repo_url(repo.full_name)}/labels/{quote(label.name)}",
            "name": label.name,
            "color": label.color,
            "default": False,
            "description": label.description,
        }

    def issue(self, issue: Issue) -> dict[str, Any]:
        """Render an issue, with its pull_request links when it is a pull request."""
        repo = self.state.repo_record(issue.repo)
        url = f"{self.repo_url(repo.full_name)}/issues/{issue.number}"
        html = f"{self.web}/{repo.full_name}/{'pull' if issue.is_pull else 'issues'}/"
        html += str(issue.number)
        rendered = {
            "id": issue.id,
            "node_id": _node_id("I", issue.id),
            "url": url,
            "repository_url": self.repo_url(repo.full_name),
            "labels_url": f"{url}/labels{{/name}}",
            "comments_url": f"{url}/comments",
            "events_url": f"{url}/events",
            "html_url": html,
            "number": issue.number,
            "state": issue.state,
            "state_reason": issue.state_reason,
            "title": issue.title,
            "body": issue.body,
            "user": self.user(issue.author, issue.author_type),
            "labels": [self.label(repo, name) for name in issue.labels],
            "assignee": None,
            "assignees": [],
            "milestone": None,
            "locked": False,
            "comments": len(self.state.comment_records(issue.repo, issue.number)),
            "created_at": _iso(issue.created_at),
            "updated_at": _iso(issue.updated_at),
            "closed_at": _iso(issue.closed_at),
            "author_association": "NONE",
        }
        if issue.is_pull:
            rendered["pull_request"] = {
                "url": f"{self.repo_url(repo.full_name)}/pulls/{issue.number}",
                "html_url": html,
                "diff_url": f"{html}.diff",
                "patch_url": f"{html}.patch",
            }
        return rendered

    def comment(self, comment: Comment) -> dict[str, Any]:
        """Render an issue comment, with its reaction counts."""
        repo_url = self.repo_url(comment.repo)
        url = f"{repo_url}/issues/comments/{comment.id}"
        counts = dict.fromkeys(REACTIONS, 0)
        for reaction in self.state.reaction_records(comment.id):
            counts[reaction.content] += 1
        return {
            "id": comment.id,
            "node_id": _node_id("IC", comment.id),
            "url": url,
            "html_url": f"{self.web}/{comment.repo}/issues/{comment.issue_number}"
            f"#issuecomment-{comment.id}",
            "issue_url": f"{repo_url}/issues/{comment.issue_number}",
            "body": comment.body,
            "user": self.user(comment.author, comment.author_type),
            "created_at": _iso(comment.created_at),
            "updated_at": _iso(comment.updated_at),
            "author_association": comment.author_association,
            "performed_via_github_app": self.app() if comment.via_app else None,
            "reactions": {"url": f"{url}/reactions", "total_count": sum(counts.values()), **counts},
        }

    def reaction(self, reaction: Reaction) -> dict[str, Any]:
        """Render a reaction."""
        return {
            "id": reaction.id,
            "node_id": _node_id("RE", reaction.id),
            "user": self.user(reaction.user, reaction.user_type),
            "content": reaction.content,
            "created_at": _iso(reaction.created_at),
        }

    def check_run(self, run: CheckRun) -> dict[str, Any]:
        """Render a check run."""
        url = f"{self.repo_url(run.repo)}/check-runs/{run.id}"
        return {
            "id": run.id,
            "node_id": _node_id("CR", run.id),
            "name": run.name,
            "head_sha": run.head_sha,
            "external_id": run.external_id,
            "url": url,
            "html_url": f"{self.web}/{run.repo}/runs/{run.id}",
            "details_url": run.details_url,
            "status": run.status,
            "conclusion": run.conclusion,
            "started_at": run.started_at,
            "completed_at": run.completed_at,
            "output": {
                "title": run.output.get("title"),
                "summary": run.output.get("summary"),
                "text": run.output.get("text"),
                "annotations_count": len(run.annotations),
                "annotations_url": f"{url}/annotations",
            },
            "check_suite": {"id": run.id},
            "app": self.app(),
            "pull_requests": [],
        }

    def pull(self, pull: PullRequest) -> dict[str, Any]:
        """Render a pull request."""
        repo = self.state.repo_record(pull.repo)
        issue = self.state.issue_record(pull.repo, pull.number)
        origin = GitOrigin(repo.origin)
        url = f"{self.repo_url(repo.full_name)}/pulls/{pull.number}"
        html = f"{self.web}/{repo.full_name}/pull/{pull.number}"
        return {
            "id": pull.id,
            "node_id": _node_id("PR", pull.id),
            "url": url,
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "issue_url": f"{self.repo_url(repo.full_name)}/issues/{pull.number}",
            "number": pull.number,
            "state": issue.state,
            "locked": False,
            "title": issue.title,
            "body": issue.body,
            "user": self.user(issue.author, issue.author_type),
            "labels": [self.label(repo, name) for name in issue.labels],
            "created_at": _iso(issue.created_at),
            "updated_at": _iso(issue.updated_at),
            "closed_at": _iso(issue.closed_at),
            "merged_at": _iso(issue.closed_at) if pull.merged else None,
            "merge_commit_sha": None,
            "draft": pull.draft,
            "merged": pull.merged,
            "mergeable": None,
            "maintainer_can_modify": pull.maintainer_can_modify,
            "author_association": "NONE",
            "head": self._pull_end(
                self.state.repo_record(pull.head_full_name()),
                pull.head_ref,
                current_head_sha(pull, issue, self.state),
            ),
            "base": self._pull_end(repo, pull.base_ref, origin.branch_sha(pull.base_ref) or ""),
        }

    def _pull_end(self, repo: Repository, ref: str, sha: str) -> dict[str, Any]:
        """Render the head or base of a pull request."""
        owner = repo.full_name.split("/")[0]
        return {
            "label": f"{owner}:{ref}",
            "ref": ref,
            "sha": sha,
            "user": self.user(owner, "Organization"),
            "repo": self.repository(repo),
        }

    def delivery(self, delivery: Delivery) -> dict[str, Any]:
        """Render a webhook delivery summary."""
        ok = 200 <= delivery.status_code < 300
        return {
            "id": delivery.id,
            "guid": delivery.guid,
            "delivered_at": _iso(delivery.delivered_at),
            "redelivery": delivery.redelivery,
            "duration": 0.05,
            "status": "OK" if ok else f"Invalid HTTP Response: {delivery.status_code}",
            "status_code": delivery.status_code,
            "event": delivery.event,
            "action": delivery.action,
            "installation_id": None,
            "repository_id": None,
            "throttled_at": None,
        }


def _node_id(kind: str, number: int) -> str:
    """Return an opaque global node id."""
    return base64.b64encode(f"{kind}{number}".encode()).decode()


def current_head_sha(pull: PullRequest, issue: Issue, state: GitHubState) -> str:
    """Return a PR's head SHA: the head branch's tip while open, frozen once closed."""
    if issue.state != "open":
        return pull.head_sha
    origin = GitOrigin(state.repo_record(pull.head_full_name()).origin)
    return origin.branch_sha(pull.head_ref) or pull.head_sha


# --------------------------------------------------------------------------- state


class GitHubState:
    """Everything the double knows, with helpers tests use to arrange and inspect it."""

    def __init__(self, *, app_id: int = 1, app_slug: str = "gaffer") -> None:
        self.lock = threading.RLock()
        self.flask_app: Flask | None = None
        self.app_id = app_id
        self.app_slug = app_slug
        self.bot_login = f"{app_slug}[bot]"
        self.api_url = "https://api.github.com"  # roots URLs in helper results
        self.web_url = "https://github.com"
        self.token_lifetime = timedelta(hours=1)
        self.permissions: dict[tuple[str, str], str] = {}
        # (org, team slug) -> {login: "active" or "pending"}
        self.team_members: dict[tuple[str, str], dict[str, str]] = {}
        self.requests: list[RecordedRequest] = []
        self.contract_errors: list[str] = []
        self.unimplemented: list[str] = []
        self.issued_tokens: list[IssuedToken] = []
        self.redelivered: list[int] = []
        self.repos: dict[str, Repository] = {}
        self.issues: dict[tuple[str, int], Issue] = {}
        self.all_comments: dict[int, Comment] = {}
        self.all_reactions: list[Reaction] = []
        self.all_check_runs: dict[int, CheckRun] = {}
        self.all_pulls: dict[tuple[str, int], PullRequest] = {}
        self.deliveries: list[Delivery] = []
        self.faults: list[Fault] = []
        self.manifest_apps = web.ManifestApps()
        self.user_grants = oauth.UserGrants()
        self._ids = itertools.count(1001)

    def next_id(self) -> int:
        """Return a fresh id, unique across all objects."""
        return next(self._ids)

    def _json(self) -> GitHubJson:
        """Return a renderer for helper results."""
        return GitHubJson(self, self.api_url)

    # Arrange ---------------------------------------------------------------

    def add_repo(
        self,
        full_name: str,
        origin_path: Path | str,
        default_branch: str = "main",
        installation_id: int = 1,
        *,
        private: bool = False,
    ) -> dict[str, Any]:
        """Register a repository served from a bare git origin; return it as GitHub would."""
        with self.lock:
            repo = Repository(
                self.next_id(),
                full_name,
                Path(origin_path),
                default_branch,
                installation_id,
                private,
            )
            self.repos[full_name.lower()] = repo
            return self._json().repository(repo)

    def set_origin(self, full_name: str, origin_path: Path | str) -> None:
        """Point a repository at another bare git origin."""
        with self.lock:
            self.repo_record(full_name).origin = Path(origin_path)

    def protect_branch(self, full_name: str, branch: str) -> None:
        """Mark a branch as protected."""
        with self.lock:
            self.repo_record(full_name).protected_branches.add(branch)

    def add_issue(
        self,
        full_name: str,
        number: int,
        title: str,
        body: str | None,
        author: str,
        labels: Iterable[str] = (),
    ) -> dict[str, Any]:
        """Add an issue opened by a person; return it as GitHub would."""
        with self.lock:
            issue = Issue(self.next_id(), full_name, number, title, body, author)
            self.issues[(full_name.lower(), number)] = issue
            for name in labels:
                self.attach_label(issue, name)
            return self._json().issue(issue)

    def add_label(self, full_name: str, number: int, name: str) -> None:
        """Put a label on an issue as a person would, before GitHub sends `issues.labeled`."""
        with self.lock:
            self.attach_label(self.issue_record(full_name, number), name)

    def sub_issue_numbers(self, full_name: str, number: int) -> list[int]:
        """The numbers of an issue's sub-issues, in the order they were added."""
        with self.lock:
            parent = self.issue_record(full_name, number)
            return [each.number for each in self.children_of(parent)]

    def blocking_numbers(self, full_name: str, number: int) -> list[int]:
        """The numbers of the issues an issue is blocked by."""
        with self.lock:
            found = self.issue_record(full_name, number)
            return [self.issue_by_id(each).number for each in found.blocked_by]

    def children_of(self, parent: Issue) -> list[Issue]:
        children = [each for each in self.issues.values() if each.parent_id == parent.id]
        return sorted(children, key=lambda each: each.sub_issue_order)

    def issue_by_id(self, issue_id: int) -> Issue:
        """Return the issue with this id, or raise KeyError."""
        for each in self.issues.values():
            if each.id == issue_id:
                return each
        raise KeyError(issue_id)

    def take_label(self, full_name: str, number: int, name: str) -> None:
        """Take a label off an issue as a person would, before GitHub sends `unlabeled`."""
        with self.lock:
            found = self.issue_record(full_name, number)
            found.labels = [each for each in found.labels if each.lower() != name.lower()]

    def open_pull_as(
        self,
        full_name: str,
        *,
        login: str,
        head: str,
        base: str,
        title: str,
        body: str | None = None,
        head_repo: str | None = None,
    ) -> dict[str, Any]:
        """Open a pull request as a person, from head (in head_repo, a fork, when given)."""
        with self.lock:
            repo = self.repo_record(full_name)
            source = self.repo_record(head_repo) if head_repo else repo
            head_sha = new_pull_head(self, repo, source, head, base)
            number = self.next_issue_number(repo.full_name)
            self.issues[(repo.full_name.lower(), number)] = Issue(
                self.next_id(), repo.full_name, number, title, body, login, is_pull=True
            )
            pull = PullRequest(self.next_id(), repo.full_name, number, head, head_sha, base)
            pull.head_repo = source.full_name if source is not repo else None
            self.all_pulls[(repo.full_name.lower(), number)] = pull
            return self._json().pull(pull)

    def merge_pull(self, full_name: str, number: int) -> dict[str, Any]:
        """Merge a pull request into its base on the origin, as the merge button does;
        return the merged pull request as GitHub renders it."""
        from double.origin import merge_on_origin

        with self.lock:
            repo = self.repo_record(full_name)
            pull = self.all_pulls[(repo.full_name.lower(), number)]
            issue = self.issue_record(full_name, number)
        merge_on_origin(Path(repo.origin), pull.head_ref, f"Merge pull request #{number}")
        with self.lock:
            pull.merged, issue.state = True, "closed"
            issue.closed_at = datetime.now(UTC)
            return self._json().pull(pull)

    def add_human_comment(
        self,
        full_name: str,
        number: int,
        *,
        login: str,
        body: str,
        author_association: str = "CONTRIBUTOR",
    ) -> dict[str, Any]:
        """Add a comment a person wrote (not through the App); return it as GitHub would."""
        with self.lock:
            self.issue_record(full_name, number)
            comment = Comment(
                self.next_id(),
                full_name,
                number,
                body,
                login,
                author_association=author_association,
            )
            self.all_comments[comment.id] = comment
            return self._json().comment(comment)

    def add_delivery(
        self,
        event: str,
        *,
        action: str | None = None,
        guid: str | None = None,
        status_code: int = 200,
    ) -> dict[str, Any]:
        """Add a webhook delivery to the App's delivery log."""
        with self.lock:
            delivery_id = self.next_id()
            guid = guid or f"00000000-0000-4000-8000-{delivery_id:012d}"
            delivery = Delivery(delivery_id, guid, event, action, status_code)
            self.deliveries.append(delivery)
            return self._json().delivery(delivery)

    def fail_next(
        self,
        method: str,
        path_regex: str,
        status: int,
        headers: dict[str, str] | None = None,
        times: int = 1,
        after_success: bool = False,
    ) -> None:
        """Answer the next matching requests with an error (after acting, if after_success)."""
        fault = Fault(
            method.upper(),
            re.compile(path_regex),
            status,
            dict(headers or {}),
            times,
            after_success,
        )
        with self.lock:
            self.faults.append(fault)

    # Inspect ---------------------------------------------------------------

    def repo_id(self, full_name: str) -> int:
        """Return a repository's id."""
        with self.lock:
            return self.repo_record(full_name).id

    def issue(self, full_name: str, number: int) -> dict[str, Any]:
        """Return an issue or pull request as GitHub would."""
        with self.lock:
            return self._json().issue(self.issue_record(full_name, number))

    def issue_labels(self, full_name: str, number: int) -> list[str]:
        """Return the names of an issue's labels."""
        with self.lock:
            return list(self.issue_record(full_name, number).labels)

    def comments(self, full_name: str, number: int) -> list[dict[str, Any]]:
        """Return the comments on an issue, oldest first, as GitHub would."""
        with self.lock:
            return [self._json().comment(c) for c in self.comment_records(full_name, number)]

    def reactions(self, comment_id: int) -> list[dict[str, Any]]:
        """Return the reactions on a comment as GitHub would."""
        with self.lock:
            return [self._json().reaction(r) for r in self.reaction_records(comment_id)]

    def annotations(self, run_id: int) -> list[dict[str, Any]]:
        """Return a check run's annotations, in the order they were added."""
        with self.lock:
            return list(self.all_check_runs[run_id].annotations)

    def check_runs(self, full_name: str) -> list[dict[str, Any]]:
        """Return a repository's check runs, oldest first, as GitHub would."""
        with self.lock:
            runs = self.all_check_runs.values()
            return [self._json().check_run(r) for r in runs if _same(r.repo, full_name)]

    def pulls(self, full_name: str) -> list[dict[str, Any]]:
        """Return a repository's pull requests, oldest first, as GitHub would."""
        with self.lock:
            return [self._json().pull(p) for p in self.pull_records(full_name)]

    def tokens_used(self) -> list[str | None]:
        """Return the token each request carried, in order."""
        with self.lock:
            return [r.token for r in self.requests]

    # Records (callers hold the lock) ---------------------------------------

    def repo_record(self, full_name: str) -> Repository:
        """Return a repository record, or raise KeyError."""
        return self.repos[full_name.lower()]

    def issue_record(self, full_name: str, number: int) -> Issue:
        """Return an issue record, or raise KeyError."""
        return self.issues[(full_name.lower(), number)]

    def comment_records(self, full_name: str, number: int) -> list[Comment]:
        """Return the comment records of an issue, oldest first."""
        return [
            c
            for c in self.all_comments.values()
            if _same(c.repo, full_name) and c.issue_number == number
        ]

    def reaction_records(self, comment_id: int) -> list[Reaction]:
        """Return the reaction records of a comment."""
        return [r for r in self.all_reactions if r.comment_id == comment_id]

    def pull_records(self, full_name: str) -> list[PullRequest]:
        """Return the pull request records of a repository, oldest first."""
        return [p for p in self.all_pulls.values() if _same(p.repo, full_name)]

    def next_issue_number(self, full_name: str) -> int:
        """Return the number a new issue or pull request gets."""
        numbers = [n for (name, n) in self.issues if name == full_name.lower()]
        return max(numbers, default=0) + 1

    def attach_label(self, issue: Issue, name: str) -> None:
        """Put a label on an issue, creating the repository label if needed."""
        labels = self.repo_record(issue.repo).labels
        if name.lower() not in labels:
            labels[name.lower()] = Label(self.next_id(), name)
        if name.lower() not in (n.lower() for n in issue.labels):
            issue.labels.append(labels[name.lower()].name)

    def issue_token(self, installation_id: int) -> IssuedToken:
        """Hand out a new installation token."""
        token = f"ghs_double_{installation_id}_{self.next_id()}"
        issued = IssuedToken(token, installation_id, _now() + self.token_lifetime)
        self.issued_tokens.append(issued)
        return issued

    def token_expired(self, token: str) -> bool:
        """Tell whether a token is one the double issued and it has expired."""
        return any(t.token == token and t.expires_at <= _now() for t in self.issued_tokens)

    def take_fault(self, method: str, path: str) -> Fault | None:
        """Return and use up the first fault matching a request."""
        for fault in self.faults:
            if fault.method in (method, "*") and fault.path_pattern.search(path):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self.faults.remove(fault)
                return fault
        return None


def _same(full_name: str, other: str) -> bool:
    """Compare repository names the way GitHub does (case-insensitively)."""
    return full_name.lower() == other.lower()


# --------------------------------------------------------------------------- request helpers


class GitHubError(Exception):
    """An error response shaped like GitHub's."""

    def __init__(
        self, status: int, message: str, errors: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors


def _validation_failed(
    resource: str, field_name: str, code: str = "invalid", message: str | None = None
) -> GitHubError:
    """Return GitHub's 422 'Validation Failed' error."""
    error = {"resource": resource, "field": field_name, "code": code}
    if message:
        error["message"] = message
    return GitHubError(422, "Validation Failed", [error])


def _state() -> GitHubState:
    """Return the state of the double serving this request."""
    state: GitHubState = current_app.extensions["github_double"]
    return state


def _render() -> GitHubJson:
    """Return a renderer rooted at the API URL this client used (with any /api/v3)."""
    return GitHubJson(_state(), request.url_root)


def _body() -> dict[str, Any]:
    """Return the JSON request body as a dict."""
    payload = request.get_json(silent=True)
    return payload if isinstance(payload, dict) else {}


def _repo(owner: str, repo: str) -> Repository:
    """Return the repository named in the URL, or answer 404."""
    try:
        return _state().repo_record(f"{owner}/{repo}")
    except KeyError:
        raise GitHubError(404, "Not Found") from None


def _issue(owner: str, repo: str, number: int) -> Issue:
    """Return the issue named in the URL, or answer 404."""
    found = _repo(owner, repo)
    try:
        return _state().issue_record(found.full_name, number)
    except KeyError:
        raise GitHubError(404, "Not Found") from None


def _comment(owner: str, repo: str, comment_id: int) -> Comment:
    """Return the comment named in the URL, or answer 404."""
    comment = _state().all_comments.get(comment_id)
    if comment is None or not _same(comment.repo, f"{owner}/{repo}"):
        raise GitHubError(404, "Not Found")
    return comment


def _pull(owner: str, repo: str, number: int) -> PullRequest:
    """Return the pull request named in the URL, or answer 404."""
    pull = _state().all_pulls.get((f"{owner}/{repo}".lower(), number))
    if pull is None:
        raise GitHubError(404, "Not Found")
    return pull


def _origin(repo: Repository) -> GitOrigin:
    """Return the git origin of a repository."""
    return GitOrigin(repo.origin)


def _paginated(items: list[Any], envelope: str | None = None) -> Response:
    """Answer one page of items with GitHub's Link header, optionally in an envelope."""
    per_page = min(max(request.args.get("per_page", 30, type=int), 1), 100)
    page = max(request.args.get("page", 1, type=int), 1)
    last = max((len(items) + per_page - 1) // per_page, 1)
    selected = items[(page - 1) * per_page : page * per_page]
    response = jsonify(
        selected if envelope is None else {"total_count": len(items), envelope: selected}
    )
    links = []
    if page < last:
        links += [f'<{_page_url(page + 1)}>; rel="next"', f'<{_page_url(last)}>; rel="last"']
    if page > 1:
        links += [f'<{_page_url(1)}>; rel="first"', f'<{_page_url(page - 1)}>; rel="prev"']
    if links:
        response.headers["Link"] = ", ".join(links)
    return response


def _page_url(page: int) -> str:
    """Return this request's URL for another page."""
    return f"{request.base_url}?{urlencode({**request.args.to_dict(), 'page': page})}"


def _label_names(payload: Any) -> list[str]:
    """Return label names from a labels body: strings or {"name"} objects, bare or wrapped."""
    items = payload.get("labels") if isinstance(payload, dict) else payload
    return [item if isinstance(item, str) else item["name"] for item in items or []]


# --------------------------------------------------------------------------- endpoints

bp = Blueprint("github_double", __name__)
REPO = "/repos/<owner>/<repo>"


@bp.get("/app")
def get_app() -> ResponseReturnValue:
    """GET /app: only the App itself (its JWT) may ask."""
    _require_app_jwt()
    return jsonify(_render().app())


def _require_installation(installation_id: int) -> None:
    """Answer 404 unless some repository is installed under this id."""
    if not any(r.installation_id == installation_id for r in _state().repos.values()):
        raise GitHubError(404, "Not Found")


@bp.post("/app-manifests/<code>/conversions")
def create_app_from_manifest(code: str) -> ResponseReturnValue:
    """POST /app-manifests/{code}/conversions: no token; a code works once, within an hour."""
    created = _state().manifest_apps.convert(code)
    if created is None:
        raise GitHubError(404, "Not Found")
    return jsonify(_render().manifest_app(created)), 201


# What a user token sees: the person, and the App's installations and repositories they
# can reach, each repository with the person's own permissions on it.
ROLE_PERMISSIONS = {
    "admin": ("admin", "maintain", "push", "triage", "pull"),
    "maintain": ("maintain", "push", "triage", "pull"),
    "write": ("push", "triage", "pull"),
    "triage": ("triage", "pull"),
    "read": ("pull",),
}


def _user_login() -> str:
    """The person a user token was given to, or 401 as GitHub answers other tokens here."""
    login = _state().user_grants.login_of(_bearer_token())
    if login is None:
        raise GitHubError(401, "Bad credentials")
    return login


def _reachable(login: str) -> list[Repository]:
    """The installed repositories the person has a role on."""
    state = _state()
    return [repo for repo in state.repos.values() if (repo.full_name, login) in state.permissions]


@bp.get("/user")
def get_authenticated_user() -> ResponseReturnValue:
    """GET /user, for a user token."""
    return jsonify(_render().user(_user_login()))


@bp.get("/user/installations")
def list_user_installations() -> ResponseReturnValue:
    """GET /user/installations: the App's installations the person can reach."""
    ids = sorted({repo.installation_id for repo in _reachable(_user_login())})
    return _paginated([_render().installation(each) for each in ids], "installations")


@bp.get("/user/installations/<int:installation_id>/repositories")
def list_user_installation_repositories(installation_id: int) -> ResponseReturnValue:
    """GET /user/installations/{id}/repositories, each with the person's permissions."""
    login = _user_login()
    state, render = _state(), _render()
    found = []
    for repo in _reachable(login):
        if repo.installation_id != installation_id:
            continue
        granted = ROLE_PERMISSIONS[state.permissions[(repo.full_name, login)]]
        roles = ("admin", "maintain", "push", "triage", "pull")
        found.append({**render.repository(repo), "permissions": {r: r in granted for r in roles}})
    if not found:
        raise GitHubError(404, "Not Found")
    return _paginated(found, "repositories")


@bp.get("/app/installations/<int:installation_id>")
def get_installation(installation_id: int) -> ResponseReturnValue:
    """GET /app/installations/{id}."""
    _require_installation(installation_id)
    return jsonify(_render().installation(installation_id))


@bp.post("/app/installations/<int:installation_id>/access_tokens")
def create_access_token(installation_id: int) -> ResponseReturnValue:
    """POST /app/installations/{id}/access_tokens."""
    _require_installation(installation_id)
    issued = _state().issue_token(installation_id)
    return jsonify(
        {
            "token": issued.token,
            "expires_at": _iso(issued.expires_at),
            "permissions": INSTALLATION_PERMISSIONS,
            "repository_selection": "selected",
        }
    ), 201


@bp.get(f"{REPO}/installation")
def get_repo_installation(owner: str, repo: str) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/installation: only the App itself (its JWT) may ask."""
    _require_app_jwt()
    return jsonify(_render().installation(_repo(owner, repo).installation_id))


@bp.get("/app/hook/deliveries")
def list_deliveries() -> ResponseReturnValue:
    """GET /app/hook/deliveries: newest first, cursor pagination."""
    deliveries = sorted(_state().deliveries, key=lambda d: d.id, reverse=True)
    # GitHub's outcome filter: success is status codes 200-399, failure 400-599.
    wanted = {"success": range(200, 400), "failure": range(400, 600)}.get(
        request.args.get("status", "")
    )
    if wanted is not None:
        deliveries = [d for d in deliveries if d.status_code in wanted]
    per_page = min(request.args.get("per_page", 30, type=int), 100)
    start = int(request.args.get("cursor") or 0)
    response = jsonify([_render().delivery(d) for d in deliveries[start : start + per_page]])
    if start + per_page < len(deliveries):
        query = urlencode({"per_page": per_page, "cursor": start + per_page})
        response.headers["Link"] = f'<{request.base_url}?{query}>; rel="next"'
    return response


@bp.post("/app/hook/deliveries/<int:delivery_id>/attempts")
def redeliver(delivery_id: int) -> ResponseReturnValue:
    """POST /app/hook/deliveries/{id}/attempts: log a redelivery that keeps the GUID."""
    state = _state()
    original = next((d for d in state.deliveries if d.id == delivery_id), None)
    if original is None:
        raise GitHubError(404, "Not Found")
    state.redelivered.append(delivery_id)
    again = Delivery(state.next_id(), original.guid, original.event, original.action)
    again.redelivery = True
    state.deliveries.append(again)
    return jsonify({}), 202


@bp.get(REPO)
def get_repository(owner: str, repo: str) -> ResponseReturnValue:
    """GET /repos/{o}/{r}."""
    return jsonify(_render().repository(_repo(owner, repo)))


@bp.get(f"{REPO}/collaborators/<username>/permission")
def get_permission(owner: str, repo: str, username: str) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/collaborators/{user}/permission: 404 for non-collaborators."""
    found = _repo(owner, repo)
    role = _state().permissions.get((found.full_name, username))
    if role is None:
        raise GitHubError(404, f"{username} is not a user")
    return jsonify(
        {
            "permission": PERMISSION_OF_ROLE.get(role, role),
            "role_name": role,
            "user": _render().user(username),
        }
    )


@bp.get("/orgs/<org>/teams/<team_slug>/memberships/<username>")
def get_team_membership(org: str, team_slug: str, username: str) -> ResponseReturnValue:
    """GET /orgs/{org}/teams/{slug}/memberships/{user}: 404 unless a member or invited."""
    members = _state().team_members.get((org.lower(), team_slug.lower()), {})
    state = next((s for login, s in members.items() if _same(login, username)), None)
    if state is None:
        raise GitHubError(404, "Not Found")
    return jsonify(
        {
            "url": f"{request.url_root.rstrip('/')}/orgs/{org}/teams/{team_slug}"
            f"/memberships/{username}",
            "role": "member",
            "state": state,
        }
    )


# Issues and comments ---------------------------------------------------------


@bp.post(f"{REPO}/issues")
def create_issue(owner: str, repo: str) -> ResponseReturnValue:
    """POST /repos/{o}/{r}/issues, opened by the App's bot user."""
    state, found, payload = _state(), _repo(owner, repo), _body()
    number = state.next_issue_number(found.full_name)
    issue = Issue(
        state.next_id(),
        found.full_name,
        number,
        str(payload["title"]),
        payload.get("body"),
        state.bot_login,
        "Bot",
    )
    state.issues[(found.full_name.lower(), number)] = issue
    for name in _label_names(payload):
        state.attach_label(issue, name)
    return jsonify(_render().issue(issue)), 201


@bp.get(f"{REPO}/issues")
def list_issues(owner: str, repo: str) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/issues, paginated: `state`, `since`, `creator`, `sort`, `direction`."""
    state, found = _state(), _repo(owner, repo)
    wanted = request.args.get("state", "open")
    since = request.args.get("since", "")
    creator = request.args.get("creator")
    key = "created_at" if request.args.get("sort", "created") == "created" else "updated_at"
    issues = [
        issue
        for (name, _number), issue in state.issues.items()
        if name == found.full_name.lower()
        and wanted in ("all", issue.state)
        and str(_iso(issue.updated_at)) >= since
        and creator in (None, issue.author)
    ]
    issues.sort(
        key=lambda i: (getattr(i, key), i.number), reverse=request.args.get("direction") != "asc"
    )
    render = _render()
    return _paginated([render.issue(issue) for issue in issues])


@bp.get(f"{REPO}/issues/<int:number>")
def get_issue(owner: str, repo: str, number: int) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/issues/{n}."""
    return jsonify(_render().issue(_issue(owner, repo, number)))


@bp.patch(f"{REPO}/issues/<int:number>")
def update_issue(owner: str, repo: str, number: int) -> ResponseReturnValue:
    """PATCH /repos/{o}/{r}/issues/{n}: title, body, state, labels."""
    issue, payload = _issue(owner, repo, number), _body()
    issue.title = payload.get("title", issue.title)
    issue.body = payload.get("body", issue.body)
    if "state" in payload:
        _set_issue_state(issue, payload["state"], payload.get("state_reason"))
    if "labels" in payload:
        issue.labels = []
        for name in _label_names(payload):
            _state().attach_label(issue, name)
    issue.updated_at = _now()
    return jsonify(_render().issue(issue))


def _set_issue_state(issue: Issue, new_state: str, reason: str | None = None) -> None:
    """Open or close an issue, keeping closed_at and state_reason like GitHub."""
    if new_state == issue.state:
        return
    issue.state = new_state
    issue.closed_at = _now() if new_state == "closed" else None
    issue.state_reason = (reason or "completed") if new_state == "closed" else "reopened"


@bp.get(f"{REPO}/issues/<int:number>/comments")
def list_comments(owner: str, repo: str, number: int) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/issues/{n}/comments, paginated, optionally `since`."""
    issue = _issue(owner, repo, number)
    since = request.args.get("since", "")
    comments = _state().comment_records(issue.repo, number)
    render = _render()
    return _paginated([render.comment(c) for c in comments if str(_iso(c.updated_at)) >= since])


@bp.post(f"{REPO}/issues/<int:number>/comments")
def create_comment(owner: str, repo: str, number: int) -> ResponseReturnValue:
    """POST /repos/{o}/{r}/issues/{n}/comments, written by the App's bot user."""
    state, issue = _state(), _issue(owner, repo, number)
    comment = Comment(
        state.next_id(), issue.repo, number, _body()["body"], state.bot_login, "Bot", via_app=True
    )
    state.all_comments[comment.id] = comment
    return jsonify(_render().comment(comment)), 201


@bp.get(f"{REPO}/issues/comments/<int:comment_id>")
def get_comment(owner: str, repo: str, comment_id: int) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/issues/comments/{id}."""
    return jsonify(_render().comment(_comment(owner, repo, comment_id)))


@bp.patch(f"{REPO}/issues/comments/<int:comment_id>")
def update_comment(owner: str, repo: str, comment_id: int) -> ResponseReturnValue:
    """PATCH /repos/{o}/{r}/issues/comments/{id}: only the App's own comments."""
    comment = _comment(owner, repo, comment_id)
    if not comment.via_app:
        raise GitHubError(403, "Resource not accessible by integration")
    comment.earlier.append(comment.body)
    comment.body = _body()["body"]
    comment.updated_at = _now()
    return jsonify(_render().comment(comment))


# Sub-issues and dependencies ---------------------------------------------------


@bp.get(f"{REPO}/issues/<int:number>/sub_issues")
def list_sub_issues(owner: str, repo: str, number: int) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/issues/{n}/sub_issues."""
    parent = _issue(owner, repo, number)
    render = _render()
    return _paginated([render.issue(each) for each in _state().children_of(parent)])


@bp.post(f"{REPO}/issues/<int:number>/sub_issues")
def add_sub_issue(owner: str, repo: str, number: int) -> ResponseReturnValue:
    """POST /repos/{o}/{r}/issues/{n}/sub_issues: 422 when it already has a parent."""
    parent, payload, state = _issue(owner, repo, number), _body(), _state()
    try:
        child = state.issue_by_id(int(payload["sub_issue_id"]))
    except KeyError:
        raise GitHubError(404, "Not Found") from None
    if child.parent_id is not None and not payload.get("replace_parent"):
        raise GitHubError(422, "Sub-issue already has a parent")
    child.parent_id = parent.id
    child.sub_issue_order = state.next_id()
    return jsonify(_render().issue(parent)), 201


@bp.get(f"{REPO}/issues/<int:number>/dependencies/blocked_by")
def list_blocked_by(owner: str, repo: str, number: int) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/issues/{n}/dependencies/blocked_by."""
    found, state, render = _issue(owner, repo, number), _state(), _render()
    return _paginated([render.issue(state.issue_by_id(each)) for each in found.blocked_by])


@bp.post(f"{REPO}/issues/<int:number>/dependencies/blocked_by")
def add_blocked_by(owner: str, repo: str, number: int) -> ResponseReturnValue:
    """POST /repos/{o}/{r}/issues/{n}/dependencies/blocked_by: 422 when already linked."""
    found, payload, state = _issue(owner, repo, number), _body(), _state()
    try:
        blocker = state.issue_by_id(int(payload["issue_id"]))
    except KeyError:
        raise GitHubError(404, "Not Found") from None
    if blocker.id in found.blocked_by or blocker.id == found.id:
        raise GitHubError(422, "Validation Failed")
    found.blocked_by.append(blocker.id)
    return jsonify(_render().issue(blocker)), 201


# Labels ----------------------------------------------------------------------


@bp.post(f"{REPO}/issues/<int:number>/labels")
def add_labels(owner: str, repo: str, number: int) -> ResponseReturnValue:
    """POST /repos/{o}/{r}/issues/{n}/labels: add labels, creating unknown ones."""
    issue = _issue(owner, repo, number)
    for name in _label_names(request.get_json(silent=True)):
        _state().attach_label(issue, name)
    found = _repo(owner, repo)
    return jsonify([_render().label(found, name) for name in issue.labels])


@bp.put(f"{REPO}/issues/<int:number>/labels")
def set_labels(owner: str, repo: str, number: int) -> ResponseReturnValue:
    """PUT /repos/{o}/{r}/issues/{n}/labels: replace all labels."""
    _issue(owner, repo, number).labels = []
    return add_labels(owner, repo, number)


@bp.delete(f"{REPO}/issues/<int:number>/labels/<path:name>")
def remove_label(owner: str, repo: str, number: int, name: str) -> ResponseReturnValue:
    """DELETE /repos/{o}/{r}/issues/{n}/labels/{name}: 404 when not on the issue."""
    issue = _issue(owner, repo, number)
    kept = [n for n in issue.labels if n.lower() != name.lower()]
    if len(kept) == len(issue.labels):
        raise GitHubError(404, "Label does not exist")
    issue.labels = kept
    found = _repo(owner, repo)
    return jsonify([_render().label(found, n) for n in issue.labels])


@bp.post(f"{REPO}/labels")
def create_label(owner: str, repo: str) -> ResponseReturnValue:
    """POST /repos/{o}/{r}/labels: 422 when the name is taken."""
    found, payload = _repo(owner, repo), _body()
    name = payload["name"]
    if name.lower() in found.labels:
        raise _validation_failed("Label", "name", "already_exists")
    color, description = payload.get("color", "ededed"), payload.get("description")
    found.labels[name.lower()] = Label(_state().next_id(), name, color, description)
    return jsonify(_render().label(found, name)), 201


@bp.get(f"{REPO}/labels/<path:name>")
def get_label(owner: str, repo: str, name: str) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/labels/{name}."""
    found = _repo(owner, repo)
    if name.lower() not in found.labels:
        raise GitHubError(404, "Not Found")
    return jsonify(_render().label(found, name))


# Reactions -------------------------------------------------------------------


@bp.post(f"{REPO}/issues/comments/<int:comment_id>/reactions")
def create_reaction(owner: str, repo: str, comment_id: int) -> ResponseReturnValue:
    """POST .../comments/{id}/reactions: 201 when new, 200 when this reaction exists."""
    state, comment = _state(), _comment(owner, repo, comment_id)
    content = _body()["content"]
    for reaction in state.reaction_records(comment.id):
        if reaction.user == state.bot_login and reaction.content == content:
            return jsonify(_render().reaction(reaction)), 200
    reaction = Reaction(state.next_id(), comment.id, content, state.bot_login)
    state.all_reactions.append(reaction)
    return jsonify(_render().reaction(reaction)), 201


@bp.get(f"{REPO}/issues/comments/<int:comment_id>/reactions")
def list_reactions(owner: str, repo: str, comment_id: int) -> ResponseReturnValue:
    """GET .../comments/{id}/reactions, optionally of one content."""
    comment = _comment(owner, repo, comment_id)
    content = request.args.get("content")
    reactions = _state().reaction_records(comment.id)
    render = _render()
    return _paginated([render.reaction(r) for r in reactions if content in (None, r.content)])


# Git data --------------------------------------------------------------------


@bp.get(f"{REPO}/contents/", defaults={"path": ""})
@bp.get(f"{REPO}/contents/<path:path>")
def get_contents(owner: str, repo: str, path: str) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/contents/{path}?ref=, read from the bare origin."""
    found = _repo(owner, repo)
    origin = _origin(found)
    ref, path = request.args.get("ref") or found.default_branch, path.strip("/")
    commit = origin.resolve(ref)
    kind = origin.object_type(commit, path) if commit else None
    if commit is None or kind is None:
        raise GitHubError(404, "Not Found")
    if kind == "tree":
        return jsonify(_directory_json(found, origin, commit, path, ref))
    return jsonify(_file_json(found, origin, commit, path, ref))


def _content_links(repo: Repository, path: str, ref: str, sha: str, kind: str) -> dict[str, Any]:
    """Return the URL fields a file or directory entry carries."""
    api, web = request.url_root.rstrip("/"), _state().web_url
    url = f"{api}/repos/{repo.full_name}/contents/{quote(path)}?{urlencode({'ref': ref})}"
    git_url = f"{api}/repos/{repo.full_name}/git/{'blobs' if kind == 'file' else 'trees'}/{sha}"
    html = f"{web}/{repo.full_name}/{'blob' if kind == 'file' else 'tree'}/{ref}/{quote(path)}"
    return {
        "url": url,
        "git_url": git_url,
        "html_url": html,
        "_links": {"self": url, "git": git_url, "html": html},
    }


def _file_json(
    repo: Repository, origin: GitOrigin, commit: str, path: str, ref: str
) -> dict[str, Any]:
    """Render a file; base64 content wrapped at 60 characters like GitHub's."""
    data = origin.read_blob(commit, path)
    encoded = base64.b64encode(data).decode()
    sha = origin.object_sha(commit, path)
    return {
        "type": "file",
        "encoding": "base64",
        "size": len(data),
        "name": path.rsplit("/", 1)[-1],
        "path": path,
        "sha": sha,
        "content": "".join(encoded[i : i + 60] + "\n" for i in range(0, len(encoded), 60)),
        "download_url": f"https://raw.githubusercontent.com/{repo.full_name}/{ref}/{quote(path)}",
        **_content_links(repo, path, ref, sha, "file"),
    }


def _directory_json(
    repo: Repository, origin: GitOrigin, commit: str, path: str, ref: str
) -> list[dict[str, Any]]:
    """Render a directory listing."""
    entries = []
    for kind, sha, size, name in origin.list_tree(commit, path):
        entry_path = f"{path}/{name}" if path else name
        entry_kind = "dir" if kind == "tree" else "file"
        links = _content_links(repo, entry_path, ref, sha, entry_kind)
        entry = {"type": entry_kind, "size": size, "name": name, "path": entry_path, "sha": sha}
        entries.append({**entry, "download_url": None, **links})
    return entries


@bp.get(f"{REPO}/branches/<path:branch>")
def get_branch(owner: str, repo: str, branch: str) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/branches/{branch}."""
    found = _repo(owner, repo)
    sha = _origin(found).branch_sha(branch)
    if sha is None:
        raise GitHubError(404, "Branch not found")
    url = f"{_render().repo_url(found.full_name)}/branches/{quote(branch)}"
    protected = branch in found.protected_branches
    return jsonify(
        {
            "name": branch,
            "commit": {"sha": sha, "url": f"{_render().repo_url(found.full_name)}/commits/{sha}"},
            "protected": protected,
            "protection": {"enabled": protected},
            "protection_url": f"{url}/protection",
            "_links": {"self": url, "html": f"{_state().web_url}/{found.full_name}/tree/{branch}"},
        }
    )


@bp.get(f"{REPO}/git/ref/<path:ref>")
def get_git_ref(owner: str, repo: str, ref: str) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/git/ref/{ref}, e.g. heads/main."""
    found = _repo(owner, repo)
    sha = _origin(found).resolve(f"refs/{ref}")
    if sha is None:
        raise GitHubError(404, "Not Found")
    repo_url = _render().repo_url(found.full_name)
    return jsonify(
        {
            "ref": f"refs/{ref}",
            "node_id": _node_id("REF", zlib.crc32(ref.encode())),
            "url": f"{repo_url}/git/refs/{ref}",
            "object": {"sha": sha, "type": "commit", "url": f"{repo_url}/git/commits/{sha}"},
        }
    )


@bp.delete(f"{REPO}/git/refs/<path:ref>")
def delete_git_ref(owner: str, repo: str, ref: str) -> ResponseReturnValue:
    """DELETE /repos/{o}/{r}/git/refs/{ref}, e.g. heads/gaffer/1-fix: 422 when no such ref."""
    found = _repo(owner, repo)
    if not ref.startswith("heads/") or not _origin(found).delete_ref(f"refs/{ref}"):
        raise GitHubError(422, "Reference does not exist")
    return "", 204


@bp.get(f"{REPO}/commits/<path:ref>")
def get_commit(owner: str, repo: str, ref: str) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/commits/{ref}: the commit's SHA, message and parents."""
    found = _repo(owner, repo)
    origin = _origin(found)
    sha = origin.resolve(ref)
    if sha is None:
        raise GitHubError(422, f"No commit found for SHA: {ref}")
    repo_url = _render().repo_url(found.full_name)
    [(_, message)] = origin.commits(f"{sha}^!")
    return jsonify(
        {
            "sha": sha,
            "node_id": _node_id("C", zlib.crc32(sha.encode())),
            "url": f"{repo_url}/commits/{sha}",
            "html_url": f"{_state().web_url}/{found.full_name}/commit/{sha}",
            "commit": {"message": message, "url": f"{repo_url}/git/commits/{sha}"},
            "parents": [{"sha": p, "url": f"{repo_url}/commits/{p}"} for p in origin.parents(sha)],
        }
    )


@bp.get(f"{REPO}/compare/<path:basehead>")
def compare(owner: str, repo: str, basehead: str) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/compare/{base}...{head}: counts, commits and changed files."""
    found = _repo(owner, repo)
    origin = _origin(found)
    base_name, _, head_name = basehead.partition("...")
    base, head = origin.resolve(base_name), origin.resolve(head_name)
    if base is None or head is None:
        raise GitHubError(404, "Not Found")
    ahead, behind = origin.count_commits(f"{base}..{head}"), origin.count_commits(f"{head}..{base}")
    merge_base = origin.merge_base(base, head)
    commits = origin.commits(f"{base}..{head}")
    files = origin.changed_files(merge_base, head)
    return jsonify(
        {
            "url": f"{_render().repo_url(found.full_name)}/compare/{basehead}",
            "html_url": f"{_state().web_url}/{found.full_name}/compare/{basehead}",
            "status": _compare_status(ahead, behind),
            "ahead_by": ahead,
            "behind_by": behind,
            "total_commits": ahead,
            "base_commit": {"sha": base},
            "merge_base_commit": {"sha": merge_base},
            "commits": [{"sha": sha, "commit": {"message": text}} for sha, text in commits],
            "files": [
                {"filename": path, "status": "modified", "additions": plus, "deletions": minus}
                | {"changes": plus + minus}
                for path, plus, minus in files
            ],
        }
    )


def _compare_status(ahead: int, behind: int) -> str:
    """Name the relation of two commits the way GitHub's compare API does."""
    if ahead and behind:
        return "diverged"
    return "ahead" if ahead else "behind" if behind else "identical"


# Check runs ------------------------------------------------------------------


@bp.post(f"{REPO}/check-runs")
def create_check_run(owner: str, repo: str) -> ResponseReturnValue:
    """POST /repos/{o}/{r}/check-runs: 422 unless the origin has the head commit."""
    state, found, payload = _state(), _repo(owner, repo), _body()
    head_sha = payload["head_sha"]
    known = re.fullmatch(r"[0-9a-f]{40}", head_sha) and _origin(found).resolve(head_sha)
    if not known:
        raise GitHubError(422, f"No commit found for SHA: {head_sha}")
    run = CheckRun(state.next_id(), found.full_name, payload["name"], head_sha)
    _apply_check_run_update(run, payload)
    state.all_check_runs[run.id] = run
    return jsonify(_render().check_run(run)), 201


@bp.patch(f"{REPO}/check-runs/<int:run_id>")
def update_check_run(owner: str, repo: str, run_id: int) -> ResponseReturnValue:
    """PATCH /repos/{o}/{r}/check-runs/{id}; annotations are appended."""
    run = _state().all_check_runs.get(run_id)
    if run is None or not _same(run.repo, f"{owner}/{repo}"):
        raise GitHubError(404, "Not Found")
    _apply_check_run_update(run, _body())
    return jsonify(_render().check_run(run))


def _apply_check_run_update(run: CheckRun, payload: dict[str, Any]) -> None:
    """Apply a create or update body to a check run, with GitHub's status rules."""
    conclusion = payload.get("conclusion", run.conclusion)
    status = "completed" if "conclusion" in payload else payload.get("status", run.status)
    if status == "completed" and conclusion is None:
        raise _validation_failed("CheckRun", "conclusion", "missing_field")
    for key in ("name", "external_id", "details_url", "started_at", "completed_at"):
        if key in payload:
            setattr(run, key, payload[key])
    run.status, run.conclusion = status, conclusion
    if status == "completed" and run.completed_at is None:
        run.completed_at = _iso(_now())
    output = payload.get("output") or {}
    annotations = output.get("annotations", [])
    if len(annotations) > MAX_ANNOTATIONS:
        raise GitHubError(422, f"Only {MAX_ANNOTATIONS} annotations are allowed per request")
    run.output.update({k: output[k] for k in ("title", "summary", "text") if k in output})
    run.annotations.extend(annotations)
    run.actions = payload.get("actions", run.actions)


@bp.get(f"{REPO}/commits/<path:ref>/check-runs")
def list_check_runs_for_ref(owner: str, repo: str, ref: str) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/commits/{ref}/check-runs, by check_name, status and filter."""
    found = _repo(owner, repo)
    sha = _origin(found).resolve(ref)
    if sha is None:
        raise GitHubError(422, f"No commit found for SHA: {ref}")
    name, status = request.args.get("check_name"), request.args.get("status")
    runs = [
        r
        for r in _state().all_check_runs.values()
        if _same(r.repo, found.full_name)
        and r.head_sha == sha
        and name in (None, r.name)
        and status in (None, r.status)
    ]
    if request.args.get("filter", "latest") == "latest":
        runs = list({r.name: r for r in runs}.values())
    render = _render()
    return _paginated([render.check_run(r) for r in runs], envelope="check_runs")


# Pull requests ---------------------------------------------------------------


def _head_branch(repo: Repository, head: str) -> str:
    """Return the branch of a `head` value (`owner:branch` or `branch`)."""
    owner, _, branch = head.rpartition(":")
    if owner and not _same(owner, _owner(repo)):
        raise _validation_failed("PullRequest", "head")
    return branch


def _owner(repo: Repository) -> str:
    return repo.full_name.split("/")[0]


def _open_pull_for(
    state: GitHubState, repo: Repository, source: Repository, head_ref: str, base_ref: str
) -> PullRequest | None:
    """Return the open pull request from source's head to base, if any."""
    for pull in state.pull_records(repo.full_name):
        open_ = state.issue_record(repo.full_name, pull.number).state == "open"
        same_source = _same(pull.head_full_name(), source.full_name)
        if open_ and same_source and (pull.head_ref, pull.base_ref) == (head_ref, base_ref):
            return pull
    return None


def new_pull_head(
    state: GitHubState, repo: Repository, source: Repository, head_ref: str, base_ref: str
) -> str:
    """Refuse a pull request GitHub would refuse; return the head SHA.

    GitHub keeps one open pull request per head (owner and branch) and base.
    """
    head_sha = GitOrigin(source.origin).branch_sha(head_ref)
    base_sha = GitOrigin(repo.origin).branch_sha(base_ref)
    if head_sha is None:
        raise _validation_failed("PullRequest", "head")
    if base_sha is None:
        raise _validation_failed("PullRequest", "base")
    if _open_pull_for(state, repo, source, head_ref, base_ref) is not None:
        message = f"A pull request already exists for {_owner(source)}:{head_ref}."
        raise _validation_failed("PullRequest", "head", "custom", message)
    if source is repo and GitOrigin(repo.origin).count_commits(f"{base_sha}..{head_sha}") == 0:
        message = f"No commits between {base_ref} and {head_ref}"
        raise _validation_failed("PullRequest", "head", "custom", message)
    return head_sha


@bp.post(f"{REPO}/pulls")
def create_pull(owner: str, repo: str) -> ResponseReturnValue:
    """POST /repos/{o}/{r}/pulls: 422 for a missing branch, no commits, or a duplicate."""
    state, found, payload = _state(), _repo(owner, repo), _body()
    head_ref, base_ref = _head_branch(found, payload["head"]), payload["base"]
    head_sha = new_pull_head(state, found, found, head_ref, base_ref)
    number = state.next_issue_number(found.full_name)
    title, body = payload.get("title", head_ref), payload.get("body")
    state.issues[(found.full_name.lower(), number)] = Issue(
        state.next_id(), found.full_name, number, title, body, state.bot_login, "Bot", is_pull=True
    )
    pull = PullRequest(state.next_id(), found.full_name, number, head_ref, head_sha, base_ref)
    pull.draft = bool(payload.get("draft"))
    pull.maintainer_can_modify = bool(payload.get("maintainer_can_modify"))
    state.all_pulls[(found.full_name.lower(), number)] = pull
    return jsonify(_render().pull(pull)), 201


@bp.get(f"{REPO}/pulls")
def list_pulls(owner: str, repo: str) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/pulls?head=owner:branch&base=&state=."""
    state, found = _state(), _repo(owner, repo)
    wanted = request.args.get("state", "open")
    # `head` is `owner:branch`: the owner picks the repository (this one or a fork).
    head_owner, _, head_ref = (request.args.get("head") or "").rpartition(":")
    base_ref = request.args.get("base")
    pulls = [
        p
        for p in state.pull_records(found.full_name)
        if wanted in ("all", state.issue_record(found.full_name, p.number).state)
        and head_ref in ("", p.head_ref)
        and (not head_owner or _same(head_owner, p.head_full_name().split("/")[0]))
        and base_ref in (None, p.base_ref)
    ]
    render = _render()
    return _paginated([render.pull(p) for p in pulls])


@bp.get(f"{REPO}/pulls/<int:number>")
def get_pull(owner: str, repo: str, number: int) -> ResponseReturnValue:
    """GET /repos/{o}/{r}/pulls/{n}."""
    return jsonify(_render().pull(_pull(owner, repo, number)))


@bp.patch(f"{REPO}/pulls/<int:number>")
def update_pull(owner: str, repo: str, number: int) -> ResponseReturnValue:
    """PATCH /repos/{o}/{r}/pulls/{n}: title, body, state, base."""
    pull, issue, payload = _pull(owner, repo, number), _issue(owner, repo, number), _body()
    pull.head_sha = current_head_sha(pull, issue, _state())
    issue.title = payload.get("title", issue.title)
    issue.body = payload.get("body", issue.body)
    pull.base_ref = payload.get("base", pull.base_ref)
    pull.maintainer_can_modify = payload.get("maintainer_can_modify", pull.maintainer_can_modify)
    if "state" in payload:
        _set_issue_state(issue, payload["state"])
    issue.updated_at = _now()
    return jsonify(_render().pull(pull))


# --------------------------------------------------------------------------- request hooks


def _bearer_token() -> str | None:
    """Return the token of `Authorization: token X` or `Bearer X`."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() in ("token", "bearer") and token.strip():
        return token.strip()
    return None


@bp.before_app_request
def check_request() -> ResponseReturnValue | None:
    """Record the request, then apply the contract, authentication and scripted faults."""
    if request.blueprint not in (None, bp.name):
        return None  # one of GitHub's web pages (double/web.py), not the REST API
    state, token = _state(), _bearer_token()
    query = request.args.to_dict()
    recorded = RecordedRequest(
        request.method, request.path, query, request.get_json(silent=True), token
    )
    state.requests.append(recorded)
    if current_app.config["GITHUB_DOUBLE_VALIDATE"]:
        _check_contract(state)
    if token is None and request.endpoint not in WITHOUT_TOKEN:
        raise GitHubError(401, "Requires authentication")
    if token is not None and state.token_expired(token):
        raise GitHubError(401, "Bad credentials")
    fault = state.take_fault(request.method, request.path)
    if fault and fault.after_success:
        g.fault_after_success = fault
    elif fault:
        return _fault_response(fault)
    return None


# Endpoints GitHub answers with no token at all.
WITHOUT_TOKEN = frozenset({f"{bp.name}.{create_app_from_manifest.__name__}"})


def _require_app_jwt() -> None:
    """Answer 401 unless the request carries a live JWT issued by this App, as GitHub does.

    The double holds no public key, so the signature is not checked: the claims are.
    """
    token = _bearer_token() or ""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise GitHubError(401, "A JSON web token could not be decoded") from None
    now = datetime.now(UTC).timestamp()
    issued, expires = claims.get("iat"), claims.get("exp")
    if str(claims.get("iss")) != str(_state().app_id):
        raise GitHubError(401, "'Issuer' claim ('iss') must be an Integer")
    if not isinstance(issued, int | float) or not isinstance(expires, int | float):
        raise GitHubError(401, "'Issued at' and 'Expiration time' claims are required")
    if expires <= now:
        raise GitHubError(
            401,
            "'Expiration time' claim ('exp') must be a numeric value "
            "representing the future time at which the assertion expires",
        )
    if expires - issued > 10 * 60 or issued > now + 60:
        raise GitHubError(401, "'Expiration time' claim ('exp') is too far in the future")


def _check_contract(state: GitHubState) -> None:
    """Answer 422 (and remember why) when GitHub's description forbids this request."""
    try:
        contract.validate_request(request.method, request.full_path, request.get_data())
    except contract.ContractError as error:
        state.contract_errors.append(str(error))
        raise GitHubError(422, f"Contract violation: {error}") from None


@bp.after_app_request
def fail_after_success(response: Response) -> Response:
    """Swap a successful answer for a scripted failure, as if it timed out after acting."""
    fault = g.pop("fault_after_success", None)
    if fault is not None and response.status_code < 400:
        return _fault_response(fault)
    return response


def _fault_response(fault: Fault) -> Response:
    """Render a scripted failure the way GitHub words it."""
    if fault.status in (403, 429) and "Retry-After" in fault.headers:
        message = (
            "You have exceeded a secondary rate limit. "
            "Please wait a few minutes before you try again."
        )
    else:
        reasons = {500: "Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}
        message = reasons.get(fault.status, "Scripted failure")
    response = _error_response(GitHubError(fault.status, message))
    response.headers.update(fault.headers)
    return response


def _error_response(error: GitHubError) -> Response:
    """Render an error body the way GitHub does."""
    body: dict[str, Any] = {
        "message": error.message,
        "documentation_url": "https://docs.github.com/rest",
        "status": str(error.status),
    }
    if error.errors:
        body["errors"] = error.errors
    response = jsonify(body)
    response.status_code = error.status
    return response


def _http_error(error: HTTPException) -> Response:
    """Answer routing errors as JSON; an unknown route means the double lacks the endpoint."""
    if error.code in (404, 405) and request.url_rule is None:
        where = f"{request.method} {request.path}"
        _state().unimplemented.append(where)
        return _error_response(GitHubError(404, f"The GitHub double does not implement {where}"))
    return _error_response(GitHubError(error.code or 500, error.name))


# --------------------------------------------------------------------------- factory


def _serialized(wsgi_app: Callable[..., Any], lock: threading.RLock) -> Callable[..., Any]:
    """Serve one request at a time, so the state never sees two writers."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        with lock:
            return wsgi_app(environ, start_response)

    return serve


def create_github_double(
    *, validate: bool = True, app_id: int = 1, app_slug: str = "gaffer"
) -> tuple[Flask, GitHubState]:
    """Build the GitHub double: a Flask app and the state it serves."""
    if validate:
        contract.default_contract()  # fail here, loudly, when the spec is not installed
    state = GitHubState(app_id=app_id, app_slug=app_slug)
    app = Flask(__name__)
    app.config.update(GITHUB_DOUBLE_VALIDATE=validate, PROPAGATE_EXCEPTIONS=True)
    app.extensions["github_double"] = state
    app.register_blueprint(bp)
    app.register_blueprint(web.bp)
    app.register_blueprint(oauth.bp)
    app.register_error_handler(GitHubError, _error_response)
    app.register_error_handler(HTTPException, _http_error)
    app.wsgi_app = _serialized(app.wsgi_app, state.lock)  # type: ignore[method-assign]
    state.flask_app = app
    return app, state
