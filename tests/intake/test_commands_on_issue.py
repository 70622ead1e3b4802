"""What the plan commands do on an issue, handled in this process.

Who may act, what is refused and what happens once: tests/reliability/test_b_… to test_e_….
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from bot.handlers.plan_commands import REPLAN_FEEDBACK
from bot.models import Job, Plan, PlanState
from tasks.jobs import run_job
from tests.conftest import INSTALLATION_ID, REPO, command_payload
from tests.in_process import receive, the_plan
from tests.support import labeled


def run_queued_jobs(wctx) -> None:
    with wctx.db.session() as session:
        ids = session.scalars(select(Job.id).where(Job.state == "queued", Job.stage != "execute"))
        ids = list(ids)
    for job_id in ids:
        run_job(wctx, job_id=job_id)


@pytest.fixture
def draft(wctx, client, github, thread) -> Plan:
    """Issue #1 labeled and its first plan revision posted."""
    repo, issue_ = thread
    github.add_label(REPO, 1, "gaffer")
    receive(wctx, client, "issues", labeled(repo, issue_, installation_id=INSTALLATION_ID))
    run_queued_jobs(wctx)
    plan = the_plan(wctx)
    assert plan.state == PlanState.DRAFT
    return plan


def replies(github) -> list[str]:
    return [c["body"] for c in github.comments(REPO, 1) if c["body"].startswith("> ")]


def test_revise_writes_a_new_revision_and_voids_nothing_approved(
    wctx, client, github, thread, draft
) -> None:
    receive(
        wctx, client, "issue_comment", command_payload(github, thread, "/revise Keep the old CSS.")
    )
    assert the_plan(wctx).state == PlanState.PLANNING
    run_queued_jobs(wctx)
    plan = the_plan(wctx)
    assert (plan.state, plan.current_revision) == (PlanState.DRAFT, 2)
    [status] = [c for c in github.comments(REPO, 1) if "gaffer:status" in c["body"]]
    assert "Plan r2" in status["body"] and "Keep the old CSS." in status["body"]
    receive(wctx, client, "issue_comment", command_payload(github, thread, "/approve r1"))
    assert "r1 is not the current plan" in replies(github)[-1]


def test_reject_ends_the_plan_and_the_label_says_so(wctx, client, github, thread, draft) -> None:
    receive(wctx, client, "issue_comment", command_payload(github, thread, "/reject not now"))
    assert the_plan(wctx).state == PlanState.REJECTED
    assert github.issue_labels(REPO, 1) == ["gaffer", "gaffer: rejected"]


def test_help_lists_every_command(wctx, client, github, thread, draft) -> None:
    from bot.commands import REGISTRY

    receive(
        wctx, client, "issue_comment", command_payload(github, thread, "/help", login="stranger")
    )
    [help_text] = [
        c["body"]
        for c in github.comments(REPO, 1)
        if "/approve-diff" in c["body"] and "gaffer:status" not in c["body"]
    ]
    assert all(f"/{spec.name}" in help_text for spec in REGISTRY)


@pytest.mark.parametrize("name", ["expand", "split"])
def test_expand_and_split_ask_for_a_new_revision(wctx, client, github, thread, draft, name) -> None:
    receive(wctx, client, "issue_comment", command_payload(github, thread, f"/{name}"))
    run_queued_jobs(wctx)
    plan = the_plan(wctx)
    assert (plan.state, plan.current_revision) == (PlanState.DRAFT, 2)
    with wctx.db.session() as session:
        [job] = session.scalars(select(Job).where(Job.key == "plan:r2")).all()
        assert job.feedback == REPLAN_FEEDBACK[name]
