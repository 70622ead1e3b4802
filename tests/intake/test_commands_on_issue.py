"""What the plan commands do on an issue, handled in this process.

Who may act, what is refused and what happens once: tests/reliability/test_b_… to test_e_….
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from bot.handlers.plan_commands import REPLAN_FEEDBACK
from bot.models import Delivery, Job, Plan, PlanState
from tasks.deliveries import process_delivery
from tasks.jobs import run_job
from tests.conftest import INSTALLATION_ID, REPO
from tests.support import commented, deliver, issue, labeled, repository

TITLE = "Widgets overflow the sidebar"


@pytest.fixture
def thread(github, origin: Path):
    github.add_issue(REPO, 1, title=TITLE, body="The sidebar clips long names.", author="reporter")
    return repository(REPO, str(origin), repo_id=github.repo_id(REPO)), issue(1, title=TITLE)


def handle(wctx, client, event: str, payload: dict, delivery_id: str | None = None) -> None:
    """Receive a delivery and process it here, as the worker would."""
    deliver(client, event, payload, delivery_id=delivery_id)
    with wctx.db.session() as session:
        ids = session.scalars(select(Delivery.id).where(Delivery.processed_at.is_(None))).all()
    for delivery_id_ in ids:
        process_delivery(wctx, delivery_id=delivery_id_)


def run_queued_jobs(wctx) -> None:
    with wctx.db.session() as session:
        ids = session.scalars(select(Job.id).where(Job.state == "queued", Job.stage != "execute"))
        ids = list(ids)
    for job_id in ids:
        run_job(wctx, job_id=job_id)


def the_plan(wctx) -> Plan:
    with wctx.db.session() as session:
        [plan] = session.scalars(select(Plan)).all()
        return plan


@pytest.fixture
def draft(wctx, client, github, thread) -> Plan:
    """Issue #1 labeled and its first plan revision posted."""
    repo, issue_ = thread
    handle(wctx, client, "issues", labeled(repo, issue_, installation_id=INSTALLATION_ID))
    run_queued_jobs(wctx)
    plan = the_plan(wctx)
    assert plan.state == PlanState.DRAFT
    return plan


def command(github, thread, body: str, login: str = "maintainer", **extra) -> dict:
    repo, issue_ = thread
    comment = github.add_human_comment(REPO, 1, login=login, body=body)
    return commented(
        repo,
        issue_,
        body,
        login=login,
        comment_id=comment["id"],
        installation_id=INSTALLATION_ID,
        **extra,
    )


def replies(github) -> list[str]:
    return [c["body"] for c in github.comments(REPO, 1) if c["body"].startswith("> ")]


def test_revise_writes_a_new_revision_and_voids_nothing_approved(
    wctx, client, github, thread, draft
) -> None:
    handle(wctx, client, "issue_comment", command(github, thread, "/revise Keep the old CSS."))
    assert the_plan(wctx).state == PlanState.PLANNING
    run_queued_jobs(wctx)
    plan = the_plan(wctx)
    assert (plan.state, plan.current_revision) == (PlanState.DRAFT, 2)
    [status] = [c for c in github.comments(REPO, 1) if "gaffer:status" in c["body"]]
    assert "Plan r2" in status["body"] and "Keep the old CSS." in status["body"]
    handle(wctx, client, "issue_comment", command(github, thread, "/approve r1"))
    assert "r1 is not the current plan" in replies(github)[-1]


def test_reject_ends_the_plan_and_the_label_says_so(wctx, client, github, thread, draft) -> None:
    handle(wctx, client, "issue_comment", command(github, thread, "/reject not now"))
    assert the_plan(wctx).state == PlanState.REJECTED
    assert github.issue_labels(REPO, 1) == ["gaffer: rejected"]


def test_help_lists_every_command(wctx, client, github, thread, draft) -> None:
    from bot.commands import REGISTRY

    handle(wctx, client, "issue_comment", command(github, thread, "/help", login="stranger"))
    [help_text] = [
        c["body"]
        for c in github.comments(REPO, 1)
        if "/approve-diff" in c["body"] and "gaffer:status" not in c["body"]
    ]
    assert all(f"/{spec.name}" in help_text for spec in REGISTRY)


@pytest.mark.parametrize("name", ["expand", "split"])
def test_expand_and_split_ask_for_a_new_revision(wctx, client, github, thread, draft, name) -> None:
    handle(wctx, client, "issue_comment", command(github, thread, f"/{name}"))
    run_queued_jobs(wctx)
    plan = the_plan(wctx)
    assert (plan.state, plan.current_revision) == (PlanState.DRAFT, 2)
    with wctx.db.session() as session:
        [job] = session.scalars(select(Job).where(Job.key == "plan:r2")).all()
        assert job.feedback == REPLAN_FEEDBACK[name]
