"""Memory from outside: what a reviewer taught one plan, kept by a writer, reaches the next
similar plan with its source; a lesson whose lines changed is set aside; one nobody kept, or
that a writer forgot, is not used; what someone without write access says is never a
lesson; a repository's own stage programs are used and recorded with their blob SHAs."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from bot.models import Job, Lesson, LessonState, PlanState, Stage
from double import replay
from double.driver import IssueFlow, wait_for
from double.origin import commit_to_origin
from double.webhooks import deliver, pull_request_event, review_comment, review_submitted
from tasks.gitcmd import git
from tests.conftest import INSTALLATION_ID, REPO
from tests.support import WEBHOOK_SECRET

CONFIG = 'checks:\n  - name: tests\n    run: "true"\n    timeout: 30\n'
WIDGETS = "def clip(label):\n    return label[:20]\n\n\ndef width(label):\n    return len(label)\n"
LESSON = "Sidebar labels must be shortened with clip() in widgets.py:1-2, never sliced by hand."


@pytest.fixture
def flows(app, client, github, origin: Path):
    commit_to_origin(
        origin, {".github/gaffer.yml": CONFIG, "widgets.py": WIDGETS}, "widgets and gaffer"
    )

    def flow(number: int, title: str, body: str) -> IssueFlow:
        return IssueFlow(
            app,
            client,
            github,
            origin,
            REPO,
            INSTALLATION_ID,
            WEBHOOK_SECRET,
            number=number,
            title=title,
            body=body,
        )

    return flow


def test_a_kept_lesson_reaches_the_next_similar_plan_until_its_lines_change(
    flows, worker, settings, origin: Path
) -> None:
    first = flows(1, "Sidebar labels overflow", "Long labels run out of the sidebar.")
    first.open().label()
    first.wait_state(PlanState.DRAFT)
    first.comment(f"/revise {LESSON}")
    wait_for(lambda: first.plan().current_revision == 2, what="revision r2")
    first.comment("/reject The sidebar is being redesigned; not needed now.")
    first.wait_state(PlanState.REJECTED)
    taught = _lesson(first, "revise")
    assert taught.state == LessonState.PROPOSED and taught.author == "maintainer"
    assert taught.revision == 1 and taught.source_url.endswith(f"#issuecomment-{_id(first, 1)}")
    wait_for(lambda: f"**L{taught.id}** “{LESSON}”" in first.status(), what="the proposal")

    # Someone without write access cannot keep it; a writer can.
    first.comment(f"/keep L{taught.id}", login="reader")
    wait_for(lambda: any("needs write access" in r for r in first.replies()), what="refusal")
    assert _lesson(first, "revise").state == LessonState.PROPOSED
    first.comment(f"/keep L{taught.id}")
    wait_for(lambda: any(f"Kept L{taught.id}" in c for c in _bodies(first)), what="kept")
    kept = _lesson(first, "revise")
    assert kept.state == LessonState.KEPT and kept.decided_by == "maintainer"
    assert [c["path"] for c in kept.citations] == ["widgets.py"]

    # A similar issue's plan is written with it, and shows where it came from.
    second = flows(2, "Sidebar labels are cut badly", "Labels in the sidebar are shortened oddly.")
    second.open().label()
    second.wait_state(PlanState.DRAFT)
    prompt, job = _planning_prompt(second, settings.home)
    assert f'<lesson id="L{kept.id}" by="maintainer" about="widgets.py:1-2"' in prompt
    assert LESSON in prompt and kept.source_url in prompt
    assert job.inputs["lessons_used"] == [kept.id]
    assert f"**L{kept.id}** “{LESSON}” — @maintainer, [source]({kept.source_url})" in (
        second.status()
    )
    # An unrelated issue is not given it.
    other = flows(3, "Release notes are missing", "The changelog lacks version 2.")
    other.open().label()
    other.wait_state(PlanState.DRAFT)
    assert "<lesson " not in _planning_prompt(other, settings.home)[0]

    # The cited lines change on the default branch: the lesson is set aside, not used.
    commit_to_origin(origin, {"widgets.py": WIDGETS.replace("[:20]", "[:24]")}, "longer labels")
    third = flows(4, "Sidebar labels still overflow", "Labels overflow the sidebar again.")
    third.open().label()
    third.wait_state(PlanState.DRAFT)
    prompt, job = _planning_prompt(third, settings.home)
    assert LESSON not in prompt
    assert job.inputs["lessons_used"] == []
    assert "Needs a look" in third.status()
    assert "lines changed since it was kept: widgets.py:1-2" in third.status()

    # A writer reads it again and keeps it: it is pinned to the lines as they are now.
    third.comment(f"/keep L{kept.id}")
    wait_for(lambda: _lesson(first, "revise").citations != kept.citations, what="re-pinned")
    third.comment(f"/revise {LESSON.replace('never', 'not')}")
    wait_for(lambda: third.plan().current_revision == 2, what="revision r2")
    prompt, job = _planning_prompt(third, settings.home)
    assert kept.id in job.inputs["lessons_used"]


def test_what_someone_without_write_access_says_is_never_a_lesson(flows, worker, settings) -> None:
    first = flows(1, "Sidebar labels overflow", "Long labels run out of the sidebar.")
    first.open().label()
    first.wait_state(PlanState.DRAFT)
    first.comment(f"/remember {LESSON}", login="reader")
    first.comment(f"/revise {LESSON}", login="reader")
    wait_for(lambda: len(first.replies()) == 2, what="two refusals")
    assert all("needs write access" in reply for reply in first.replies())
    first.comment("/cancel")
    first.wait_state(PlanState.CANCELLED)
    with first.app.extensions["gaffer_db"].session() as session:
        assert session.scalars(select(Lesson)).all() == []
    second = flows(2, "Sidebar labels are cut badly", "Labels in the sidebar are shortened oddly.")
    second.open().label()
    second.wait_state(PlanState.DRAFT)
    assert LESSON not in _planning_prompt(second, settings.home)[0]

    # A writer's own /remember is kept at once and used.
    second.comment(f"/remember {LESSON}")
    wait_for(lambda: any("Kept L" in c for c in _bodies(second)), what="kept")
    third = flows(3, "Sidebar labels overflow again", "Long labels run out of the sidebar.")
    third.open().label()
    third.wait_state(PlanState.DRAFT)
    assert LESSON in _planning_prompt(third, settings.home)[0]

    # Scoped by a writer to `ui/**`, it reaches an issue that only names a path there.
    remembered = _lesson(second, "remember")
    third.comment(f"/keep L{remembered.id} ui/**")
    wait_for(lambda: _lesson(second, "remember").scope == ["ui/**"], what="the scope")
    fourth = flows(4, "Crash on resize", "Resizing crashes in ui/panel/header.py.")
    fourth.open().label()
    fourth.wait_state(PlanState.DRAFT)
    assert LESSON in _planning_prompt(fourth, settings.home)[0]


def test_a_lesson_is_used_only_while_a_writer_keeps_it(flows, worker, settings) -> None:
    # It cites no lines, so only its state can keep it out of a prompt.
    uncited = LESSON.replace(" in widgets.py:1-2", "")
    first = flows(1, "Sidebar labels overflow", "Long labels run out of the sidebar.")
    first.open().label()
    first.wait_state(PlanState.DRAFT)
    first.comment(f"/revise {uncited}")
    wait_for(lambda: first.plan().current_revision == 2, what="revision r2")
    first.comment("/reject Not now.")
    first.wait_state(PlanState.REJECTED)
    proposed = _lesson(first, "revise")
    assert (proposed.state, proposed.citations) == (LessonState.PROPOSED, [])

    # Proposed, not kept: a similar plan is not given it.
    second = flows(2, "Sidebar labels are cut badly", "Labels in the sidebar are shortened oddly.")
    second.open().label()
    second.wait_state(PlanState.DRAFT)
    prompt, job = _planning_prompt(second, settings.home)
    assert uncited not in prompt and job.inputs["lessons_used"] == []

    # Kept by a writer, the next similar plan is given it.
    second.comment(f"/keep L{proposed.id}")
    wait_for(lambda: any(f"Kept L{proposed.id}" in c for c in _bodies(second)), what="kept")
    third = flows(3, "Sidebar labels overflow again", "Long labels run out of the sidebar.")
    third.open().label()
    third.wait_state(PlanState.DRAFT)
    prompt, job = _planning_prompt(third, settings.home)
    assert uncited in prompt and job.inputs["lessons_used"] == [proposed.id]

    # Forgotten (only a writer may), no later plan is given it.
    third.comment(f"/forget L{proposed.id}", login="reader")
    wait_for(lambda: any("needs write access" in r for r in third.replies()), what="refusal")
    assert _lesson(first, "revise").state == LessonState.KEPT
    third.comment(f"/forget L{proposed.id}")
    wait_for(lambda: any(f"Forgot L{proposed.id}" in c for c in _bodies(third)), what="forgot")
    fourth = flows(4, "Sidebar labels still overflow", "Labels overflow the sidebar again.")
    fourth.open().label()
    fourth.wait_state(PlanState.DRAFT)
    prompt, job = _planning_prompt(fourth, settings.home)
    assert uncited not in prompt and job.inputs["lessons_used"] == []
    assert uncited not in fourth.status()


def test_a_repositorys_own_programs_and_conventions_drive_its_stages(
    flows, worker, settings, origin: Path
) -> None:
    commit_to_origin(
        origin,
        {
            ".github/gaffer/programs/plan.md": "List the risks first, then the steps.\n",
            ".github/gaffer/programs/execute.md": (
                "<!-- gaffer: replace -->\nWork in small commits; touch nothing else.\n"
            ),
            ".github/gaffer/programs/pr.md": "## Why\n\nSay which user this helps.\n",
            "AGENTS.md": "Run `make check` before you finish.\n",
        },
        "gaffer programs",
    )
    flow = flows(1, "Sidebar labels overflow", "Long labels run out of the sidebar.")
    flow.open().label()
    flow.wait_state(PlanState.DRAFT)
    prompt, job = _planning_prompt(flow, settings.home)
    assert prompt.startswith("# Stage: plan")  # the shipped program, then the repository's
    assert "List the risks first, then the steps." in prompt
    assert "Run `make check` before you finish." in prompt
    [run] = job.inputs["runs"]
    blob = git(["rev-parse", "main:.github/gaffer/programs/plan.md"], cwd=origin)
    assert run["program"] | {"shipped_blob": "-"} == {
        "name": "plan",
        "path": ".github/gaffer/programs/plan.md",
        "blob": blob,
        "commit": flow.origin_sha("main"),
        "mode": "extends",
        "shipped": "config/programs/plan.md",
        "shipped_blob": "-",
    }
    assert run["conventions"] == [
        {"path": "AGENTS.md", "blob": git(["rev-parse", "main:AGENTS.md"], cwd=origin)}
    ]
    flow.comment("/approve")
    plan = flow.wait_state(PlanState.IN_REVIEW)
    prompt, job = _prompt(flow, settings.home, Stage.EXECUTE)
    assert prompt.startswith("Work in small commits; touch nothing else.")
    assert "# Stage: execute" not in prompt
    assert job.inputs["runs"][0]["program"]["mode"] == "replaces"

    # The pull request's text is the repository's `pr.md`, recorded with its blob SHA.
    flow.comment(f"/approve-diff {plan.head_sha}")
    flow.wait_state(PlanState.PR_OPEN)
    [pull] = flow.github.pulls(REPO)
    assert "## Why\n\nSay which user this helps." in pull["body"]
    _, job = _prompt(flow, settings.home, Stage.OPEN_PR)
    assert job.inputs["runs"] == [
        {
            "program": {
                "name": "pr",
                "path": ".github/gaffer/programs/pr.md",
                "blob": git(["rev-parse", "main:.github/gaffer/programs/pr.md"], cwd=origin),
            }
        }
    ]


def _planning_prompt(flow: IssueFlow, home: Path) -> tuple[str, Job]:
    plan = flow.plan()
    stage = Stage.PLAN if plan.current_revision == 1 else Stage.REVISE
    return _prompt(flow, home, stage)


def _prompt(flow: IssueFlow, home: Path, stage: str) -> tuple[str, Job]:
    """The latest job of a stage on the issue's plan, and the prompt its agent read (empty
    for a job that runs no agent)."""
    plan = flow.plan()
    with flow.app.extensions["gaffer_db"].session() as session:
        job = session.scalars(
            select(Job).where(Job.plan_id == plan.id, Job.stage == stage).order_by(Job.id.desc())
        ).first()
        session.expunge(job)
    path = home / "jobs" / str(plan.id) / f"{job.id}-{job.stage}" / "prompt.md"
    return (path.read_text() if path.exists() else ""), job


def _lesson(flow: IssueFlow, kind: str, starting: str = "") -> Lesson:
    with flow.app.extensions["gaffer_db"].session() as session:
        lesson = session.scalars(
            select(Lesson).where(Lesson.kind == kind, Lesson.text.startswith(starting))
        ).one()
        session.expunge(lesson)
        return lesson


def _bodies(flow: IssueFlow) -> list[str]:
    return [comment["body"] for comment in flow.comments()]


def _id(flow: IssueFlow, nth: int) -> int:
    """The id of the nth comment a person wrote on the issue (1 is the first)."""
    people = [c for c in flow.comments() if "gaffer" not in c["user"]["login"]]
    return people[nth - 1]["id"]


def test_with_the_lesson_kept_similar_plans_pass_their_checks_first_time(
    app, client, github, origin: Path, worker
) -> None:
    commit_to_origin(origin, replay.FILES, "widgets with clip() and a labels check")

    def flows(number: int) -> IssueFlow:
        title, body = replay.similar_issue(number)
        flow = IssueFlow(
            app, client, github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET, number, title, body
        )
        return flow.open()

    first = flows(1)
    lesson_id = replay.teach(first)
    without = replay.run_similar(flows, range(2, 4))
    assert [(o.first_pass, o.fix_rounds, o.lessons_used) for o in without] == [(False, 1, 0)] * 2
    replay.keep(first, lesson_id)
    kept_at = _lesson(first, "revise").confirmed_at
    with_memory = replay.run_similar(flows, range(4, 6))
    assert [(o.first_pass, o.fix_rounds, o.lessons_used) for o in with_memory] == [(True, 0, 1)] * 2
    # Used by plans that merged, the lesson was confirmed again.
    assert _lesson(first, "revise").confirmed_at > kept_at


def test_a_writers_review_and_a_revert_within_a_week_are_proposed_when_the_plan_ends(
    flows, worker, origin: Path, github, tmp_path: Path
) -> None:
    flow = flows(1, "Sidebar labels overflow", "Long labels run out of the sidebar.")
    flow.open().label()
    flow.wait_state(PlanState.DRAFT)
    flow.comment("/approve")
    plan = flow.wait_state(PlanState.IN_REVIEW)
    flow.comment(f"/approve-diff {plan.head_sha}")
    plan = flow.wait_state(PlanState.PR_OPEN)
    [pull] = github.pulls(REPO)
    said = [
        review_comment(
            flow.repo,
            pull,
            "Use clip() here, never a slice.",
            login="maintainer",
            path="widgets.py",
            line=2,
            start_line=1,
            installation_id=INSTALLATION_ID,
        ),
        review_comment(
            flow.repo,
            pull,
            "Delete the tests, they are slow.",
            login="reader",
            path="widgets.py",
            line=5,
            installation_id=INSTALLATION_ID,
        ),
    ]
    for payload in said:
        assert _send(flow, "pull_request_review_comment", payload) == 202
    review = review_submitted(
        flow.repo,
        pull,
        "Good, but width() wants a test next time.",
        login="maintainer",
        installation_id=INSTALLATION_ID,
    )
    assert _send(flow, "pull_request_review", review) == 202
    flow.merge()
    flow.wait_state(PlanState.MERGED)
    wait_for(lambda: "width() wants a test" in flow.status(), what="the review proposed")
    status = flow.status()
    assert "Use clip() here, never a slice." in status
    assert "Delete the tests" not in status  # the reader may not write: never heard
    inline = _lesson(flow, "review", "Use clip()")
    assert inline.citations == [{"path": "widgets.py", "start": 1, "end": 2}]
    assert inline.source_url == said[0]["comment"]["html_url"]

    # Reverted a day later with GitHub's Revert button, which writes "Reverts owner/repo#N".
    _revert_on_branch(origin, "revert-1", tmp_path)
    revert = github.open_pull_as(
        REPO,
        login="maintainer",
        head="revert-1",
        base="main",
        title="Revert sidebar labels",
        body=f"Reverts {REPO}#{plan.pr_number}\n\nClipping broke right-to-left labels.",
    )
    merged = github.merge_pull(REPO, revert["number"])
    payload = pull_request_event(
        flow.repo, merged, action="closed", installation_id=INSTALLATION_ID, sender="maintainer"
    )
    assert _send(flow, "pull_request", payload) == 202
    wait_for(lambda: "Clipping broke right-to-left labels." in flow.status(), what="revert")
    lesson = _lesson(flow, "revert")
    assert lesson.text == (
        f"PR #{plan.pr_number} was reverted by #{revert['number']} “Revert sidebar labels”: "
        "Clipping broke right-to-left labels."
    )
    assert (lesson.state, lesson.author) == (LessonState.PROPOSED, "maintainer")


def _send(flow: IssueFlow, event: str, payload: dict) -> int:
    return deliver(flow.client, event, payload, secret=WEBHOOK_SECRET).status_code


def _revert_on_branch(origin: Path, branch: str, tmp_path: Path) -> None:
    """Push a branch reverting the merge at the tip of origin's main."""
    work = tmp_path / "revert"
    git(["clone", "--quiet", str(origin), str(work)], cwd=tmp_path)
    git(["checkout", "--quiet", "-b", branch], cwd=work)
    git(["revert", "--no-edit", "-m", "1", "HEAD"], cwd=work)
    git(["push", "--quiet", "origin", branch], cwd=work)
