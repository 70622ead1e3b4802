"""Commands on an issue, handled in this process: who may, what is refused, what happens once."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from bot.handlers.plan_commands import REPLAN_FEEDBACK
from bot.models import Delivery, Job, Plan, PlanState
from tasks.deliveries import process_delivery
from tasks.jobs import run_job
from tests.conftest import INSTALLATION_ID, REPO
from tests.conftest_git import commit_to_origin
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


REFUSED = [
    pytest.param(
        "/approved", "maintainer", "did you mean /approve", id="approved suggests approve"
    ),
    pytest.param(
        "/approve once the tests pass",
        "maintainer",
        "Usage: /approve",
        id="approve with prose is refused",
    ),
    pytest.param(
        "/approve\n/reject", "maintainer", "One command per comment", id="two commands are refused"
    ),
    pytest.param(
        "/approve r7",
        "maintainer",
        "r7 is not the current plan",
        id="approving another revision is refused",
    ),
    pytest.param("/approve", "reader", "needs write access", id="approve by a read-only user"),
    pytest.param("/approve", "stranger", "needs write access", id="approve by a non-collaborator"),
    pytest.param(
        "/approve-diff abc1234",
        "maintainer",
        "not ready",
        id="approve-diff before the diff exists is not ready",
    ),
]


@pytest.mark.parametrize(("body", "login", "reason"), REFUSED)
def test_refused_commands_get_one_reply_and_change_nothing(
    wctx, client, github, thread, draft, body, login, reason
) -> None:
    payload = command(github, thread, body, login=login)
    handle(wctx, client, "issue_comment", payload)
    [reply] = replies(github)
    assert reason in reply and reply.startswith("> " + body.splitlines()[0])
    assert the_plan(wctx).state == PlanState.DRAFT
    assert github.reactions(payload["comment"]["id"]) == []


def test_permission_lookup_failure_refuses_with_could_not_verify(
    wctx, client, github, thread, draft
) -> None:
    github.fail_next("GET", r"/collaborators/maintainer/permission", 500, times=10)
    handle(wctx, client, "issue_comment", command(github, thread, "/approve"))
    [reply] = replies(github)
    assert "could not verify" in reply
    assert the_plan(wctx).state == PlanState.DRAFT


def test_a_private_org_member_with_write_access_is_accepted(
    wctx, client, github, thread, draft
) -> None:
    github.permissions[(REPO, "org-member")] = "write"
    payload = command(github, thread, "/approve", login="org-member")
    payload["comment"]["author_association"] = "CONTRIBUTOR"  # what GitHub misreports
    handle(wctx, client, "issue_comment", payload)
    assert the_plan(wctx).state == PlanState.APPROVED


@pytest.mark.parametrize(
    ("membership", "state"),
    [
        pytest.param(
            "active", PlanState.APPROVED, id="an active member of an approver team may approve"
        ),
        pytest.param(
            "pending", PlanState.DRAFT, id="an invited, not yet joined team member may not"
        ),
        pytest.param(None, PlanState.DRAFT, id="someone outside the approver teams may not"),
    ],
)
def test_approver_teams_from_the_default_branch_grant_approval(
    wctx, client, github, origin, thread, draft, membership, state
) -> None:
    commit_to_origin(
        origin, {".github/gaffer.yml": "approver_teams: [acme/reviewers]\n"}, "team approvers"
    )
    github.permissions[(REPO, "teammate")] = "read"
    if membership:
        github.team_members[("acme", "reviewers")] = {"teammate": membership}
    handle(wctx, client, "issue_comment", command(github, thread, "/approve", login="teammate"))
    assert the_plan(wctx).state == state
    if state == PlanState.DRAFT:
        [reply] = replies(github)
        assert "needs write access" in reply and "approver_teams" in reply


def test_a_failing_team_lookup_refuses_with_could_not_verify(
    wctx, client, github, origin, thread, draft
) -> None:
    commit_to_origin(
        origin, {".github/gaffer.yml": "approver_teams: [acme/reviewers]\n"}, "team approvers"
    )
    github.fail_next("GET", r"/orgs/acme/teams/reviewers/memberships/", 502, times=10)
    handle(wctx, client, "issue_comment", command(github, thread, "/approve", login="reader"))
    [reply] = replies(github)
    assert "could not verify" in reply
    assert the_plan(wctx).state == PlanState.DRAFT


@pytest.mark.parametrize(
    ("body", "extra"),
    [
        pytest.param("I think we should /approve this", {}, id="approve mid-sentence is ignored"),
        pytest.param("> /approve", {}, id="approve in a quote is ignored"),
        pytest.param("```\n/approve\n```", {}, id="approve in a fenced block is ignored"),
        pytest.param("<!-- /approve -->", {}, id="approve in an html comment is ignored"),
        pytest.param("/approve", {"action": "edited"}, id="an edited comment is ignored"),
        pytest.param("/approve", {"kind": "Bot"}, id="a comment by a bot is ignored"),
    ],
)
def test_text_that_is_not_a_command_does_nothing(
    wctx, client, github, thread, draft, body, extra
) -> None:
    before = len(github.comments(REPO, 1))
    payload = command(github, thread, body, **extra)
    event = "issue_comment"
    deliver(client, event, payload)
    with wctx.db.session() as session:
        pending = session.scalars(select(Delivery.id).where(Delivery.processed_at.is_(None))).all()
    for delivery_id in pending:
        process_delivery(wctx, delivery_id=delivery_id)
    assert len(github.comments(REPO, 1)) == before + 1  # only the human comment itself
    assert the_plan(wctx).state == PlanState.DRAFT


def test_two_deliveries_of_one_comment_act_once(wctx, client, github, thread, draft) -> None:
    payload = command(github, thread, "/approve")
    handle(wctx, client, "issue_comment", payload, delivery_id="first")
    deliver(client, "issue_comment", payload, delivery_id="second", hook_id="9999")
    handle(wctx, client, "issue_comment", payload, delivery_id="first")
    assert [r["content"] for r in github.reactions(payload["comment"]["id"])] == ["eyes"]
    with wctx.db.session() as session:
        assert session.query(Job).filter(Job.stage == "execute").count() == 1


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


def test_closing_the_issue_cancels_the_plan(wctx, client, github, thread, draft) -> None:
    repo, issue_ = thread
    closed = {
        **labeled(repo, {**issue_, "state": "closed"}, installation_id=INSTALLATION_ID),
        "action": "closed",
    }
    handle(wctx, client, "issues", closed)
    assert the_plan(wctx).state == PlanState.CANCELLED


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
