"""The whole lifecycle through a real worker, real git and the GitHub double."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from sqlalchemy import select

from bot.models import Approval, Job, PlanState
from double.driver import IssueFlow
from double.origin import commit_to_origin
from tests.conftest import INSTALLATION_ID, REPO
from tests.support import WEBHOOK_SECRET, running_with, wait_for

CONFIG = """\
checks:
  - name: tests
    run: "grep -q good widgets.py"
    timeout: 30
max_retries: {retries}
protected_paths: ["secrets/**"]
"""


def script(execute: str, fix: str = "") -> str:
    """An issue body carrying steps for the script agent."""
    block = f"execute:\n{textwrap.indent(execute, '  ')}"
    if fix:
        block += f"\nfix:\n{textwrap.indent(fix, '  ')}"
    return f"The widget is wrong.\n\n```gaffer-script\n{block}\n```\n"


GOOD = "- write: {path: widgets.py, content: \"VALUE = 'good'\\n\"}\n"
BAD = "- write: {path: widgets.py, content: \"VALUE = 'bad'\\n\"}\n"


@pytest.fixture
def flow(app, client, github, origin: Path) -> IssueFlow:
    commit_to_origin(origin, {".github/gaffer.yml": CONFIG.format(retries=2)}, "configure gaffer")
    return IssueFlow(app, client, github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET)


def approved(flow: IssueFlow) -> None:
    flow.open().label()
    flow.wait_state(PlanState.DRAFT)
    flow.comment("/approve")


def test_labeled_to_pull_request_from_the_approved_sha(flow: IssueFlow, worker) -> None:
    flow.body = script(GOOD)
    main_before = flow.origin_sha("main")
    approved(flow)
    plan = flow.wait_state(PlanState.IN_REVIEW)
    assert flow.origin_sha(plan.branch) == plan.head_sha  # the branch is on the origin
    runs = {run["name"]: run for run in flow.check_runs()}
    assert runs["gaffer/tests"]["conclusion"] == "success"
    assert runs["gaffer/tests"]["head_sha"] == plan.head_sha
    assert runs["gaffer/diff"]["conclusion"] in ("success", "neutral")
    # A new branch and a commit gaffer just made: GitHub holds no protection for the one and
    # no check run for the other, so gaffer asks for neither before it writes.
    asked = [r.path for r in flow.github.requests if r.method == "GET"]
    assert not [path for path in asked if "/branches/gaffer/" in path or "/check-runs" in path]
    assert f"/approve-diff {plan.head_sha}" in flow.status()
    flow.comment(f"/approve-diff {plan.head_sha[:10]}")
    plan = flow.wait_state(PlanState.PR_OPEN)
    [pull] = flow.github.pulls(REPO)
    assert pull["head"]["sha"] == plan.head_sha and pull["head"]["ref"] == plan.branch
    assert f"Closes #{flow.number}" in pull["body"]
    assert flow.origin_sha("main") == main_before  # the default branch is untouched
    assert plan.branch == "gaffer/1-widgets-overflow-the-sidebar"


def test_a_failing_check_goes_back_to_the_agent_and_turns_green(flow: IssueFlow, worker) -> None:
    flow.body = script(BAD, fix=GOOD)
    approved(flow)
    plan = flow.wait_state(PlanState.IN_REVIEW)
    conclusions = [r["conclusion"] for r in flow.check_runs() if r["name"] == "gaffer/tests"]
    assert conclusions == ["failure", "success"]  # one run per head
    assert plan.fix_rounds == 1


def test_retries_exhausted_fail_the_plan_and_offer_retry(flow: IssueFlow, worker) -> None:
    flow.body = script(BAD, fix=BAD.replace("bad", "worse"))
    approved(flow)
    plan = flow.wait_state(PlanState.FAILED)
    assert plan.fix_rounds == 2
    assert "`tests`" in flow.status() and "/retry" in flow.status()


def test_revise_after_approve_diff_voids_the_approval(flow: IssueFlow, worker) -> None:
    flow.body = script(GOOD)
    approved(flow)
    first = flow.wait_state(PlanState.IN_REVIEW)
    flow.comment("/revise Also mention the change in the README.")
    second = wait_for(
        lambda: (
            (p := flow.plan())
            and p.head_sha != first.head_sha
            and p.state == PlanState.IN_REVIEW
            and p
        ),
        what="a new verified head",
    )
    flow.comment(f"/approve-diff {first.head_sha}")
    wait_for(
        lambda: any(
            first.head_sha[:7] in r and "not the verified head" in r for r in flow.replies()
        ),
        what="the refusal",
    )
    assert flow.github.pulls(REPO) == []
    assert second.head_sha != first.head_sha


def test_cancel_mid_run_kills_the_agent_and_cleans_up(flow: IssueFlow, worker) -> None:
    flow.body = script("- print: started\n- sleep: 60\n" + GOOD)
    approved(flow)
    flow.wait_state(PlanState.EXECUTING)
    wait_for(lambda: running_with("tasks.agents.script_agent"), what="the agent to run")
    flow.comment("/cancel")
    flow.wait_state(PlanState.CANCELLED)
    with flow.app.extensions["gaffer_db"].session() as session:
        wait_for(
            lambda: session.scalars(select(Job).where(Job.stage == "execute")).one().finished_at,
            what="the job to stop",
        )
    assert flow.github.pulls(REPO) == []
    # The sleeping agent is gone: nothing runs the script any more.
    wait_for(lambda: not running_with("tasks.agents.script_agent"), what="the agent to be killed")


def test_a_check_that_hangs_is_timed_out(flow: IssueFlow, worker) -> None:
    commit_to_origin(
        flow.origin,
        {
            ".github/gaffer.yml": CONFIG.format(retries=0).replace(
                'run: "grep -q good widgets.py"\n    timeout: 30', 'run: "sleep 30"\n    timeout: 1'
            )
        },
        "a hanging check",
    )
    flow.body = script(GOOD)
    approved(flow)
    flow.wait_state(PlanState.FAILED)
    [run] = [r for r in flow.check_runs() if r["name"] == "gaffer/tests"]
    assert run["conclusion"] == "timed_out"


def test_a_diff_touching_a_protected_path_fails_the_diff_check(flow: IssueFlow, worker) -> None:
    flow.body = script(GOOD + '- write: {path: secrets/key.txt, content: "x\\n"}\n')
    commit_to_origin(flow.origin, {".github/gaffer.yml": CONFIG.format(retries=0)}, "no retries")
    approved(flow)
    flow.wait_state(PlanState.FAILED)
    [diff] = [r for r in flow.check_runs() if r["name"] == "gaffer/diff"]
    assert diff["conclusion"] == "failure"
    assert "secrets/key.txt" in diff["output"]["summary"]


def _execute_job(flow: IssueFlow) -> Job:
    with flow.app.extensions["gaffer_db"].session() as session:
        return session.scalars(select(Job).where(Job.stage == "execute")).one()


def test_approval_rows_bind_what_was_approved(flow: IssueFlow, worker) -> None:
    flow.body = script(GOOD)
    approved(flow)
    plan = flow.wait_state(PlanState.IN_REVIEW)
    flow.comment(f"/approve-diff {plan.head_sha}")
    flow.wait_state(PlanState.PR_OPEN)
    with flow.app.extensions["gaffer_db"].session() as session:
        kinds = {(a.kind, a.revision, a.sha) for a in session.scalars(select(Approval))}
    assert kinds == {("plan", 1, None), ("diff", None, plan.head_sha)}
