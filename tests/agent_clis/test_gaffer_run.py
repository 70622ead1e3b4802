"""From outside: `gaffer run` with the real Claude Code as its agent, driven over HTTP.

gaffer runs as an operator starts it, one `gaffer run` process (web front, workers, the
scheduler) on the test's backend. GitHub is the double on loopback; the model is the model
server, which gaffer knows only from ANTHROPIC_BASE_URL in the worker's environment.
Signed webhooks reach gaffer's front over HTTP, as GitHub's do. One run carries three
issues: the whole lifecycle to a pull request, a long issue that then spends its budget,
and a rate limit that parks a plan until the provider's reset.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from sqlalchemy import select

from bot.models import Job, PlanState
from bot.settings import Settings
from double.driver import IssueFlow
from double.origin import commit_to_origin
from tests.agent_clis.conftest import CLI_PATH, CLIS, shell_edit
from tests.conftest import APP_ID, INSTALLATION_ID, REPO
from tests.model_server import ModelServer, Refusal, Text, model_server
from tests.support import WEBHOOK_SECRET, WebProcess

CONFIG = "checks:\n  - name: tests\n    run: test -f hello.py\n    timeout: 30\n"
PLAN = "1. Add `hello.py`, which prints 1."
# A body and four comments, each just under what a prompt keeps of one (60,000 and 20,000
# characters): together past Linux's 128 KiB limit for one argument.
LONG_BODY, LONG_COMMENT = 59_000, 19_000


@pytest.fixture
def models() -> Iterator[ModelServer]:
    """The model's answers for the three issues, in the order gaffer asks for them."""
    replies = [
        Text(PLAN),  # issue 1: plan, then execute in two calls
        *shell_edit("Bash", description="write hello.py"),
        Text("1. Read the long report, then fix it."),  # issue 2: plan
        # issue 2: execute, whose first call alone is over the budget, answered slowly
        Text("word " * 40, input_tokens=200_000, pieces=40, seconds_between=0.25),
        Refusal(429, "rate limited", {"retry-after": "3"}),  # issue 3: plan, parked
        Text("1. Plan written after the reset."),
    ]
    with model_server(replies) as server:
        yield server


@pytest.fixture
def gaffer(
    settings: Settings, github_server: str, origin: Path, models: ModelServer, tmp_path: Path
) -> Iterator[WebProcess]:
    """`gaffer run`, with Claude Code as the server's agent."""
    commit_to_origin(origin, {".github/gaffer.yml": CONFIG}, "configure gaffer")
    server_config = tmp_path / "gaffer-server.yml"
    config = {
        "agent_slots": 1,
        "agent_timeout_s": 120,
        "agent_idle_timeout_s": 60,
        "github_seconds_between_requests": 0,
        "github_seconds_between_writes": 0,
        "sandbox": {"read_only": [str(CLIS)]},
    }
    server_config.write_text(yaml.safe_dump(config))
    env = {
        **os.environ,
        "PATH": f"{CLI_PATH}:{os.environ['PATH']}",
        "WEBHOOK_SECRET": WEBHOOK_SECRET,
        "GAFFER_DEFAULT_AGENT": "claude",
        "GAFFER_HOME": str(settings.home),
        "DATABASE_URL": settings.database_url,
        "BROKER_URL": settings.broker_url,
        "GAFFER_BROKER_PREFIX": settings.broker_key_prefix,
        "GITHUB_API_URL": github_server,
        "APP_ID": str(APP_ID),
        "PRIVATE_KEY": settings.private_key or "",
        "GAFFER_CONFIG": str(server_config),
        "ANTHROPIC_BASE_URL": models.url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
    }
    running = WebProcess.start(env, tmp_path / "gaffer-run.log", command="run")
    try:
        yield running
    finally:
        running.stop()


def issue(
    app, gaffer: WebProcess, github, origin: Path, number: int, title: str, body: str = "."
) -> IssueFlow:
    flow = IssueFlow(
        app, gaffer, github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET, number, title, body
    )
    return flow.open()


def jobs_of(app, plan_id: int) -> list[Job]:
    with app.extensions["gaffer_db"].session() as session:
        return list(session.scalars(select(Job).where(Job.plan_id == plan_id).order_by(Job.id)))


def asked_of(models: ModelServer, words: str) -> list[dict]:
    return [r for r in models.message_requests() if words in str(r["body"]["messages"])]


def test_gaffer_run_takes_issues_to_a_pull_request_a_budget_stop_and_a_parked_plan(
    app, gaffer: WebProcess, github, origin: Path, models: ModelServer, settings: Settings
) -> None:
    # 1. Label, plan, /approve, the edit and its checks, /approve-diff, the pull request.
    first = issue(app, gaffer, github, origin, 1, "Say hello")
    first.label()
    assert first.wait_state(PlanState.DRAFT).last_error is None
    assert PLAN in first.status()
    first.comment("/approve")
    plan = first.wait_state(PlanState.IN_REVIEW, PlanState.FAILED)
    assert plan.state == PlanState.IN_REVIEW, plan.last_error
    assert {run["name"]: run["conclusion"] for run in first.check_runs()}["gaffer/tests"] == (
        "success"
    )
    first.comment(f"/approve-diff {plan.head_sha}")
    first.wait_state(PlanState.PR_OPEN)
    [pull] = github.pulls(REPO)
    assert pull["head"]["sha"] == plan.head_sha
    costs = {job.stage: job.cost_usd for job in jobs_of(app, plan.id)}
    assert costs["plan"] > 0 and costs["execute"] > 0

    # 2. A long issue reaches the model whole; its execution stops at its budget.
    long_body = "x" * LONG_BODY + " END OF THE BODY"
    second = issue(app, gaffer, github, origin, 2, "The report is long", long_body)
    for part in range(1, 5):
        said = f"Part {part}: " + "x" * LONG_COMMENT + f" END OF PART {part}"
        github.add_human_comment(REPO, 2, login="reporter", body=said)
    second.label()
    assert second.wait_state(PlanState.DRAFT).last_error is None
    [planning] = asked_of(models, "END OF PART 4")
    assert "END OF THE BODY" in str(planning["body"]["messages"])
    assert len(str(planning["body"]["messages"])) > 128 * 1024
    second.comment("/budget 0.05")
    second.comment("/approve")
    stopped = second.wait_state(PlanState.FAILED)
    assert "reached its budget of $0.05" in (stopped.last_error or "")
    assert "reached its budget of $0.05" in second.status()
    execute = jobs_of(app, stopped.id)[-1]
    assert execute.stage == "execute" and execute.input_tokens == 200_000
    models.wait_until_streams_end()
    assert models.streams_cut == 1  # stopped while the answer still streamed

    # 3. A rate limit parks the plan until the provider's reset; then it is written.
    third = issue(app, gaffer, github, origin, 3, "After the limit")
    third.label()
    written = third.wait_state(PlanState.DRAFT)
    assert "Plan written after the reset." in third.status()
    assert any("gaffer is holding the plan" in c["body"] for c in third.comments())
    [planned] = jobs_of(app, written.id)
    assert planned.parked_until is not None and planned.attempts == 1

    # Nothing but the model server was reached by any agent.
    logs = (settings.home / "jobs").rglob("egress.log")
    tried = {line.split()[1] for log in logs for line in log.read_text().splitlines()}
    assert tried == {models.url.removeprefix("http://")}
