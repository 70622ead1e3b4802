"""D. Who may: writers, listed approvers and approver teams act; everyone else is told why."""

from __future__ import annotations

import pytest

from bot.models import PlanState
from double.driver import IssueFlow
from double.origin import commit_to_origin
from tests.conftest import INSTALLATION_ID, REPO
from tests.in_process import CONFIG, InProcess
from tests.reliability.conftest import seen, send_comment
from tests.support import WEBHOOK_SECRET, wait_for

REFUSED = [
    pytest.param("reader", "read", id="approve by a read-only user is refused"),
    pytest.param("stranger", None, id="approve by a non-collaborator is refused"),
    pytest.param("triager", "triage", id="approve by a triager is refused"),
]


@pytest.mark.parametrize(("login", "permission"), REFUSED)
def test_approve_without_write_access_is_refused_and_changes_nothing(
    drafted: InProcess, login: str, permission: str | None
) -> None:
    if permission:
        drafted.flow.github.permissions[(REPO, login)] = permission
    payload = send_comment(drafted, "/approve", login=login)
    after = seen(drafted, payload)
    [reply] = after.replies
    assert reply.startswith("> /approve") and "needs write access" in reply
    assert (after.state, after.reactions, after.approvals) == (PlanState.DRAFT, [], [])
    assert after.jobs == ["plan:r1"]


ACCEPTED = [
    pytest.param(
        "org-member",
        "write",
        id="a private org member with write access is accepted though GitHub says CONTRIBUTOR",
    ),
    pytest.param("keeper", "maintain", id="a maintainer is accepted"),
    pytest.param("owner", "admin", id="an admin is accepted"),
]


@pytest.mark.parametrize(("login", "permission"), ACCEPTED)
def test_approve_by_a_writer_is_accepted_whatever_author_association_says(
    drafted: InProcess, login: str, permission: str
) -> None:
    drafted.flow.github.permissions[(REPO, login)] = permission
    # send_comment's payload says CONTRIBUTOR, as GitHub does for private org members.
    payload = send_comment(drafted, "/approve", login=login)
    assert payload["comment"]["author_association"] == "CONTRIBUTOR"
    after = seen(drafted, payload)
    assert (after.state, after.reactions, after.replies) == (PlanState.APPROVED, ["eyes"], [])
    assert after.approvals == [("plan", 1, None, login)]


TEAMS = [
    pytest.param(
        "active", PlanState.APPROVED, id="an active member of an approver team may approve"
    ),
    pytest.param("pending", PlanState.DRAFT, id="an invited, not yet joined team member may not"),
    pytest.param(None, PlanState.DRAFT, id="someone outside the approver teams may not"),
]


@pytest.mark.parametrize(("membership", "state"), TEAMS)
def test_approver_teams_from_the_default_branch_grant_approval(
    drafted: InProcess, membership: str | None, state: PlanState
) -> None:
    github = drafted.flow.github
    commit_to_origin(
        drafted.flow.origin,
        {".github/gaffer.yml": CONFIG + "approver_teams: [acme/reviewers]\n"},
        "team approvers",
    )
    github.permissions[(REPO, "teammate")] = "read"
    if membership:
        github.team_members[("acme", "reviewers")] = {"teammate": membership}
    payload = send_comment(drafted, "/approve", login="teammate")
    after = seen(drafted, payload)
    assert after.state == state
    if state == PlanState.DRAFT:
        [reply] = after.replies
        assert "needs write access" in reply and "approver_teams" in reply
        assert (after.reactions, after.approvals) == ([], [])
    else:
        assert (after.reactions, after.replies) == (["eyes"], [])
        assert after.approvals == [("plan", 1, None, "teammate")]


UNVERIFIABLE = [
    pytest.param(
        r"/collaborators/maintainer/permission", 500, "", id="a permission API error is refused"
    ),
    pytest.param(
        r"/collaborators/maintainer/permission",
        504,
        "",
        id="a permission API timeout is refused",
    ),
    pytest.param(
        r"/orgs/acme/teams/reviewers/memberships/",
        502,
        "approver_teams: [acme/reviewers]\n",
        id="a team lookup error is refused",
    ),
]


@pytest.mark.parametrize(("path", "status", "config"), UNVERIFIABLE)
def test_a_permission_lookup_that_fails_refuses_with_could_not_verify(
    drafted: InProcess, path: str, status: int, config: str
) -> None:
    login = "reader" if config else "maintainer"
    if config:
        commit_to_origin(drafted.flow.origin, {".github/gaffer.yml": CONFIG + config}, "teams")
    drafted.flow.github.fail_next("GET", path, status, times=10)
    payload = send_comment(drafted, "/approve", login=login)
    after = seen(drafted, payload)
    [reply] = after.replies
    assert "could not verify" in reply and "try again" in reply
    assert (after.state, after.reactions, after.approvals) == (PlanState.DRAFT, [], [])


def test_an_approver_listed_on_the_default_branch_may_approve(drafted: InProcess) -> None:
    commit_to_origin(
        drafted.flow.origin, {".github/gaffer.yml": CONFIG + "approvers: [stranger]\n"}, "approver"
    )
    payload = send_comment(drafted, "/approve", login="stranger")
    after = seen(drafted, payload)
    assert (after.state, after.reactions, after.replies) == (PlanState.APPROVED, ["eyes"], [])
    assert after.approvals == [("plan", 1, None, "stranger")]


def test_a_diff_that_edits_the_approver_list_grants_nothing(here: InProcess) -> None:
    here.flow.body = (
        "```gaffer-script\nexecute:\n  - write:\n      path: .github/gaffer.yml\n"
        '      content: "approvers: [stranger]\\n"\n```\n'
    )
    plan = here.to_review()
    payload = send_comment(here, f"/approve-diff {plan.head_sha}", login="stranger")
    after = seen(here, payload)
    assert (after.state, after.reactions, after.pulls) == (PlanState.IN_REVIEW, [], 0)
    assert "needs write access" in after.replies[-1]
    assert [kind for kind, *_ in after.approvals] == ["plan"]


SELF_APPROVAL = [
    pytest.param(
        False,
        PlanState.IN_REVIEW,
        id="the issue author may not approve their own diff by default",
    ),
    pytest.param(
        True, PlanState.PR_OPEN, id="the issue author may approve their own diff when allowed"
    ),
]


@pytest.mark.parametrize(("allowed", "state"), SELF_APPROVAL)
def test_self_approval_follows_the_configured_policy(
    here: InProcess, allowed: bool, state: PlanState
) -> None:
    if allowed:
        commit_to_origin(
            here.flow.origin,
            {".github/gaffer.yml": CONFIG + "allow_self_approval: true\n"},
            "let authors approve their diffs",
        )
    here.flow.github.permissions[(REPO, "reporter")] = "write"
    plan = here.to_review()
    payload = send_comment(here, f"/approve-diff {plan.head_sha}", login="reporter")
    plan = here.settle()
    after = seen(here, payload)
    assert after.state == state
    assert after.pulls == (1 if allowed else 0)
    if allowed:
        assert after.reactions == ["eyes"]
        assert ("diff", None, plan.head_sha, "reporter") in after.approvals
    else:
        assert after.reactions == []
        assert "may not approve its diff" in after.replies[-1]


def test_a_user_who_lost_write_access_before_the_pr_blocks_it(here: InProcess) -> None:
    plan = here.to_review()
    here.accept(f"/approve-diff {plan.head_sha}")
    here.flow.github.permissions[(REPO, "maintainer")] = "read"  # between the command and the PR
    plan = here.settle()
    assert plan.state == PlanState.IN_REVIEW
    assert here.flow.github.pulls(REPO) == []
    assert any("no longer has write access" in c["body"] for c in here.flow.comments())


def test_through_a_real_worker_a_readers_approve_is_refused_with_one_reply(
    app, client, github, origin, worker
) -> None:
    flow = IssueFlow(app, client, github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET).open()
    flow.label()
    flow.wait_state(PlanState.DRAFT)
    payload = flow.comment("/approve", login="reader")
    [reply] = wait_for(flow.replies, what="the refusal")
    assert reply.startswith("> /approve") and "needs write access" in reply
    assert flow.plan().state == PlanState.DRAFT  # type: ignore[union-attr]
    assert github.reactions(payload["comment"]["id"]) == []
