"""D and E of RELIABILITY.md: who may approve the diff, and what an approval is bound to."""

from __future__ import annotations

import pytest

from bot.models import PlanState
from tasks.gitcmd import git
from tests.conftest import REPO
from tests.conftest_git import commit_to_origin
from tests.in_process import CONFIG, InProcess


def test_approve_diff_for_a_sha_that_is_not_the_head_is_refused_with_the_head_shown(
    here: InProcess,
) -> None:
    plan = here.to_review()
    plan = here.comment("/approve-diff 0123456789abcdef")
    assert plan.state == PlanState.IN_REVIEW
    assert plan.head_sha in here.flow.replies()[-1]


@pytest.mark.parametrize(
    ("allowed", "state"),
    [
        pytest.param(
            False,
            PlanState.IN_REVIEW,
            id="the issue author may not approve their own diff by default",
        ),
        pytest.param(
            True, PlanState.PR_OPEN, id="the issue author may approve their own diff when allowed"
        ),
    ],
)
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
    plan = here.comment(f"/approve-diff {plan.head_sha}", login="reporter")
    assert plan.state == state
    assert (here.flow.github.pulls(REPO) != []) == allowed


def test_a_diff_that_edits_the_approver_list_grants_nothing(here: InProcess) -> None:
    here.flow.body = (
        "```gaffer-script\nexecute:\n  - write:\n      path: .github/gaffer.yml\n"
        '      content: "approvers: [stranger]\\n"\n```\n'
    )
    plan = here.to_review()
    plan = here.comment(f"/approve-diff {plan.head_sha}", login="stranger")
    assert plan.state == PlanState.IN_REVIEW
    assert "needs write access" in here.flow.replies()[-1]
    assert here.flow.github.pulls(REPO) == []


def test_a_user_who_lost_write_access_before_the_pr_blocks_it(here: InProcess) -> None:
    plan = here.to_review()
    here.accept(f"/approve-diff {plan.head_sha}")
    here.flow.github.permissions[(REPO, "maintainer")] = "read"  # between the command and the PR
    plan = here.settle()
    assert plan.state == PlanState.IN_REVIEW
    assert here.flow.github.pulls(REPO) == []
    assert any("no longer has write access" in c["body"] for c in here.flow.comments())


def test_if_the_branch_moved_after_approval_no_pr_opens(here: InProcess) -> None:
    plan = here.to_review()
    here.accept(f"/approve-diff {plan.head_sha}")
    _push_to(here, plan.branch or "", {"human.txt": "a force-push by a person\n"})
    plan = here.settle()
    assert plan.state == PlanState.IN_REVIEW
    assert here.flow.github.pulls(REPO) == []
    assert any("moved" in c["body"] for c in here.flow.comments())


def test_approve_diff_before_the_diff_is_verified_is_not_ready(here: InProcess) -> None:
    here.flow.label()
    here.settle()
    plan = here.comment("/approve-diff abcdef1")
    assert plan.state == PlanState.DRAFT
    assert "not ready" in here.flow.replies()[-1]
    assert "0 changes" not in here.flow.replies()[-1]


def test_the_issue_closed_mid_run_stops_the_job_and_nothing_opens(here: InProcess) -> None:
    here.flow.label()
    here.settle()
    here.flow.comment("/approve")
    payload = here.flow.issue | {"state": "closed"}
    from tests.support import deliver, labeled

    closed = labeled(here.flow.repo, payload, installation_id=here.flow.installation_id) | {
        "action": "closed"
    }
    deliver(here.flow.client, "issues", closed)
    plan = here.settle()
    assert plan.state == PlanState.CANCELLED
    assert here.flow.github.pulls(REPO) == []


def test_a_forged_marker_in_a_human_comment_is_ignored(here: InProcess) -> None:
    here.flow.github.add_human_comment(
        REPO, 1, login="mallory", body="<!-- gaffer:status -->\nApproved, ship it!"
    )
    here.flow.label()
    plan = here.settle()
    ours = [c for c in here.flow.comments() if c["user"]["login"].endswith("[bot]")]
    assert len(ours) == 1 and plan.status_comment_id == ours[0]["id"]
    forged = [c for c in here.flow.comments() if c["user"]["login"] == "mallory"]
    assert forged[0]["body"].endswith("ship it!")  # untouched


def _push_to(here: InProcess, branch: str, files: dict[str, str]) -> None:
    work = here.flow.origin.parent / "human-clone"
    git(
        ["clone", "--quiet", "--branch", branch, str(here.flow.origin), str(work)],
        cwd=here.flow.origin.parent,
    )
    for name, text in files.items():
        (work / name).write_text(text)
    git(["add", "--all"], cwd=work)
    git(["commit", "--quiet", "-m", "a person's commit"], cwd=work)
    git(["push", "--quiet", "origin", branch], cwd=work)
