"""Labeled issue → plan comment → /approve, through a real worker, git origin and GitHub double."""

from __future__ import annotations

from sqlalchemy import select

from bot.models import Approval, AuditEvent, Job, Plan, PlanState
from tasks.gitcmd import git
from tests.conftest import INSTALLATION_ID, REPO, TITLE, command_payload, status_comments
from tests.support import deliver, labeled, wait_for


def plans(app) -> list[Plan]:
    with app.extensions["gaffer_db"].session() as session:
        return list(session.scalars(select(Plan)))


def plan_in(app, state: PlanState) -> Plan | None:
    found = plans(app)
    return found[0] if found and found[0].state == state else None


def labeled_and_drafted(app, client, github, thread) -> Plan:
    repo, issue_ = thread
    github.add_label(REPO, 1, "gaffer")
    response = deliver(
        client,
        "issues",
        labeled(repo, issue_, installation_id=INSTALLATION_ID),
        delivery_id="label-1",
    )
    assert response.status_code == 202
    plan = wait_for(lambda: plan_in(app, PlanState.DRAFT), what="the plan to be drafted")
    # The label is set last, once the status comment shows the draft.
    drafted = ["gaffer", "gaffer: draft"]  # the trigger label stays beside the state label
    wait_for(lambda: github.issue_labels(REPO, 1) == drafted, what="the state label")
    return plan


def test_labeled_issue_gets_one_status_comment_with_the_agents_plan(
    app, client, github, thread, worker
) -> None:
    plan = labeled_and_drafted(app, client, github, thread)
    [comment] = wait_for(
        lambda: [c for c in status_comments(github) if "r1" in c["body"]], what="the plan comment"
    )
    assert TITLE in comment["body"]  # the script agent's plan names the issue
    assert "`draft`" in comment["body"] and "/approve r1" in comment["body"]
    assert comment["user"]["login"].endswith("[bot]")
    drafted = ["gaffer", "gaffer: draft"]  # the trigger label stays beside the state label
    wait_for(lambda: github.issue_labels(REPO, 1) == drafted, what="the state label")
    assert plan.current_revision == 1


def test_approve_by_a_writer_approves_the_revision(
    app, client, github, thread, worker, origin
) -> None:
    labeled_and_drafted(app, client, github, thread)
    payload = command_payload(github, thread, "/approve", login="maintainer")
    assert deliver(client, "issue_comment", payload).status_code == 202
    # The worker starts on the approved plan at once, so the plan moves on past `approved`.
    plan = wait_for(lambda: [p for p in plans(app) if p.approved_revision], what="approval")[0]
    assert plan.approved_revision == 1 and plan.base_sha == git(["rev-parse", "main"], cwd=origin)
    wait_for(lambda: github.reactions(payload["comment"]["id"]), what="the 👀 reaction")
    assert [r["content"] for r in github.reactions(payload["comment"]["id"])] == ["eyes"]
    assert len(status_comments(github)) == 1
    with app.extensions["gaffer_db"].session() as session:
        [approval] = session.scalars(select(Approval)).all()
        assert (approval.approver, approval.revision, approval.kind) == ("maintainer", 1, "plan")
        stages = sorted(job.stage for job in session.scalars(select(Job)))
        assert stages == ["execute", "plan"]
        actions = [e.action for e in session.scalars(select(AuditEvent).order_by(AuditEvent.id))]
        assert actions[:2] == ["plan_posted", "approve"]
