"""Secrets never leave in gaffer's words: what an agent or a check prints is masked when posted.

The agent cannot read gaffer's secrets (its environment is filtered), so these tests play an
attacker who learned one and makes the agent or a check print it, plainly and in base64,
hoping gaffer will carry it into a comment, a check run or a pull request.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.models import PlanState
from double.driver import IssueFlow
from double.origin import commit_to_origin
from tests.conftest import INSTALLATION_ID, REPO
from tests.in_process import CONFIG, InProcess
from tests.support import WEBHOOK_SECRET

B64_RUN = re.compile(r"[A-Za-z0-9+/\-_]{12,}")


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# An environment dump, encoded whole: the secret sits somewhere inside the base64.
ENV_DUMP = b64(f"PATH=/usr/bin\nWEBHOOK_SECRET={WEBHOOK_SECRET}\nLANG=C.UTF-8\n")
PRINTED = [f"WEBHOOK_SECRET={WEBHOOK_SECRET}", b64(WEBHOOK_SECRET), ENV_DUMP]


def revealed(text: str) -> str:
    """Return text with every base64-looking run in it decoded, as an attacker would try."""
    decoded = [text]
    for run in B64_RUN.findall(text):
        standard = run.replace("-", "+").replace("_", "/")
        for start in range(4):  # a run cut out of a longer text may start mid-group
            chunk = standard[start:][: len(standard[start:]) // 4 * 4]
            try:
                decoded.append(base64.b64decode(chunk).decode(errors="replace"))
            except binascii.Error:
                continue
    return "\n".join(decoded)


def gaffers_words(flow: IssueFlow) -> list[tuple[str, str]]:
    """Return everything gaffer wrote on GitHub: its comments, check runs and pull requests."""
    github = flow.github
    words = [
        (f"comment {c['id']}", c["body"])
        for c in flow.comments()
        if c["user"]["login"] == github.bot_login
    ]
    for run in flow.check_runs():
        output = run.get("output") or {}
        shown = "\n".join(output.get(key) or "" for key in ("title", "summary", "text"))
        words.append((f"check run {run['name']}", shown))
    for pull in github.pulls(flow.full_name):
        words.append((f"pull request #{pull['number']}", f"{pull['title']}\n{pull['body']}"))
    return words


def assert_nothing_leaked(flow: IssueFlow) -> None:
    words = gaffers_words(flow)
    assert words, "gaffer said something"
    for place, text in words:
        assert WEBHOOK_SECRET not in revealed(text), f"the webhook secret leaked into {place}"


def script(stage: str) -> str:
    """An issue body whose agent prints the secret in the stage and fails."""
    steps = [{"print": line} for line in PRINTED] + [{"fail": f"leaking {WEBHOOK_SECRET}"}]
    return f"```gaffer-script\n{stage}: {json.dumps(steps)}\n```\n"


@pytest.fixture
def open_issue(app, client, github_http, origin: Path, wctx) -> Callable[..., InProcess]:
    """Open issue #1 with body on a repository configured with config; drive it here."""

    def open_(body: str, config: str = CONFIG, title: str = "Widgets overflow") -> InProcess:
        commit_to_origin(origin, {".github/gaffer.yml": config}, "configure gaffer")
        flow = IssueFlow(
            app,
            client,
            github_http,
            origin,
            REPO,
            INSTALLATION_ID,
            WEBHOOK_SECRET,
            title=title,
            body=body,
        )
        return InProcess(flow.open(), wctx)

    return open_


@pytest.mark.parametrize(
    "stage",
    [
        pytest.param("plan", id="an agent that prints the secret while planning and fails"),
        pytest.param("execute", id="an agent that prints the secret while executing and fails"),
    ],
)
def test_an_agent_that_prints_a_secret_has_it_masked_on_the_issue(
    open_issue: Callable[..., InProcess], settings, stage: str
) -> None:
    here = open_issue(script(stage))
    here.flow.label()
    plan = here.settle()
    if stage == "execute":
        plan = here.comment("/approve")
    assert plan.state == PlanState.FAILED
    agent_logs = "".join(p.read_text() for p in settings.home.glob("jobs/*/*/agent.log"))
    assert all(line in agent_logs for line in PRINTED), "the agent printed the secret"
    status = here.flow.status()
    assert "WEBHOOK_SECRET=***" in status and "leaking ***" in status, status
    assert_nothing_leaked(here.flow)


def test_a_check_that_prints_a_secret_has_it_masked_in_its_check_run(
    open_issue: Callable[..., InProcess],
) -> None:
    command = "; ".join(f"echo {shlex.quote(line)}" for line in PRINTED) + "; exit 1"
    config = f"checks:\n  - name: leak\n    run: {json.dumps(command)}\n    timeout: 30\n"
    here = open_issue("Print the environment.", config + "max_retries: 0\n")
    here.flow.label()
    here.settle()
    here.comment("/approve")
    [run] = [r for r in here.flow.check_runs() if r["name"] == "gaffer/leak"]
    assert run["conclusion"] == "failure"
    assert "WEBHOOK_SECRET=***" in run["output"]["text"], run["output"]["text"]
    assert_nothing_leaked(here.flow)


def test_an_issue_that_quotes_a_secret_has_it_masked_in_the_pull_request(
    open_issue: Callable[..., InProcess],
) -> None:
    here = open_issue(
        "```gaffer-script\nexecute:\n  - write: {path: fix.txt, content: ok}\n```\n",
        title=f"Rotate {WEBHOOK_SECRET}",
    )
    plan = here.to_review()
    plan = here.comment(f"/approve-diff {plan.head_sha}")
    assert plan.state == PlanState.PR_OPEN, plan.last_error
    [pull] = here.flow.github.pulls(REPO)
    assert pull["title"] == "Rotate *** (#1)"
    assert_nothing_leaked(here.flow)


def test_an_installation_token_is_masked_from_the_moment_it_is_minted(
    open_issue: Callable[..., InProcess],
) -> None:
    here = open_issue("The sidebar clips long names.")
    here.flow.label()
    here.settle()
    issued = here.flow.github.issued_tokens[-1]
    client = here.wctx.client(INSTALLATION_ID, REPO)  # type: ignore[attr-defined]
    client.reply(1, f"the token is {issued.token}, or {b64('x-access-token:' + issued.token)}")
    assert here.flow.comments()[-1]["body"] == "the token is ***, or ***"
