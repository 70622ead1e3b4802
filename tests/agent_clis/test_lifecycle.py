"""The whole lifecycle with a real agent CLI: Claude Code plans, is approved, edits, is checked.

gaffer runs on the test's backend with the GitHub double; the worker's environment names
a model server gaffer has never seen (the model server on loopback) and nothing else.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
from sqlalchemy import select

from bot.models import Job, PlanState
from tasks.gitcmd import git
from tests.agent_clis.conftest import CLI_PATH, CLIS, shell_edit
from tests.in_process import InProcess
from tests.model_server import Text, model_server
from tests.reliability.conftest import send_comment

PLAN = "1. Add `hello.py`, which prints 1."


@pytest.fixture
def with_claude(here: InProcess, monkeypatch) -> InProcess:
    """This worker's default agent is Claude Code, the pinned CLI, shown in the sandbox."""
    wctx = here.wctx
    wctx.settings = dataclasses.replace(wctx.settings, default_agent="claude")  # type: ignore[attr-defined]
    monkeypatch.setitem(wctx.settings.server_config, "sandbox", {"read_only": [str(CLIS)]})  # type: ignore[attr-defined]
    wctx.__dict__.pop("sandbox", None)
    monkeypatch.setenv("PATH", f"{CLI_PATH}:{os.environ['PATH']}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    return here


def test_claude_code_plans_edits_and_is_checked_through_gaffer(
    with_claude: InProcess, monkeypatch
) -> None:
    here = with_claude
    replies = [Text(PLAN), *shell_edit("Bash", description="write hello.py")]
    with model_server(replies) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        here.flow.label()
        plan = here.settle()
        assert plan.state == PlanState.DRAFT, plan.last_error
        assert PLAN in here.flow.status()
        send_comment(here, "/approve r1")
        plan = here.settle()
    assert plan.state == PlanState.IN_REVIEW, plan.last_error
    listing = git(["ls-tree", "-r", "--name-only", plan.head_sha or ""], cwd=here.flow.origin)
    assert "hello.py" in listing.split()
    shown = git(["show", f"{plan.head_sha}:hello.py"], cwd=here.flow.origin)
    assert shown.strip() == "print(1)"
    runs = {run["name"]: run["conclusion"] for run in here.flow.check_runs()}
    assert runs["gaffer/tests"] == "success"
    with here.wctx.db.session() as session:  # type: ignore[attr-defined]
        costs = {job.stage: job.cost_usd for job in session.scalars(select(Job))}
    assert costs["plan"] > 0 and costs["execute"] > 0
