"""One quota governor per provider account: a storm of plans against a provider that
refuses every run for a while costs one refused run, however many agent slots there are."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select

from bot import views
from bot.models import Job, Plan, PlanState, aware
from double.driver import IssueFlow
from double.origin import commit_to_origin
from tests.conftest import INSTALLATION_ID, REPO
from tests.support import WEBHOOK_SECRET, wait_for, write_server_config

FAKES = Path(__file__).resolve().parents[1] / "fixtures" / "fake_agents"
ISSUES = 10
AGENT_SLOTS = 2
LIMITED_FOR_S = 20
REFUSAL = "Claude AI usage limit reached"


@pytest.fixture
def until_file(tmp_path: Path) -> Path:
    return tmp_path / "limit" / "until"


@pytest.fixture
def server_config(tmp_path: Path, until_file: Path) -> Path:
    until_file.parent.mkdir()
    until_file.write_text("0")
    agent = {
        "command": ["{python}", str(FAKES / "limited.py"), "{prompt_file}", str(until_file)],
        "output": "claude-json",
    }
    return write_server_config(
        tmp_path / "gaffer-server.yml", {"limited": agent}, [FAKES, until_file.parent]
    )


def refused_runs(home: Path) -> int:
    """The agent runs the provider refused, read from every job's transcript."""
    return sum(log.read_text().count(REFUSAL) for log in home.glob("jobs/*/*/agent.log"))


def test_a_provider_refusing_every_run_for_a_while_costs_one_run(
    app, client, github, origin: Path, start_worker, settings, until_file: Path
) -> None:
    commit_to_origin(origin, {".github/gaffer.yml": "agent: limited\n"}, "configure gaffer")
    limited_until = time.time() + LIMITED_FOR_S
    until_file.write_text(str(limited_until))
    github_worker = start_worker("github", concurrency=3, wait=False)
    agent_worker = start_worker("agent", concurrency=AGENT_SLOTS, wait=False)
    github_worker.wait_ready()
    agent_worker.wait_ready()
    flow = IssueFlow(app, client, github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET)
    for number in range(1, ISSUES + 1):
        issue = dataclasses.replace(flow, number=number).open()
        issue.label()

    def all_drafted() -> bool:
        with app.extensions["gaffer_db"].session() as session:
            states = session.scalars(select(Plan.state)).all()
        return len(states) == ISSUES and set(states) == {PlanState.DRAFT}

    wait_for(all_drafted, timeout=LIMITED_FOR_S + 120, what="a draft plan on every issue")
    # The account was cold: one job probed it and was refused; the others waited for it.
    assert refused_runs(settings.home) == 1
    with app.extensions["gaffer_db"].session() as session:
        jobs = session.scalars(select(Job).where(Job.stage == "plan")).all()
        shown = [views.job_row(job) for job in jobs]  # as the API and the dashboard show them
    assert len(jobs) == ISSUES
    reset = datetime.fromtimestamp(limited_until, UTC)
    assert all(job.finished_at and aware(job.finished_at) >= reset for job in jobs)
    # Each waited out the limit, and its wait is counted: no longer than the limit lasted.
    assert all(0 < row["parked_s"] <= LIMITED_FOR_S + 10 for row in shown), shown
    for number in range(1, ISSUES + 1):
        comments = dataclasses.replace(flow, number=number).comments()
        holds = [c["body"] for c in comments if "holding the plan" in c["body"]]
        assert len(holds) <= 1, holds  # one word on the issue, not one per look
