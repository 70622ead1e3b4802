"""A worker started with GAFFER_LOG_FORMAT=json writes JSON lines naming what they are about."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from bot.models import Delivery, Job, PlanState
from double.driver import IssueFlow, wait_for
from double.origin import commit_to_origin
from tests.conftest import INSTALLATION_ID, REPO
from tests.in_process import CONFIG
from tests.support import WEBHOOK_SECRET


@pytest.fixture
def json_workers(monkeypatch, start_worker):
    monkeypatch.setenv("GAFFER_LOG_FORMAT", "json")
    return start_worker("github", concurrency=2), start_worker("agent", concurrency=1)


def records(log: str) -> list[dict]:
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


def test_worker_logs_name_the_delivery_plan_and_job(
    app, client, github, origin: Path, json_workers
) -> None:
    commit_to_origin(origin, {".github/gaffer.yml": CONFIG}, "configure gaffer")
    flow = IssueFlow(app, client, github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET).open()
    flow.label()
    plan = flow.wait_state(PlanState.DRAFT)
    with app.extensions["gaffer_db"].session() as session:
        [job_id] = session.scalars(select(Job.id).where(Job.plan_id == plan.id)).all()
        [delivery_id] = session.scalars(select(Delivery.id)).all()
    github_worker, agent_worker = json_workers
    ended = f"job {job_id} (plan) ended done"
    wait_for(lambda: ended in agent_worker.log(), what="the job's last line")
    [line] = [each for each in records(agent_worker.log()) if each["message"] == ended]
    assert (line["plan"], line["job"], line["level"]) == (plan.id, job_id, "INFO")
    handled = [
        each
        for each in records(github_worker.log())
        if each["message"] == f"delivery {delivery_id} (issues labeled) handled"
    ]
    assert [each["delivery"] for each in handled] == [delivery_id]
