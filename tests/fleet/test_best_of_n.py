"""Best-of-N: candidates of one plan run side by side, each verified, ranked on the issue;
the one a reviewer approves opens the pull request and the others are cleaned up."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from sqlalchemy import select

from bot.models import Candidate, CandidateState, Job, PlanState, Stage
from double.driver import IssueFlow
from double.origin import commit_to_origin
from tasks.gitcmd import GitError, git
from tasks.recovery.reconcile import MAX_JOB_ATTEMPTS
from tasks.worktrees import WorktreePool, mirror_path
from tests.conftest import INSTALLATION_ID, REPO
from tests.in_process import the_plan
from tests.reliability.test_recovery import (  # noqa: F401 - broker is a fixture
    add_job,
    broker,
    drafted_plan,
    reconcile_once,
    replies,
    set_plan,
    worker_died,
)
from tests.support import WEBHOOK_SECRET, wait_for

CONFIG = """\
checks:
  - name: tests
    run: "grep -q careful widgets.py"
    timeout: 30
max_retries: 0
candidates: [script, careful, hasty]
budget:
  plan_usd: 3
"""

# One script, three agents: each agent's environment picks what it writes.
BODY = """\
The widget value is wrong.

```gaffer-script
execute:
  - when:
      env_is: SCRIPT_FLAVOUR=careful
      then: [{write: {path: widgets.py, content: "VALUE = 2  # careful\\n"}}]
      else:
        - when:
            env_is: SCRIPT_FLAVOUR=hasty
            then:
              - {write: {path: widgets.py, content: "VALUE = 4\\n"}}
              - {write: {path: notes.txt, content: "while I was here\\n"}}
            else: [{write: {path: widgets.py, content: "VALUE = 3\\n"}}]
scope: [widgets.py]
```
"""


def script_like(flavour: str) -> dict:
    return {
        "command": ["{python}", "-I", "-m", "tasks.agents.script_agent", "{prompt_file}"],
        "output": "text",
        "env": [],
        "set_env": {"SCRIPT_FLAVOUR": flavour},
    }


@pytest.fixture
def flow(app, client, github, origin: Path, server_config: Path) -> IssueFlow:
    config = yaml.safe_load(server_config.read_text())
    config["agents"] = {"careful": script_like("careful"), "hasty": script_like("hasty")}
    server_config.write_text(yaml.safe_dump(config))
    commit_to_origin(origin, {".github/gaffer.yml": CONFIG}, "configure gaffer")
    return IssueFlow(app, client, github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET, body=BODY)


def candidates(app_or_wctx) -> list[Candidate]:
    db = getattr(app_or_wctx, "db", None) or app_or_wctx.extensions["gaffer_db"]
    with db.session() as session:
        return list(session.scalars(select(Candidate).order_by(Candidate.number)))


def on_origin(origin: Path, branch: str) -> bool:
    try:
        git(["rev-parse", "--verify", f"refs/heads/{branch}"], cwd=origin)
    except GitError:
        return False
    return True


def test_three_candidates_are_verified_ranked_and_the_approved_one_opens_the_pr(
    app, flow: IssueFlow, origin: Path, settings, start_worker
) -> None:
    github_worker = start_worker("github", concurrency=3, wait=False)
    agent = start_worker("agent", concurrency=3, wait=False)
    github_worker.wait_ready()
    agent.wait_ready()
    flow.open().label()
    flow.wait_state(PlanState.DRAFT)
    flow.comment("/approve x3")
    plan = flow.wait_state(PlanState.IN_REVIEW, PlanState.FAILED)
    assert plan.state == PlanState.IN_REVIEW and plan.head_sha is None and plan.branch is None

    # Each candidate ran its own agent on its own branch, within a third of the budget.
    found = candidates(app)
    assert [(c.number, c.agent, c.state) for c in found] == [
        (1, "script", CandidateState.VERIFIED),
        (2, "careful", CandidateState.VERIFIED),
        (3, "hasty", CandidateState.VERIFIED),
    ]
    assert [c.budget_usd for c in found] == [Decimal("1.0000")] * 3
    with app.extensions["gaffer_db"].session() as session:
        jobs = session.execute(
            select(Job.candidate, Job.agent).where(Job.stage == Stage.EXECUTE).order_by(Job.id)
        ).all()
    assert [tuple(row) for row in jobs] == [(1, "script"), (2, "careful"), (3, "hasty")]
    heads = {c.number: c.head_sha for c in found}
    assert len(set(heads.values())) == 3
    for each in found:
        assert flow.origin_sha(each.branch) == each.head_sha
        assert each.branch == f"gaffer/1-widgets-overflow-the-sidebar-c{each.number}"

    # Every head was verified with check runs of its own.
    tests = {
        r["head_sha"]: r["conclusion"] for r in flow.check_runs() if r["name"] == "gaffer/tests"
    }
    assert tests == {heads[1]: "failure", heads[2]: "success", heads[3]: "failure"}

    # Ranked best first: the green one, then the red one inside its scope, then the one
    # that also wrote a file outside it.
    status = wait_for(
        lambda: (text := flow.status()) and "`in_review`" in text and text,
        what="the status comment to show the plan in review",
    )
    table = status[status.index("#### Candidates, best first") :]
    rows = [line for line in table.splitlines() if re.match(r"\| \d \| c\d", line)]
    assert [row.split("|")[2].strip() for row in rows] == ["c2", "c1", "c3"]
    assert "✅ 2/2 passed" in rows[0] and "1 files" in rows[0]
    assert "2 files" in rows[2] and "| 1 |" in rows[2]  # one file outside the scope
    assert "/approve-diff <sha>" in status

    # A bare approval and a red candidate are refused, each with why.
    flow.comment("/approve-diff")
    wait_for(
        lambda: any(
            "This plan ran 3 candidates; approve one by its head" in r for r in flow.replies()
        ),
        what="the refusal of a bare /approve-diff",
    )
    flow.comment(f"/approve-diff {heads[1][:10]}")
    wait_for(
        lambda: any("not all green" in r for r in flow.replies()),
        what="the refusal of a red candidate",
    )
    assert flow.plan().branch is None and flow.github.pulls(REPO) == []

    flow.comment(f"/approve-diff {heads[2][:10]}")
    plan = flow.wait_state(PlanState.PR_OPEN)
    [pull] = flow.github.pulls(REPO)
    assert pull["head"]["sha"] == heads[2] == plan.head_sha
    assert pull["head"]["ref"] == plan.branch == found[1].branch
    assert [c.state for c in candidates(app)] == [
        CandidateState.DROPPED,
        CandidateState.CHOSEN,
        CandidateState.DROPPED,
    ]
    # The others' branches and worktrees are gone; the chosen one's branch stays.
    wait_for(
        lambda: not on_origin(origin, found[0].branch) and not on_origin(origin, found[2].branch),
        what="the dropped candidates' branches to be deleted",
    )
    assert on_origin(origin, found[1].branch)
    pool = WorktreePool(settings.home, REPO, mirror_path(settings.home, REPO))
    wait_for(
        lambda: set(pool.leases()) <= {f"plan-{plan.id}-c2"},
        what="the dropped candidates' worktrees to be removed",
    )


@pytest.mark.usefixtures("broker")
def test_a_candidate_whose_worker_died_too_often_fails_alone(
    wctx, client, github, thread, caplog
) -> None:
    plan_id = drafted_plan(wctx, client, github, thread)
    set_plan(wctx, plan_id, state=PlanState.EXECUTING, approved_revision=1)
    with wctx.db.session() as session:
        session.add_all(
            [
                Candidate(
                    plan_id=plan_id, number=1, state=CandidateState.VERIFIED, head_sha="a" * 40
                ),
                Candidate(plan_id=plan_id, number=2, state=CandidateState.RUNNING),
            ]
        )
    job_id = add_job(wctx, plan_id, "execute", candidate=2)
    worker_died(wctx, job_id, MAX_JOB_ATTEMPTS)

    reconcile_once(wctx, caplog)

    assert [c.state for c in candidates(wctx)] == [CandidateState.VERIFIED, CandidateState.FAILED]
    assert the_plan(wctx).state == PlanState.IN_REVIEW  # the other candidate waits for review
    assert any("gave candidate c2 up" in reply for reply in replies(github))
