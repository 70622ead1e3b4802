"""H. What was approved is what runs: gaffer's own PR, retried approvals, GitHub's state now.

Each test is the attack that found the hole, and asserts what a person sees on GitHub.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import select

from bot.github import PullsMixin
from bot.models import Plan, PlanState
from double.webhooks import pull_request_event
from tasks.gitcmd import git
from tasks.jobs import run_job
from tests.conftest import INSTALLATION_ID, REPO
from tests.in_process import InProcess, runnable_jobs
from tests.reliability.conftest import handle, send_comment
from tests.support import labeled

NOT_OURS = "is not gaffer's pull request"


def open_pull_as_mallory(here: InProcess, base: str, *, fork: bool = False) -> dict[str, Any]:
    """Open mallory's PR from the plan's branch (or her fork's branch of that name)."""
    plan = here.flow.plan()
    assert plan is not None and plan.branch
    github, origin = here.flow.github, here.flow.origin
    head_repo = None
    if fork:
        fork_origin = origin.parent / "mallory-fork.git"
        git(["clone", "--quiet", "--bare", str(origin), str(fork_origin)], cwd=origin.parent)
        github.add_repo("mallory/widgets", fork_origin, installation_id=INSTALLATION_ID + 1)
        head_repo = "mallory/widgets"
    if base != "main":
        git(["branch", base, "main"], cwd=origin)
    return github.open_pull_as(
        REPO,
        login="mallory",
        head=plan.branch,
        base=base,
        title="Ship it",
        body="mallory's own words",
        head_repo=head_repo,
    )


def pull_events(here: InProcess, pull: dict[str, Any], *actions: str) -> None:
    """Deliver pull_request events for a PR, as GitHub sends one per change."""
    for action in actions:
        payload = pull_request_event(
            here.flow.repo, pull, action=action, installation_id=INSTALLATION_ID
        )
        handle(here, "pull_request", payload)


def notes(here: InProcess) -> list[str]:
    return [c["body"] for c in here.flow.comments() if NOT_OURS in c["body"]]


def gaffers_pulls(here: InProcess) -> list[dict[str, Any]]:
    return [p for p in here.flow.github.pulls(REPO) if p["user"]["login"] == "gaffer[bot]"]


STRANGERS = [
    pytest.param(
        "release",
        False,
        id="a person's PR from the plan's branch into another base is not the plan's",
    ),
    pytest.param(
        "main", True, id="a fork's PR from a branch of the plan's name is not the plan's PR"
    ),
]


@pytest.mark.parametrize(("base", "fork"), STRANGERS)
def test_only_the_pr_gaffer_opened_is_the_plans_pr(here: InProcess, base: str, fork: bool) -> None:
    plan = here.to_review()
    theirs = open_pull_as_mallory(here, base, fork=fork)
    pull_events(here, theirs, "opened", "edited", "reopened", "edited")
    assert here.settle().state == PlanState.IN_REVIEW
    here.comment(f"/approve-diff {plan.head_sha}")
    plan = here.settle()
    [ours] = gaffers_pulls(here)
    assert (plan.state, plan.pr_number) == (PlanState.PR_OPEN, ours["number"])
    assert (ours["base"]["ref"], ours["head"]["sha"]) == ("main", plan.head_sha)
    assert ours["head"]["repo"]["full_name"] == REPO
    stranger = here.flow.github.issue(REPO, theirs["number"])
    assert (stranger["state"], stranger["title"]) == ("open", "Ship it")  # left alone
    [note] = notes(here)  # one note, however many events the PR sent
    assert f"#{theirs['number']} by @mallory" in note


def test_a_persons_pr_holding_the_branch_and_base_blocks_until_closed(here: InProcess) -> None:
    plan = here.to_review()
    theirs = open_pull_as_mallory(here, "main")
    pull_events(here, theirs, "opened")
    here.comment(f"/approve-diff {plan.head_sha}")
    plan = here.settle()
    assert (plan.state, plan.pr_number, gaffers_pulls(here)) == (PlanState.IN_REVIEW, None, [])
    [told] = [c["body"] for c in here.flow.comments() if "No pull request" in c["body"]]
    assert f"#{theirs['number']} by @mallory" in told
    here.flow.github.issue_record(REPO, theirs["number"]).state = "closed"
    here.comment(f"/approve-diff {plan.head_sha}")
    plan = here.settle()
    [ours] = gaffers_pulls(here)
    assert (plan.state, plan.pr_number) == (PlanState.PR_OPEN, ours["number"])
    assert len(notes(here)) == 1


def test_approve_diff_refused_because_the_branch_moved_can_be_tried_again(
    here: InProcess,
) -> None:
    plan = here.to_review()
    approved, branch, origin = plan.head_sha or "", plan.branch or "", here.flow.origin
    here.accept(f"/approve-diff {approved}")
    tree = git(["rev-parse", f"{approved}^{{tree}}"], cwd=origin)
    moved = git(["commit-tree", tree, "-p", approved, "-m", "a person's commit"], cwd=origin)
    git(["update-ref", f"refs/heads/{branch}", moved], cwd=origin)
    plan = here.settle()
    assert plan.state == PlanState.IN_REVIEW and gaffers_pulls(here) == []
    git(["update-ref", f"refs/heads/{branch}", approved], cwd=origin)  # pushed back
    here.comment(f"/approve-diff {approved}")
    plan = here.settle()
    [ours] = gaffers_pulls(here)
    assert (plan.state, plan.pr_number, ours["head"]["sha"]) == (
        PlanState.PR_OPEN,
        ours["number"],
        approved,
    )
    refused = [c for c in here.flow.comments() if "No pull request" in c["body"]]
    assert len(refused) == 1  # the first attempt's; the second one opened the PR


def test_two_approve_diffs_racing_open_one_pr(here: InProcess, monkeypatch) -> None:
    plan = here.to_review()
    here.accept(f"/approve-diff {plan.head_sha}")
    here.accept(f"/approve-diff {(plan.head_sha or '')[:12]}")
    jobs = runnable_jobs(here.wctx)
    assert len(jobs) == 2  # each approving comment is its own attempt
    both_looked = threading.Barrier(2, timeout=30)
    looked = threading.local()
    real = PullsMixin._gaffers_pull

    def look_together(self: PullsMixin, branch: str, base: str) -> Any:
        found = real(self, branch, base)
        if not getattr(looked, "once", False):  # both find nothing before either creates
            looked.once = True
            both_looked.wait()
        return found

    monkeypatch.setattr(PullsMixin, "_gaffers_pull", look_together)
    errors: list[BaseException] = []

    def run(job_id: int) -> None:
        try:
            run_job(here.wctx, job_id=job_id)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(job_id,)) for job_id in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    plan = here.settle()
    [ours] = here.flow.github.pulls(REPO)
    assert (plan.state, plan.pr_number) == (PlanState.PR_OPEN, ours["number"])
    assert not [c for c in here.flow.comments() if "No pull request" in c["body"]]


def _close_on_github(here: InProcess) -> None:
    here.flow.github.issue_record(REPO, 1).state = "closed"


def _unlabel_on_github(here: InProcess) -> None:
    here.flow.github.issue_record(REPO, 1).labels.remove("gaffer")


GONE_NOW = [
    pytest.param(
        _close_on_github, id="a replayed label on a closed, rejected issue starts nothing"
    ),
    pytest.param(_unlabel_on_github, id="a replayed label after the label was removed: nothing"),
]


@pytest.mark.parametrize("change", GONE_NOW)
def test_a_replayed_label_event_acts_on_the_issue_as_github_shows_it(
    drafted: InProcess, change
) -> None:
    here = drafted
    old_body = labeled(here.flow.repo, here.flow.issue, installation_id=INSTALLATION_ID)
    plan = here.comment("/reject not this way")
    assert plan.state == PlanState.REJECTED
    change(here)
    before = (here.flow.comments(), here.flow.labels())
    handle(here, "issues", old_body, delivery_id="replayed-with-a-new-id")
    here.settle()
    assert (here.flow.comments(), here.flow.labels()) == before
    with here.wctx.db.session() as session:  # type: ignore[attr-defined]
        states = [p.state for p in session.scalars(select(Plan).order_by(Plan.id))]
    assert states == [PlanState.REJECTED]  # the replay left no plan behind
    send_comment(here, "/status")
    assert "is `rejected`" in here.flow.comments()[-1]["body"]


def test_the_label_on_an_open_issue_still_starts_planning(here: InProcess) -> None:
    here.flow.label()
    plan = here.settle()
    assert plan.state == PlanState.DRAFT
    assert here.flow.state_labels() == ["gaffer: draft"]
