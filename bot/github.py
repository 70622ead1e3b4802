"""The one way gaffer talks to GitHub: App auth, installation tokens, and the calls it makes."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import parse_qs, quote, urlsplit

import requests
from github import Auth, Github, GithubException, GithubIntegration, GithubRetry
from github.Repository import Repository
from requests.utils import parse_header_links

from bot.lookup_cache import LookupCache
from bot.masking import SecretMask
from bot.models import PlanState, aware
from bot.settings import Settings

STATUS_MARKER = "<!-- gaffer:status -->"
LABEL_PREFIX = "gaffer: "
# The labels that show a plan's state. Other `gaffer: ` labels are people's (`gaffer: p0`
# sets a priority) and gaffer leaves them be.
STATE_LABELS = frozenset(LABEL_PREFIX + state.value for state in PlanState)
# Renew a little before GitHub's expiry so a token never dies in the middle of a git push.
TOKEN_MARGIN = timedelta(minutes=5)
# The transport repeats only requests that mean the same the second time. A POST that timed
# out may have created its object, so creates are repeated by `rewrite`, which looks first.
REPEATABLE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
# Never sleep longer than this on one Retry-After; the job fails and is retried instead.
MAX_RETRY_AFTER_S = 60.0

log = logging.getLogger(__name__)
T = TypeVar("T")


class PermissionUnknown(Exception):
    """GitHub could not tell us a user's permission; gaffer refuses rather than guesses."""


class PullBlocked(Exception):
    """Someone else's open pull request holds the plan branch's head and base.

    GitHub keeps one open pull request per head and base, so gaffer cannot open its own.
    """

    def __init__(self, number: int, author: str) -> None:
        super().__init__(f"#{number} by @{author}")
        self.number = number
        self.author = author


@dataclass
class _Token:
    value: str
    expires_at: datetime


def _fresh(token: _Token) -> bool:
    return token.expires_at - TOKEN_MARGIN > datetime.now(UTC)


def create_app_from_manifest(api_url: str, code: str) -> dict[str, Any]:
    """Trade the manifest flow's one-time code for the new App's id, key and secrets.

    GitHub takes no credentials here: the code, good once and for an hour, is the proof.
    """
    response = requests.post(
        f"{api_url}/app-manifests/{quote(code, safe='')}/conversions",
        headers={"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"},
        timeout=30,
    )
    response.raise_for_status()
    created: dict[str, Any] = response.json()
    return created


class GitHubApp:
    """The App's identity: signs JWTs and hands out per-installation clients and tokens.

    Every token it mints joins mask, which every client it hands out applies to what it posts.
    """

    def __init__(self, settings: Settings, mask: SecretMask, *, retries: int = 4) -> None:
        if not (settings.app_id and settings.private_key):
            raise RuntimeError("APP_ID and PRIVATE_KEY (or PRIVATE_KEY_PATH) are needed")
        self.settings = settings
        self.mask = mask
        self.app_id = int(settings.app_id)
        self._auth = Auth.AppAuth(settings.app_id, settings.private_key)
        self._retry = GithubRetry(
            total=retries, backoff_factor=0.5, allowed_methods=REPEATABLE_METHODS
        )
        self._writes = Rewriter(attempts=retries + 1, backoff_s=0.5)
        # PyGithub paces requests to stay clear of secondary rate limits; tests set 0.
        config = settings.server_config
        self._pace: dict[str, Any] = {
            "seconds_between_requests": float(config.get("github_seconds_between_requests", 0.25)),
            "seconds_between_writes": float(config.get("github_seconds_between_writes", 1.0)),
        }
        self._tokens: dict[int, _Token] = {}
        self._renewal_locks: dict[int, threading.Lock] = {}
        self._lock = threading.Lock()  # guards _renewal_locks only
        self._bot_login: str | None = None
        # Who may write, and the config, as GitHub said in the last minute: one per process.
        self.lookups = LookupCache()

    def integration(self) -> GithubIntegration:
        """Return a client authenticated as the App itself (JWT)."""
        return GithubIntegration(
            auth=self._auth, base_url=self.settings.github_api_url, retry=self._retry, **self._pace
        )

    def token(self, installation_id: int) -> str:
        """Return a live installation token, renewed before it expires."""
        cached = self._tokens.get(installation_id)
        if cached is None or not _fresh(cached):
            cached = self._renew(installation_id)
        return cached.value

    def _renew(self, installation_id: int) -> _Token:
        # Only callers for this installation wait while its token is renewed (with retries
        # and backoff); other installations' cached tokens are served meanwhile.
        with self._lock:
            renewal = self._renewal_locks.setdefault(installation_id, threading.Lock())
        with renewal:
            cached = self._tokens.get(installation_id)
            if cached is None or not _fresh(cached):  # unless a caller before us renewed it
                # A second token is harmless, so a lost answer is simply asked again.
                access = self._writes.rewrite(
                    lambda: self.integration().get_access_token(installation_id)
                )
                cached = _Token(access.token, aware(access.expires_at))
                # Masked before anyone can use it, so no text that holds it can be posted.
                self.mask.add(cached.value, until=cached.expires_at)
                self._tokens[installation_id] = cached
            return cached

    def bot_login(self) -> str:
        """Return the login GitHub gives the App's bot user (`<slug>[bot]`), asked once."""
        if self._bot_login is None:
            self._bot_login = f"{self.integration().get_app().slug}[bot]"
        return self._bot_login

    def installation(self, installation_id: int, full_name: str) -> RepoClient:
        """Return a client for one repository, acting as the installation."""
        gh = Github(
            auth=_LiveInstallationToken(self, installation_id),
            base_url=self.settings.github_api_url,
            retry=self._retry,
            **self._pace,
        )
        client = RepoClient(
            gh,
            full_name,
            self.app_id,
            self.mask,
            self._writes,
            bot_login=self.bot_login,
            lookups=self.lookups,
            unsandboxed=self.settings.unsandboxed,
        )
        return client

    def hook_deliveries(
        self, *, per_page: int = 100, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Return one page of the App's webhook deliveries, newest first, and the next cursor.

        Every outcome: GitHub's `status=failure` means status codes 400-599 only, and would
        leave out the deliveries that timed out or found gaffer down (status code 0).
        """
        parameters: dict[str, Any] = {"per_page": per_page}
        if cursor:
            parameters["cursor"] = cursor
        headers, page = self.integration().requester.requestJsonAndCheck(
            "GET", "/app/hook/deliveries", parameters=parameters
        )
        return list(page or []), _next_cursor(headers)

    def redeliver(self, delivery_id: int) -> None:
        """Ask GitHub to send one of the App's webhook deliveries again."""
        self.integration().requester.requestJsonAndCheck(
            "POST", f"/app/hook/deliveries/{delivery_id}/attempts"
        )

    def find_installation(self, full_name: str) -> dict[str, Any] | None:
        """Ask GitHub which installation holds a repository; None if the App is not on it.

        The answer is shaped as a webhook payload: `installation` and `repository` objects.
        """
        try:
            _headers, installation = self.integration().requester.requestJsonAndCheck(
                "GET", f"/repos/{quote(full_name, safe='/')}/installation"
            )
        except GithubException as error:
            if error.status == 404:
                return None
            raise
        # The installation's answer has no repository id, which gaffer keys repositories by.
        repo = self.installation(installation["id"], full_name).repo
        return {
            "installation": installation,
            "repository": {"id": repo.id, "full_name": repo.full_name},
        }


class Rewriter:
    """Repeat a write that GitHub did not answer, each time running it whole again.

    A write passed in must be safe to run twice: it looks for what an earlier attempt may
    have made (by marker, external_id or head branch) before it creates anything.
    """

    def __init__(self, attempts: int = 5, backoff_s: float = 0.5) -> None:
        self.attempts = attempts
        self.backoff_s = backoff_s

    def rewrite(self, write: Callable[[], T]) -> T:
        """Return write()'s result, running it again after a 5xx, rate limit or timeout."""
        attempt = 1
        while True:
            try:
                return write()
            except Exception as error:
                delay = self._delay(error, attempt)
                if delay is None or attempt >= self.attempts:
                    raise
                log.info("GitHub write failed (%s); again in %.1f s", error, delay)
                time.sleep(delay)
                attempt += 1

    def _delay(self, error: Exception, attempt: int) -> float | None:
        """Return how long to wait before the next attempt, or None when it would not help."""
        backoff = self.backoff_s * 2 ** (attempt - 1)
        if isinstance(error, requests.exceptions.RetryError):
            return None  # the transport's own retries of a read are spent: no second layer
        if isinstance(error, requests.RequestException):  # timeouts, resets
            return backoff
        if not isinstance(error, GithubException):
            return None
        headers = {key.lower(): value for key, value in (error.headers or {}).items()}
        if error.status in (403, 429) and ("retry-after" in headers or _rate_limited(error)):
            return min(float(headers.get("retry-after") or backoff), MAX_RETRY_AFTER_S)
        return backoff if error.status >= 500 else None


def _rate_limited(error: GithubException) -> bool:
    message = error.data.get("message", "") if isinstance(error.data, dict) else ""
    return "rate limit" in str(message).lower()


def _next_cursor(headers: dict[str, Any]) -> str | None:
    # The deliveries list pages by an opaque cursor, carried in the Link header's next URL.
    link = next((value for key, value in headers.items() if key.lower() == "link"), "")
    for entry in parse_header_links(link):
        if entry.get("rel") == "next":
            return parse_qs(urlsplit(entry["url"]).query).get("cursor", [None])[0]
    return None


class _LiveInstallationToken(Auth.Auth):
    """Authenticate each request with the installation's current token, renewed as needed."""

    def __init__(self, app: GitHubApp, installation_id: int) -> None:
        self._app = app
        self._installation_id = installation_id

    @property
    def token_type(self) -> str:
        return "token"

    @property
    def token(self) -> str:
        # Read per request, so a client held through an hour-long job never sends a dead token.
        return self._app.token(self._installation_id)


@dataclass(frozen=True)
class RepoFile:
    """A file on a branch: its blob SHA names its content; text is None if too big to read."""

    sha: str
    size: int
    text: str | None


def is_gaffers_pull(
    pull: dict[str, Any], *, bot_login: str, repo_id: int, branch: str, base: str
) -> bool:
    """Tell whether a PR (as GitHub renders it) is gaffer's own: the plan's PR.

    That is one the App's bot opened from branch in the repository itself (not a fork)
    into base; anyone can open another PR from a branch of the same name.
    """
    user = pull.get("user") or {}
    head, to = pull.get("head") or {}, pull.get("base") or {}
    head_repo = head.get("repo") or {}  # None once a fork is deleted
    return (
        user.get("type") == "Bot"
        and user.get("login") == bot_login
        and head_repo.get("id") == repo_id
        and (head.get("ref"), to.get("ref")) == (branch, base)
    )


@dataclass(frozen=True)
class CheckRunRef:
    id: int
    html_url: str


class PullsMixin:
    """Branches, check runs and pull requests: the write side of the diff checkpoint."""

    repo: Any
    gh: Github
    full_name: str
    writes: Rewriter
    mask: SecretMask
    bot_login: Callable[[], str]

    def branch_sha(self, branch: str) -> str | None:
        """Return the branch's head on GitHub, or None when it does not exist."""
        try:
            return str(self.repo.get_branch(branch).commit.sha)
        except GithubException as error:
            if error.status == 404:
                return None
            raise

    def branch_protected(self, branch: str) -> bool:
        try:
            return bool(self.repo.get_branch(branch).protected)
        except GithubException as error:
            if error.status == 404:
                return False
            raise

    def delete_branch(self, branch: str) -> None:
        """Delete a plan branch on GitHub; a branch already gone is fine."""
        try:
            self.repo.get_git_ref(f"heads/{branch}").delete()
        except GithubException as error:
            if error.status not in (404, 422):
                raise

    def check_run(
        self, head_sha: str, name: str, external_id: str, *, new_commit: bool = False, **fields: Any
    ) -> CheckRunRef:
        """Create or update the check run with this external_id on head_sha. A new_commit
        (one gaffer just made and pushed) can have no check run yet: the first try creates
        without looking; a try again after a failure looks first, as it may have landed."""
        body = _check_run_body(self.mask, fields)
        tries = itertools.count()
        return self.writes.rewrite(
            lambda: self._write_check_run(
                head_sha, name, external_id, body, look=not (new_commit and next(tries) == 0)
            )
        )

    def update_check_run(self, run_id: int, **fields: Any) -> CheckRunRef:
        """Update the check run gaffer made with id run_id (an update is safe to repeat)."""
        path = f"/repos/{self.full_name}/check-runs/{run_id}"
        body = _check_run_body(self.mask, fields)
        return self.writes.rewrite(lambda: _check_run_ref(self._send("PATCH", path, body)))

    def _write_check_run(
        self, head_sha: str, name: str, external_id: str, body: dict[str, Any], *, look: bool
    ) -> CheckRunRef:
        runs = f"/repos/{self.full_name}/check-runs"
        existing = self._find_check_run(head_sha, name, external_id) if look else None
        if existing is None:
            made = {"name": name, "head_sha": head_sha, "external_id": external_id, **body}
            return _check_run_ref(self._send("POST", runs, made))
        return _check_run_ref(self._send("PATCH", f"{runs}/{existing}", body))

    def _find_check_run(self, head_sha: str, name: str, external_id: str) -> int | None:
        """Return the id of the check run named name with external_id on head_sha, if any."""
        # A create that timed out may have succeeded: look before creating again, in one
        # request a page (through the commit, PyGithub would first read the commit itself).
        path = f"/repos/{self.full_name}/commits/{quote(head_sha, safe='')}/check-runs"
        for page in itertools.count(1):
            _, found = self.gh.requester.requestJsonAndCheck(
                "GET", path, parameters={"check_name": name, "per_page": 100, "page": page}
            )
            runs = found.get("check_runs") or []
            for run in runs:
                if run.get("external_id") == external_id:
                    return int(run["id"])
            if len(runs) < 100:
                return None
        return None

    def _send(self, verb: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        _, answer = self.gh.requester.requestJsonAndCheck(verb, path, input=body)
        return dict(answer or {})

    def open_pull(self, branch: str, base: str, title: str, body: str) -> tuple[int, str]:
        """Return (number, head sha) of gaffer's open PR from branch, creating it if needed.

        Raises PullBlocked when someone else's open PR from branch into base stands in the way.
        """
        title, body = self.mask(title), self.mask(body)
        return self.writes.rewrite(lambda: self._write_pull(branch, base, title, body))

    def _write_pull(self, branch: str, base: str, title: str, body: str) -> tuple[int, str]:
        # A create that timed out may have opened the PR: look before creating again.
        found = self._gaffers_pull(branch, base)
        if found is not None:
            return found
        try:
            pull = self.repo.create_pull(base=base, head=branch, title=title, body=body)
        except GithubException as error:
            # GitHub keeps one open PR per head and base: a concurrent attempt may have
            # opened gaffer's a moment ago (or a person's PR took them meanwhile).
            if error.status == 422 and (found := self._gaffers_pull(branch, base)) is not None:
                return found
            raise
        return int(pull.number), str(pull.head.sha)

    def _gaffers_pull(self, branch: str, base: str) -> tuple[int, str] | None:
        """Return gaffer's open PR from branch into base; PullBlocked when another holds them."""
        owner = self.repo.owner.login
        others = []
        for pull in self.repo.get_pulls(state="open", head=f"{owner}:{branch}", base=base):
            ours = is_gaffers_pull(
                pull.raw_data,
                bot_login=self.bot_login(),
                repo_id=int(self.repo.id),
                branch=branch,
                base=base,
            )
            if ours:
                return int(pull.number), str(pull.head.sha)
            others.append(pull)
        if others:
            raise PullBlocked(int(others[0].number), str(others[0].user.login))
        return None

    def close_pull(self, number: int) -> None:
        self.writes.rewrite(lambda: self.repo.get_pull(number).edit(state="closed"))

    def pull_request_template(self) -> str | None:
        """Return the repository's pull request template from its default branch, if any."""
        for path in PR_TEMPLATES:
            text = self.file_on_default_branch(path)  # type: ignore[attr-defined]
            if text is not None:
                return text
        return None


def _check_run_body(mask: SecretMask, fields: dict[str, Any]) -> dict[str, Any]:
    """Return a check run's fields as GitHub takes them: times as UTC text, output masked
    (a check's output may print anything it could read)."""
    body = {
        key: _utc_text(value) if isinstance(value, datetime) else value
        for key, value in fields.items()
    }
    if "output" in body:
        body["output"] = mask.masked(body["output"])
    return body


def _utc_text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_run_ref(run: dict[str, Any]) -> CheckRunRef:
    return CheckRunRef(int(run["id"]), str(run["html_url"]))


PR_TEMPLATES = (
    ".github/pull_request_template.md",
    ".github/PULL_REQUEST_TEMPLATE.md",
    "pull_request_template.md",
    "docs/pull_request_template.md",
)


class RepoClient(PullsMixin):
    """The calls gaffer makes on one repository, each looking up before it creates.

    Every text it posts (comments, issues, check-run output, pull requests) passes mask.
    """

    def __init__(
        self,
        gh: Github,
        full_name: str,
        app_id: int,
        mask: SecretMask,
        writes: Rewriter | None = None,
        *,
        bot_login: Callable[[], str],
        lookups: LookupCache | None = None,
        unsandboxed: bool = False,
    ) -> None:
        self.gh = gh
        self.full_name = full_name
        self.app_id = app_id
        self.mask = mask
        self.writes = writes or Rewriter()
        self.bot_login = bot_login
        self.lookups = lookups if lookups is not None else LookupCache()
        # The server runs agents without isolation (`sandbox: none`): the status says so.
        self.unsandboxed = unsandboxed
        self._repo: Any = None

    @property
    def repo(self) -> Any:
        """The repository as GitHub described it in the last minute or so (see LookupCache):
        its default branch, id and address, read once for all of a process's clients
        rather than once for each job's."""
        if self._repo is None:
            key = ("repository", self.full_name.lower())
            described = self.lookups.remember(
                key, lambda: self.gh.get_repo(self.full_name).raw_data
            )
            self._repo = Repository(self.gh.requester, {}, dict(described), completed=True)
        return self._repo

    def permission(self, login: str, *, recent: bool = False) -> str:
        """Return a user's permission on the repository: admin, write, read or none.

        recent: an answer from the last minute will do (see LookupCache), as for a flood
        of commands; work that is about to write on GitHub asks afresh.
        """
        if not recent:
            return self._ask_permission(login)
        key = ("permission", self.full_name.lower(), login.lower())
        return self.lookups.remember(key, lambda: self._ask_permission(login))

    def _ask_permission(self, login: str) -> str:
        try:
            return str(self.repo.get_collaborator_permission(login))
        except GithubException as error:
            if error.status == 404:
                return "none"
            raise PermissionUnknown(str(error.status)) from error
        except Exception as error:  # timeouts, connection errors: fail closed
            raise PermissionUnknown(type(error).__name__) from error

    def team_member(self, team: str, login: str, *, recent: bool = False) -> bool:
        """Tell whether login is an active member of team, given as org/slug.

        recent: an answer from the last minute will do, as for permission().
        """
        if not recent:
            return self._ask_team_member(team, login)
        key = ("team", team.lower(), login.lower())
        return self.lookups.remember(key, lambda: self._ask_team_member(team, login))

    def _ask_team_member(self, team: str, login: str) -> bool:
        org, slug = (quote(part, safe="") for part in team.split("/", 1))
        path = f"/orgs/{org}/teams/{slug}/memberships/{quote(login, safe='')}"
        try:
            _, membership = self.gh.requester.requestJsonAndCheck("GET", path)
        except GithubException as error:
            if error.status == 404:
                return False
            raise PermissionUnknown(str(error.status)) from error
        except Exception as error:  # timeouts, connection errors: fail closed
            raise PermissionUnknown(type(error).__name__) from error
        return bool(membership) and membership.get("state") == "active"

    def issue(self, number: int) -> Any:
        return self.repo.get_issue(number)

    def open_issue_once(
        self, title: str, body: str, labels: list[str], marker: str, since: datetime
    ) -> int:
        """Return the number of gaffer's issue carrying marker, opening it if there is none.

        Only issues updated after `since` are searched: pass a time before any earlier
        attempt could have opened the issue.
        """
        title, body = self.mask(title), self.mask(body)
        return self.writes.rewrite(lambda: self._write_issue(title, body, labels, marker, since))

    def _write_issue(
        self, title: str, body: str, labels: list[str], marker: str, since: datetime
    ) -> int:
        # A create that timed out may have opened the issue: look by marker before creating.
        for issue in self.repo.get_issues(state="all", since=since):
            if marker in (issue.body or "") and self._opened_by_this_app(issue):
                return int(issue.number)
        return int(self.repo.create_issue(title=title, body=body, labels=labels).number)

    def _opened_by_this_app(self, issue: Any) -> bool:
        # Issues opened with an installation token are the bot user's own, and GitHub may
        # leave performed_via_github_app empty on them: when it is set, it must be this App.
        app = issue.raw_data.get("performed_via_github_app") or {}
        return issue.user.type == "Bot" and app.get("id", self.app_id) == self.app_id

    def reply(self, number: int, body: str) -> int:
        """Post a new comment on an issue and return its id.

        A reply carries no marker to look for, so one whose answer was lost is posted again:
        a rare duplicate reply is better than a question left without an answer.
        """
        body = self.mask(body)
        return self.writes.rewrite(lambda: int(self.issue(number).create_comment(body).id))

    def react(self, number: int, comment_id: int, content: str = "eyes") -> None:
        """Add a reaction to a comment; GitHub keeps one per user and content.

        One request: a flood of commands costs one reaction each, not three look-ups.
        """
        path = f"/repos/{self.full_name}/issues/comments/{comment_id}/reactions"
        self.writes.rewrite(
            lambda: self.gh.requester.requestJsonAndCheck("POST", path, input={"content": content})
        )

    def opened_part(
        self, title: str, body: str, labels: list[str], marker: str, since: datetime
    ) -> tuple[int, int]:
        """Open a part's issue once (by marker) and return its number and its id."""
        number = self.open_issue_once(title, body, labels, marker, since)
        return number, int(self.issue(number).id)

    def add_sub_issue(self, parent: int, child_id: int) -> None:
        """Make the issue with child_id a sub-issue of parent, unless it already is."""
        path = f"/repos/{self.full_name}/issues/{parent}/sub_issues"
        self.writes.rewrite(lambda: self._link_once(path, "sub_issue_id", child_id))

    def add_blocked_by(self, number: int, blocker_id: int) -> None:
        """Record that the issue is blocked by the issue with blocker_id, unless it is."""
        path = f"/repos/{self.full_name}/issues/{number}/dependencies/blocked_by"
        self.writes.rewrite(lambda: self._link_once(path, "issue_id", blocker_id))

    def _link_once(self, path: str, field: str, issue_id: int) -> None:
        # A link that timed out may have been made: look before making it.
        _, linked = self.gh.requester.requestJsonAndCheck("GET", path, parameters={"per_page": 100})
        if any(each.get("id") == issue_id for each in linked or []):
            return
        self.gh.requester.requestJsonAndCheck("POST", path, input={field: issue_id})

    def close_issue(self, number: int) -> None:
        """Close the issue as completed (closing a closed issue changes nothing)."""
        issue = self.issue(number)
        if issue.state != "closed":
            self.writes.rewrite(lambda: issue.edit(state="closed", state_reason="completed"))

    def upsert_status(
        self, number: int, body: str, known_id: int | None, *, read_first: bool = True
    ) -> int:
        """Edit gaffer's one status comment on the issue, creating it only if none exists.

        Without read_first (gaffer knows it last wrote something else there), the comment is
        written without being read first; one someone deleted meanwhile is still found out."""
        body = self.mask(body)
        return self.writes.rewrite(lambda: self._write_status(number, body, known_id, read_first))

    def _write_status(self, number: int, body: str, known_id: int | None, read_first: bool) -> int:
        if known_id is not None and self._edit_comment(known_id, body, read_first=read_first):
            return known_id
        # A create that timed out may have posted the comment: look by marker before creating.
        issue = self.issue(number)
        comment = self._status_comment(issue)
        if comment is None:
            return int(issue.create_comment(body).id)
        if comment.body != body:
            comment.edit(body)
        return int(comment.id)

    def _edit_comment(self, comment_id: int, body: str, *, read_first: bool = True) -> bool:
        """Make a comment say body, writing only if it says something else: read by id
        (not through its issue, a request more) unless read_first is False. False if the
        comment is gone."""
        path = f"/repos/{self.full_name}/issues/comments/{comment_id}"
        try:
            if read_first:
                _, comment = self.gh.requester.requestJsonAndCheck("GET", path)
                if comment.get("body") == body:
                    return True
            self.gh.requester.requestJsonAndCheck("PATCH", path, input={"body": body})
        except GithubException as error:
            if error.status == 404:
                return False
            raise
        return True

    def _status_comment(self, issue: Any) -> Any:
        for comment in issue.get_comments():
            if STATUS_MARKER in (comment.body or "") and self._is_ours(comment):
                return comment
        return None

    def _is_ours(self, comment: Any) -> bool:
        # A human can paste the marker; only a comment made by this App counts.
        app = comment.raw_data.get("performed_via_github_app") or {}
        return comment.user.type == "Bot" and app.get("id") == self.app_id

    def shows_status(self, number: int, state: str, comment_id: int) -> bool:
        """Tell whether the issue has exactly the state's label and still has comment_id."""
        issue = self.issue(number)
        labels = {label.name for label in issue.labels if label.name in STATE_LABELS}
        if labels != {LABEL_PREFIX + state}:
            return False
        try:
            issue.get_comment(comment_id)
        except GithubException as error:
            if error.status == 404:  # someone deleted it
                return False
            raise
        return True

    def set_state_label(self, number: int, state: str, *, last_labelled: str | None = None) -> None:
        """Give the issue exactly one `gaffer: <state>` label.

        When gaffer last labelled the issue with another state, the label is added first and
        the other state labels GitHub's answer lists are removed: two writes, no read.
        Otherwise the labels are read first, so an unchanged state costs a read, never a
        write."""
        if last_labelled is not None and last_labelled != state:
            self.writes.rewrite(lambda: self._change_state_label(number, state))
        else:
            self.writes.rewrite(lambda: self._write_state_label(number, state))

    def _change_state_label(self, number: int, state: str) -> None:
        wanted = LABEL_PREFIX + state
        for label in self._add_label(number, wanted):
            if label["name"] in STATE_LABELS and label["name"] != wanted:
                self._remove_label(number, label["name"])

    def _write_state_label(self, number: int, state: str) -> None:
        issue = self.issue(number)
        wanted = LABEL_PREFIX + state
        for label in issue.labels:
            if label.name in STATE_LABELS and label.name != wanted:
                self._remove_label(number, label.name)
        if wanted not in {label.name for label in issue.labels}:
            self._add_label(number, wanted)

    def _add_label(self, number: int, name: str) -> list[dict[str, Any]]:
        """Add a label to the issue; GitHub answers with all of the issue's labels."""
        # PyGithub sends a bare list here; GitHub documents the object form.
        _, labels = self.gh.requester.requestJsonAndCheck(
            "POST", f"/repos/{self.full_name}/issues/{number}/labels", input={"labels": [name]}
        )
        return list(labels)

    def _remove_label(self, number: int, name: str) -> None:
        # Another worker may have swapped the label a moment ago; gone is what we want.
        path = f"/repos/{self.full_name}/issues/{number}/labels/{quote(name, safe='')}"
        try:
            self.gh.requester.requestJsonAndCheck("DELETE", path)
        except GithubException as error:
            if error.status != 404:
                raise

    def issue_thread(self, number: int) -> tuple[Any, list[Any]]:
        """Return the issue and its people's comments, gaffer's left out."""
        issue = self.issue(number)
        return issue, [c for c in issue.get_comments() if not self._is_ours(c)]

    def default_branch_sha(self) -> str:
        """Return the commit the default branch points at now."""
        return str(self.repo.get_branch(self.repo.default_branch).commit.sha)

    def file_on_default_branch(self, path: str) -> str | None:
        """Return a file's text from the default branch, or None when it is not there."""
        content = self._contents(path, self.repo.default_branch)
        if content is None:
            return None
        return content.decoded_content.decode("utf-8", errors="replace")

    def small_file_on_default_branch(self, path: str, max_bytes: int) -> RepoFile | None:
        """Return a file on the default branch, with its text only if at most max_bytes."""
        return self._small_file(path, self.repo.default_branch, max_bytes)

    def recent_file_on_default_branch(self, path: str, max_bytes: int) -> RepoFile | None:
        """Return a file as of the default branch's head seen in the last minute or so.

        The head is remembered briefly and the file per (repository, head): a flood of
        commands reads neither again, and a new commit is seen once the head expires.
        """
        repo_key = self.full_name.lower()
        head = self.lookups.remember(("head", repo_key), self.default_branch_sha)
        return self.lookups.remember(
            ("file", repo_key, head, path, max_bytes),
            lambda: self._small_file(path, head, max_bytes),
        )

    def text_at(self, path: str, ref: str, max_bytes: int = 1_000_000) -> str | None:
        """Return a file's text at a commit; None when it is not a file there or too big."""
        found = self._small_file(path, ref, max_bytes)
        return None if found is None else found.text

    def _small_file(self, path: str, ref: str, max_bytes: int) -> RepoFile | None:
        content = self._contents(path, ref)
        if content is None or isinstance(content, list):  # a list is a folder's entries
            return None
        size = int(content.size)
        if size > max_bytes:  # not decoded: GitHub sends no content over 1 MB anyway
            return RepoFile(str(content.sha), size, None)
        text = content.decoded_content.decode("utf-8", errors="replace")
        return RepoFile(str(content.sha), size, text)

    def _contents(self, path: str, ref: str) -> Any:
        try:
            return self.repo.get_contents(path, ref=ref)
        except GithubException as error:
            if error.status == 404:
                return None
            raise
