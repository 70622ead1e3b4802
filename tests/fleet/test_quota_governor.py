"""One quota governor per provider account: a storm of plans against a provider that
refuses every run for a while costs the runs already in flight, no more."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from bot.models import Job, Plan, PlanState
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


def test_a_provider_refusing_every_run_for_a_while_costs_only_the_runs_in_flight(
    app, client, github, origin: Path, start_worker, settings, until_file: Path
) -> None:
    commit_to_origin(origin, {".github/gaffer.yml": "agent: limited\n"}, "configure gaffer")
    until_file.write_text(str(time.time() + LIMITED_FOR_S))
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
    # Only the runs that had started before the first refusal came back were refused.
    assert 1 <= refused_runs(settings.home) <= AGENT_SLOTS
    with app.extensions["gaffer_db"].session() as session:
        jobs = session.scalars(select(Job).where(Job.stage == "plan")).all()
    assert len(jobs) == ISSUES
    parked = [job for job in jobs if job.parked_s > 0]
    assert len(parked) >= ISSUES - AGENT_SLOTS  # each waited, and its wait is counted
    for number in range(1, ISSUES + 1):
        comments = dataclasses.replace(flow, number=number).comments()
        holds = [c["body"] for c in comments if "holding the plan" in c["body"]]
        assert len(holds) <= 1, holds  # one word on the issue, not one per look
