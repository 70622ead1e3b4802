"""The GitHub double: GitHub's contract, and behaviour a PyGithub client can rely on."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import jwt
import pytest
import requests
import responses
from github import Auth, Github, GithubException
from github.ContentFile import ContentFile

from double import contract, webhooks
from double.app import GitHubState, create_github_double
from double.loopback import serve_on_loopback
from tests.double_responses import mock_with_responses

API_URL = "https://api.github.test"
REPO = "octo/widgets"


def body(value: object) -> str:
    return json.dumps(value)


# --------------------------------------------------------------------------- the contract

REFUSED = [
    pytest.param(
        "GET",
        "/repos/o/r/no-such-thing",
        None,
        "no path in GitHub's REST API matches",
        id="unknown path",
    ),
    pytest.param(
        "PUT",
        "/repos/o/r/issues/1/comments",
        body({"body": "x"}),
        "method PUT is not defined",
        id="wrong method",
    ),
    pytest.param(
        "POST",
        "/repos/o/r/issues/1/labels",
        body(["bug"]),
        "['bug'] is not of type 'object'",
        id="bare array of labels (PyGithub's form)",
    ),
    pytest.param(
        "POST",
        "/repos/o/r/issues/1/comments",
        body({"text": "x"}),
        "'body' is a required property",
        id="comment without body",
    ),
    pytest.param(
        "POST",
        "/repos/o/r/issues/comments/5/reactions",
        body({"content": "wave"}),
        "'wave' is not one of",
        id="unknown reaction",
    ),
    pytest.param(
        "GET",
        "/search/issues",
        None,
        "required query parameter 'q' is missing",
        id="missing required query parameter",
    ),
    pytest.param(
        "GET",
        "/repos/o/r/pulls?state=merged",
        None,
        "'merged' is not one of",
        id="query value outside its enum",
    ),
    pytest.param(
        "GET",
        "/repos/o/r/issues/one",
        None,
        "is not of type 'integer'",
        id="non-numeric issue number",
    ),
    pytest.param(
        "POST", "/repos/o/r/issues/1/comments", "{not json", "not JSON", id="body that is not JSON"
    ),
    pytest.param(
        "DELETE",
        "/repos/o/r/issues/1/labels/bug",
        body({"x": 1}),
        "takes no request body",
        id="body on an operation without one",
    ),
]

ACCEPTED = [
    pytest.param(
        "POST",
        "https://api.github.test/repos/o/r/issues/1/labels",
        body({"labels": ["bug"]}),
        id="labels in object form",
    ),
    pytest.param(
        "POST",
        "/repos/o/r/check-runs",
        body(
            {
                "name": "tests",
                "head_sha": "a" * 40,
                "status": "completed",
                "conclusion": "success",
                "output": {"title": "t", "summary": "s"},
            }
        ),
        id="completed check run",
    ),
    pytest.param(
        "PATCH",
        "/repos/o/r/issues/1",
        body({"state": "closed", "milestone": None}),
        id="nullable field set to null",
    ),
    pytest.param(
        "GET",
        "https://ghe.test/api/v3/repos/o/r/contents/src/app.py?ref=main",
        None,
        id="Enterprise prefix and a path with slashes",
    ),
    pytest.param(
        "GET", "/repos/o/r/branches/gaffer/12-fix-sidebar", None, id="branch name with a slash"
    ),
    pytest.param("GET", "/repos/o/r/git/ref/heads/main", None, id="git ref"),
    pytest.param(
        "DELETE", "/repos/o/r/issues/1/labels/gaffer%3A%20draft", None, id="escaped label name"
    ),
    pytest.param("GET", "/repos/o/r/compare/main...feature", None, id="compare"),
]


@pytest.mark.parametrize(("method", "url", "payload", "reason"), REFUSED)
def test_the_contract_refuses(method: str, url: str, payload: str | None, reason: str) -> None:
    with pytest.raises(contract.ContractError) as refused:
        contract.validate_request(method, url, payload)
    assert reason in str(refused.value)


@pytest.mark.parametrize(("method", "url", "payload"), ACCEPTED)
def test_the_contract_accepts(method: str, url: str, payload: str | None) -> None:
    contract.validate_request(method, url, payload)


def test_a_missing_spec_says_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(contract.SpecNotInstalledError, match="npm ci --prefix tests/contract"):
        contract.load_contract(tmp_path / "api.github.com.json")


# --------------------------------------------------------------------------- fixtures


def git(origin: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(origin), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def add_branch(origin: Path, name: str, message: str = "work") -> str:
    """Add a branch with one new commit on top of main, without a checkout."""
    sha = git(
        origin,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit-tree",
        "main^{tree}",
        "-p",
        "main",
        "-m",
        message,
    )
    git(origin, "update-ref", f"refs/heads/{name}", sha)
    return sha


@pytest.fixture
def double(origin: Path) -> GitHubState:
    _, state = create_github_double(app_id=4242)
    state.add_repo(REPO, origin, installation_id=77)
    state.add_issue(REPO, 1, title="Widgets overflow", body="They do.", author="reporter")
    state.permissions[(REPO, "maintainer")] = "maintain"
    return state


@pytest.fixture
def served(double: GitHubState) -> Iterator[GitHubState]:
    """The double behind `responses` at API_URL."""
    assert double.flask_app is not None
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        mock_with_responses(rsps, double.flask_app, API_URL)
        yield double


@pytest.fixture
def gh(served: GitHubState) -> Iterator[Github]:
    client = pygithub(API_URL)
    yield client
    client.close()


def pygithub(base_url: str) -> Github:
    """A PyGithub client without its default pauses between requests."""
    return Github(
        base_url=base_url,
        auth=Auth.Token("t"),
        seconds_between_requests=0,
        seconds_between_writes=0,
    )


def call(method: str, path: str, payload: object = None, token: str = "t") -> requests.Response:
    """Send one raw request to the double through `responses`."""
    return requests.request(
        method,
        f"{API_URL}{path}",
        json=payload,
        headers={"Authorization": f"token {token}"},
        timeout=5,
    )


# --------------------------------------------------------------------------- through PyGithub


def test_a_comment_is_created_as_the_apps_bot_and_edited(gh: Github, served: GitHubState) -> None:
    issue = gh.get_repo(REPO).get_issue(1)
    created = issue.create_comment("<!-- gaffer:status --> planning")
    created.edit("<!-- gaffer:status --> draft")

    [comment] = served.comments(REPO, 1)
    assert comment["body"] == "<!-- gaffer:status --> draft"
    assert comment["user"]["login"] == "gaffer[bot]" and comment["user"]["type"] == "Bot"
    assert comment["performed_via_github_app"]["id"] == 4242
    assert [c.id for c in issue.get_comments()] == [created.id]


def test_reacting_twice_keeps_one_reaction(gh: Github, served: GitHubState) -> None:
    human = served.add_human_comment(REPO, 1, login="maintainer", body="/approve")
    comment = gh.get_repo(REPO).get_issue(1).get_comment(human["id"])
    comment.create_reaction("eyes")
    comment.create_reaction("eyes")

    assert [r["content"] for r in served.reactions(human["id"])] == ["eyes"]
    statuses = [
        call(
            "POST", f"/repos/{REPO}/issues/comments/{human['id']}/reactions", {"content": content}
        ).status_code
        for content in ("eyes", "rocket")
    ]
    assert statuses == [200, 201]


@pytest.mark.parametrize(
    ("login", "expected"),
    [
        pytest.param("maintainer", "write", id="maintain role reads as write"),
        pytest.param("stranger", None, id="non-collaborator is a 404"),
    ],
)
def test_permission_is_read_from_state(gh: Github, login: str, expected: str | None) -> None:
    repo = gh.get_repo(REPO)
    if expected is None:
        with pytest.raises(GithubException) as missing:
            repo.get_collaborator_permission(login)
        assert missing.value.status == 404
    else:
        assert repo.get_collaborator_permission(login) == expected


def test_a_check_run_needs_a_commit_the_origin_has(
    gh: Github, served: GitHubState, origin: Path
) -> None:
    repo = gh.get_repo(REPO)
    head = git(origin, "rev-parse", "main")
    run = repo.create_check_run(name="gaffer/tests", head_sha=head, status="in_progress")
    run.edit(conclusion="success", output={"title": "Tests", "summary": "12 passed"})

    with pytest.raises(GithubException) as refused:
        repo.create_check_run(name="gaffer/tests", head_sha="0" * 40)
    assert refused.value.status == 422
    [stored] = served.check_runs(REPO)
    assert (stored["head_sha"], stored["conclusion"]) == (head, "success")
    assert [r.name for r in repo.get_commit(head).get_check_runs()] == ["gaffer/tests"]


def test_pygithubs_bare_label_array_is_refused_as_a_contract_violation(
    gh: Github, served: GitHubState
) -> None:
    with pytest.raises(GithubException) as refused:
        gh.get_repo(REPO).get_issue(1).add_to_labels("bug")
    assert refused.value.status == 422
    assert "is not of type 'object'" in served.contract_errors.pop()
    assert served.issue_labels(REPO, 1) == []


def test_files_and_branches_come_from_the_origin(gh: Github, origin: Path) -> None:
    repo = gh.get_repo(REPO)
    readme = repo.get_contents("README.md", ref="main")
    assert isinstance(readme, ContentFile) and readme.decoded_content == b"# widgets\n"
    root = repo.get_contents("")
    assert isinstance(root, list) and {e.path for e in root} >= {"README.md", "widgets.py"}
    assert repo.get_branch("main").commit.sha == git(origin, "rev-parse", "main")
    with pytest.raises(GithubException) as missing:
        repo.get_contents("no/such/file.txt")
    assert missing.value.status == 404


def test_a_second_pull_request_for_one_branch_is_refused(
    gh: Github, served: GitHubState, origin: Path
) -> None:
    head = add_branch(origin, "gaffer/1-widgets")
    repo = gh.get_repo(REPO)
    pull = repo.create_pull(
        base="main", head="octo:gaffer/1-widgets", title="Fix", body="Closes #1"
    )

    with pytest.raises(GithubException) as refused:
        repo.create_pull(base="main", head="octo:gaffer/1-widgets", title="Again", body="")
    assert refused.value.status == 422
    assert pull.head.sha == head
    assert [p.number for p in repo.get_pulls(head="octo:gaffer/1-widgets")] == [pull.number]


def test_a_persons_and_a_forks_pull_requests_are_theirs_and_listed_by_head_owner(
    gh: Github, served: GitHubState, origin: Path, tmp_path: Path
) -> None:
    add_branch(origin, "gaffer/1-widgets")
    fork = tmp_path / "fork.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(origin), str(fork)], check=True)
    served.add_repo("mallory/widgets", fork, installation_id=78)
    mine = served.open_pull_as(
        REPO, login="mallory", head="gaffer/1-widgets", base="main", title="Mine"
    )
    forked = served.open_pull_as(
        REPO,
        login="mallory",
        head="gaffer/1-widgets",
        base="main",
        title="From my fork",
        head_repo="mallory/widgets",
    )
    repo = gh.get_repo(REPO)
    assert [p.number for p in repo.get_pulls(head="octo:gaffer/1-widgets")] == [mine["number"]]
    assert [p.number for p in repo.get_pulls(head="mallory:gaffer/1-widgets")] == [forked["number"]]
    pull = repo.get_pull(forked["number"])
    assert (pull.user.login, pull.user.type) == ("mallory", "User")
    assert (pull.head.label, pull.head.repo.full_name) == (
        "mallory:gaffer/1-widgets",
        "mallory/widgets",
    )


def test_an_enterprise_base_url_keeps_its_prefix(double: GitHubState) -> None:
    assert double.flask_app is not None
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        mock_with_responses(rsps, double.flask_app, "https://ghe.test/api/v3")
        client = pygithub("https://ghe.test/api/v3")
        issue = client.get_repo(REPO).get_issue(1)
        issue.create_comment("hello")
        client.close()
    assert issue.url == "https://ghe.test/api/v3/repos/octo/widgets/issues/1"
    assert double.contract_errors == []


# --------------------------------------------------------------------------- raw HTTP


def test_each_request_records_its_token(served: GitHubState) -> None:
    call("GET", f"/repos/{REPO}", token="ghs_first")
    call("GET", f"/repos/{REPO}/issues/1", token="ghs_second")
    assert served.tokens_used() == ["ghs_first", "ghs_second"]


def test_an_installation_token_stops_working_when_it_expires(served: GitHubState) -> None:
    served.token_lifetime = timedelta(0)
    issued = requests.post(
        f"{API_URL}/app/installations/77/access_tokens",
        json={},
        headers={"Authorization": "Bearer a.b.c"},
        timeout=5,
    )
    assert issued.status_code == 201
    assert call("GET", f"/repos/{REPO}", token=issued.json()["token"]).status_code == 401


def app_jwt(app_id: int = 4242, *, lifetime_s: int = 540) -> str:
    """Return a JWT shaped like the App's; the double checks its claims, not its signature."""
    now = int(time.time())
    claims = {"iat": now - 60, "exp": now - 60 + lifetime_s, "iss": str(app_id)}
    return jwt.encode(claims, "not the App key: the double checks claims only", algorithm="HS256")


# Tokens are made when the test runs, not when it is collected: a JWT lives minutes.
INSTALLATION_ASKED_WITH = [
    pytest.param(app_jwt, 200, id="the App's JWT is answered"),
    pytest.param(lambda: "ghs_installation_token", 401, id="an installation token is refused"),
    pytest.param(lambda: app_jwt(app_id=1), 401, id="another App's JWT is refused"),
    pytest.param(lambda: app_jwt(lifetime_s=30), 401, id="an expired JWT is refused"),
    pytest.param(
        lambda: app_jwt(lifetime_s=3600), 401, id="a JWT living over 10 minutes is refused"
    ),
]


@pytest.mark.parametrize(("token", "status"), INSTALLATION_ASKED_WITH)
def test_a_repositorys_installation_is_told_only_to_the_app(
    served: GitHubState, token: Callable[[], str], status: int
) -> None:
    answer = call("GET", f"/repos/{REPO}/installation", token=token())
    assert answer.status_code == status, answer.json()
    if status == 200:
        assert (answer.json()["id"], answer.json()["account"]["login"]) == (77, "octo")
    assert served.contract_errors == []


def test_a_repository_the_app_is_not_on_has_no_installation(served: GitHubState) -> None:
    assert call("GET", "/repos/octo/elsewhere/installation", token=app_jwt()).status_code == 404


def test_a_request_without_credentials_is_refused(served: GitHubState) -> None:
    assert requests.get(f"{API_URL}/repos/{REPO}", timeout=5).status_code == 401


def test_a_timeout_after_success_still_performs_the_write(served: GitHubState) -> None:
    served.fail_next("POST", r"/issues/1/comments$", 502, after_success=True)
    answer = call("POST", f"/repos/{REPO}/issues/1/comments", {"body": "hello"})
    assert answer.status_code == 502
    assert [c["body"] for c in served.comments(REPO, 1)] == ["hello"]


def test_a_secondary_rate_limit_answers_403_with_retry_after(served: GitHubState) -> None:
    served.fail_next("GET", r"/permission$", 403, headers={"Retry-After": "1"}, times=2)
    path = f"/repos/{REPO}/collaborators/maintainer/permission"
    answers = [call("GET", path) for _ in range(3)]
    assert [a.status_code for a in answers] == [403, 403, 200]
    assert answers[0].headers["Retry-After"] == "1"
    assert "secondary rate limit" in answers[0].json()["message"]


def test_a_contract_violation_is_answered_422_and_remembered(served: GitHubState) -> None:
    answer = call("POST", f"/repos/{REPO}/issues/1/labels", ["bug"])
    assert answer.status_code == 422
    assert "Contract violation" in answer.json()["message"]
    assert len(served.contract_errors) == 1


def test_comments_are_paginated_with_a_link_header(served: GitHubState) -> None:
    for n in range(3):
        served.add_human_comment(REPO, 1, login="reporter", body=f"comment {n}")
    first = call("GET", f"/repos/{REPO}/issues/1/comments?per_page=2")
    assert [c["body"] for c in first.json()] == ["comment 0", "comment 1"]
    assert first.links["next"]["url"].endswith("page=2")


def test_contents_are_base64_like_githubs(served: GitHubState) -> None:
    answer = call("GET", f"/repos/{REPO}/contents/README.md").json()
    assert answer["encoding"] == "base64"
    assert base64.b64decode(answer["content"]) == b"# widgets\n"


def test_the_loopback_server_serves_worker_processes(double: GitHubState) -> None:
    assert double.flask_app is not None
    with serve_on_loopback(double.flask_app) as base_url:
        answer = requests.get(
            f"{base_url}/repos/{REPO}", headers={"Authorization": "token t"}, timeout=5
        )
    assert answer.json()["full_name"] == REPO
    assert answer.json()["url"] == f"{base_url}/repos/{REPO}"


def test_a_user_has_the_same_id_in_webhook_payloads_as_in_the_api(served) -> None:
    via_api = call("GET", f"/repos/{REPO}/issues/1").json()["user"]
    assert via_api["login"] == "reporter"
    assert webhooks.user("reporter")["id"] == via_api["id"]
