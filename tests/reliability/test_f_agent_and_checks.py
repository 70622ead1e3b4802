"""F. The agent and the checks: stopped when they hang or flood, judged by the default branch.

Each case takes an issue through gaffer in this process and reads what a user sees after:
the check runs on the GitHub double, the plan's state and the status comment, and the disk
(no worktree left leased or dirty, nothing left running in gaffer's folders).

Also covered elsewhere:
- the agent's environment, `.git/config`, logs, comments and check runs hold no secret; the
  agent's and the checks' memory and network limits (tests/reliability/test_agent_sandbox.py);
- an installation token expiring during a long job is renewed (tests/reliability/test_tokens.py);
- GitHub 5xx and rate limits back off without duplicates (tests/faults/test_faults.py);
- an agent over the plan's budget is stopped (tests/costs/test_costs.py);
- a hanging check and a protected path through a real worker, and /cancel killing the agent
  (tests/lifecycle/test_lifecycle.py);
- a crash: a resumed execution continues from the pushed branch, the reaper removes the
  worktrees and kills the processes of ended plans, a planner killed mid-run leaves no
  read-only worktree (tests/reliability/test_recovery.py: "a resumed execution continues from
  the pushed branch", "an orphaned worktree is removed", "an ended plan's processes are
  killed", "a planner killed mid-run leaves no readonly worktree behind").
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from bot.models import Job, Plan, PlanState
from double.driver import IssueFlow
from double.origin import commit_to_origin
from double.webhooks import check_run_rerequested, check_suite_rerequested
from tasks.gitcmd import git
from tasks.jobs import run_job
from tasks.stages.execution import branch_name
from tasks.worktrees import (
    WorktreePool,
    create_branch,
    ensure_mirror,
    mirror_path,
    plan_key,
    resolve_ref,
)
from tests.conftest import APP_ID, INSTALLATION_ID, REPO
from tests.in_process import InProcess, process_stored, settle
from tests.support import WEBHOOK_SECRET, deliver

CHECK = "grep -q good widgets.py"
GOOD = {"write": {"path": "widgets.py", "content": "VALUE = 'good'\n"}}
# The script agent writes the plan; an agent defined here does the execute stage.
SCRIPT_AGENT = ["{python}", "-I", "-m", "tasks.agents.script_agent", "{prompt_file}"]
# A process the agent or the check starts in a session of its own: no process-group kill
# reaches it, only gaffer's sweep of the worktree.
DETACHED = "setsid -f sleep 300 >/dev/null 2>&1"


def repo_config(
    run: str = CHECK, timeout: int = 30, protected: tuple[str, ...] = ("secrets/**",)
) -> str:
    """The default branch's .github/gaffer.yml: one `tests` check and no fix rounds."""
    return yaml.safe_dump(
        {
            "checks": [{"name": "tests", "run": run, "timeout": timeout}],
            "max_retries": 0,
            "protected_paths": list(protected),
        }
    )


def script(**stages: list[Any]) -> str:
    """An issue body whose gaffer-script block holds steps per stage."""
    return f"The widget is wrong.\n\n```gaffer-script\n{yaml.safe_dump(stages)}```\n"


Open = Callable[..., InProcess]


@pytest.fixture
def open_issue(app, client, github_http, origin: Path, wctx) -> Open:
    """Configure the default branch and open issue #1 with a body; return it driven here."""

    def open_(body: str, config: str = repo_config()) -> InProcess:
        commit_to_origin(origin, {".github/gaffer.yml": config}, "configure gaffer")
        flow = IssueFlow(
            app, client, github_http, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET, body=body
        ).open()
        return InProcess(flow, wctx)

    return open_


def serve(here: InProcess, monkeypatch, **settings: Any) -> None:
    """Change the server's settings (GAFFER_CONFIG) for the jobs run from now on."""
    for name, value in settings.items():
        monkeypatch.setitem(here.wctx.settings.server_config, name, value)  # type: ignore[attr-defined]


def execute_with(shell: str) -> dict[str, dict[str, Any]]:
    """Agents replacing `script`: the script agent plans, `bash -c shell` executes."""
    return {"script": {"command": ["bash", "-c", shell], "plan_command": SCRIPT_AGENT}}


def approve(here: InProcess) -> Plan:
    here.flow.label()
    plan = here.settle()
    assert plan.state == PlanState.DRAFT, plan.last_error
    return here.comment("/approve")


def runs(here: InProcess) -> dict[str, dict[str, Any]]:
    """Return the completed check runs by name."""
    return {r["name"]: r for r in here.flow.check_runs() if r["status"] == "completed"}


def went_wrong(here: InProcess) -> str:
    """Return what the status comment says went wrong."""
    lines = [line for line in here.flow.status().splitlines() if "What went wrong" in line]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the disk


@dataclass
class Disk:
    """What gaffer left under its home: worktrees leased or dirty, processes running."""

    leased: list[str] = field(default_factory=list)
    dirty: list[str] = field(default_factory=list)
    planning: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)


def disk(home: Path) -> Disk:
    """Read what a user would find under GAFFER_HOME once the jobs are done."""
    pool = WorktreePool(home, REPO, mirror_path(home, REPO))
    slots = sorted(p for p in pool.root.glob("wt-*") if p.is_dir())
    readonly = home / "worktrees" / ".readonly"
    return Disk(
        leased=sorted(pool.leases()),
        dirty=[p.name for p in slots if git(["status", "--porcelain", "--ignored"], cwd=p)],
        planning=sorted(p.name for p in readonly.glob("*") if p.name != ".lock"),
        running=[cmdline for _, cmdline in processes_in(home)],
    )


def processes_in(folder: Path) -> list[tuple[int, str]]:
    """Return the live processes whose working directory is inside folder."""
    root = str(folder.resolve())
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cwd = os.readlink(proc / "cwd")
            zombie = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except (OSError, IndexError):
            continue
        if not zombie and (cwd == root or cwd.startswith(root + "/")):
            found.append((int(proc.name), cmdline))
    return found


@pytest.fixture
def home(settings) -> Iterator[Path]:
    """GAFFER_HOME; whatever a failed test left running in it is killed afterwards."""
    yield settings.home
    for pid, _ in processes_in(settings.home) if settings.home.exists() else []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- agents


AGENT_STOPPED = [
    pytest.param(
        {"agent_timeout_s": 2},
        f"{DETACHED}; while true; do echo working; sleep 0.2; done",
        "agent 'script' timed out after 2 s",
        id="an agent that hangs past the agent timeout is stopped and the plan says why",
    ),
    pytest.param(
        {"agent_idle_timeout_s": 2},
        f"{DETACHED}; echo started; sleep 60",
        "agent 'script' printed nothing for 2 s and was stopped",
        id="an agent silent past the idle timeout is stopped and the plan says why",
    ),
    pytest.param(
        {},
        f"{DETACHED}; yes 'a flood of output'",
        "agent 'script' printed more output than allowed and was stopped",
        id="an agent that floods output is stopped and the plan says why",
    ),
]


@pytest.mark.parametrize(("limits", "shell", "why"), AGENT_STOPPED)
def test_an_agent_that_hangs_or_floods_is_stopped_and_its_worktree_cleaned(
    open_issue: Open, home: Path, monkeypatch, limits: dict[str, Any], shell: str, why: str
) -> None:
    here = open_issue(script(execute=[GOOD]))
    serve(here, monkeypatch, agents=execute_with(shell), **limits)
    plan = approve(here)
    assert (plan.state, plan.last_error) == (PlanState.FAILED, why)
    assert went_wrong(here) == f"**What went wrong:** {why}"
    assert runs(here) == {}  # nothing was pushed, so nothing was checked
    assert disk(home) == Disk()  # the worktree given back clean, the detached sleep killed


def test_an_agent_that_hangs_while_planning_is_stopped_and_the_issue_says_why(
    open_issue: Open, home: Path, monkeypatch
) -> None:
    here = open_issue(script(plan=[{"sleep": 60}], execute=[GOOD]))
    serve(here, monkeypatch, agent_timeout_s=2)
    here.flow.label()
    plan = here.settle()
    why = "agent 'script' timed out after 2 s"
    assert (plan.state, plan.last_error, plan.current_revision) == (PlanState.FAILED, why, 0)
    assert went_wrong(here) == f"**What went wrong:** {why}"
    assert disk(home) == Disk()  # the read-only worktree removed, the sleeping agent gone


# --------------------------------------------------------------------------- checks


CHECK_STOPPED = [
    pytest.param(
        f"{DETACHED}; sleep 60",
        2,
        "timed_out",
        "tests timed out after",
        id="a check that hangs concludes timed_out",
    ),
    pytest.param(
        f"{DETACHED}; yes 'a flood of output'",
        30,
        "failure",
        "printed more output than allowed",
        id="a check that floods output is stopped and its check run says why",
    ),
]


@pytest.mark.parametrize(("run", "timeout", "conclusion", "says"), CHECK_STOPPED)
def test_a_check_that_hangs_or_floods_is_stopped_and_its_check_run_says_why(
    open_issue: Open, home: Path, run: str, timeout: int, conclusion: str, says: str
) -> None:
    here = open_issue(script(execute=[GOOD]), repo_config(run=run, timeout=timeout))
    plan = approve(here)
    tests = runs(here)["gaffer/tests"]
    assert tests["conclusion"] == conclusion
    assert says in f"{tests['output']['title']}\n{tests['output']['summary']}", tests["output"]
    shown = tests["output"].get("text", "")
    assert len(shown.encode()) <= 65_535
    if "printed more output" in says:
        assert "a flood of output" in shown  # the output's tail is shown, cut to fit
    assert runs(here)["gaffer/diff"]["conclusion"] == "success"
    why = "checks failed on the last attempt: `tests`"
    assert (plan.state, plan.last_error) == (PlanState.FAILED, why)
    assert went_wrong(here) == f"**What went wrong:** {why}"
    assert disk(home) == Disk()


# --------------------------------------------------------------------------- the config's edge

NAME_RULE = "a check's name is 1 to 64 letters, digits"
# About 1 MB, the shape that took seconds and 144 MB to parse, again for every command.
HUGE_CONFIG = "approvers: [" + ", ".join(f"user-{n:06d}" for n in range(80_000)) + "]\n"
BAD_CONFIGS = [
    pytest.param(
        "checks:\n  - name: ../../x\n    run: 'true'\n",
        f'check 1 (`"../../x"`): {NAME_RULE}',
        id="a check named ../../x is refused when the config is read",
    ),
    pytest.param(
        "checks:\n  - name: tests\n    run: 'true'\n  - name: ''\n    run: 'true'\n",
        f'check 2 (`""`): {NAME_RULE}',
        id="a check with an empty name is refused before any job",
    ),
    pytest.param(
        "checks:\n  - name: unit tests\n    run: 'true'\n",
        f'check 1 (`"unit tests"`): {NAME_RULE}',
        id="a check name with a space is refused",
    ),
    pytest.param(
        "checks:\n  - name: \"ok\\x07\"\n    run: 'true'\n",
        f'check 1 (`"ok\\u0007"`): {NAME_RULE}',
        id="a check name with a control character is refused, the character shown escaped",
    ),
    pytest.param(
        HUGE_CONFIG,
        f"is {len(HUGE_CONFIG):,} bytes; gaffer reads at most 65,536 bytes (64 KiB)",
        id="a 1 MB config is refused without being parsed",
    ),
]


@pytest.mark.parametrize(("config", "reason"), BAD_CONFIGS)
def test_a_config_gaffer_cannot_use_is_refused_on_the_issue_saying_what_to_fix(
    open_issue: Open, config: str, reason: str
) -> None:
    here = open_issue(script(execute=[GOOD]), config)
    here.flow.label()
    settle(here.wctx)
    [reply] = [c["body"] for c in here.flow.comments() if "gaffer cannot use" in c["body"]]
    assert reason in reply
    assert here.flow.plan() is None  # no plan, so no job and no folder named after a check


def test_a_check_renamed_to_a_path_after_planning_is_refused_at_approve(
    open_issue: Open, origin: Path
) -> None:
    here = open_issue(script(execute=[GOOD]))
    here.flow.label()
    plan = here.settle()
    assert plan.state == PlanState.DRAFT, plan.last_error
    commit_to_origin(origin, {".github/gaffer.yml": BAD_CONFIGS[0].values[0]}, "rename check")
    plan = here.comment("/approve")
    assert plan.state == PlanState.DRAFT
    [reply] = here.flow.replies()
    assert reply.startswith("> /approve") and 'check 1 (`"../../x"`)' in reply
    assert [r["name"] for r in here.flow.check_runs()] == []  # nothing ran


# --------------------------------------------------------------------------- the diff check


def test_check_commands_come_from_the_default_branch_not_the_agents_config(
    open_issue: Open, home: Path
) -> None:
    agents_config = {
        "checks": [{"name": "tests", "run": "true"}, {"name": "extra", "run": "true"}],
        "max_retries": 5,
        "protected_paths": [],
    }
    edit = {"write": {"path": ".github/gaffer.yml", "content": yaml.safe_dump(agents_config)}}
    here = open_issue(script(execute=[edit]))  # widgets.py stays bad: `tests` must fail
    plan = approve(here)
    seen = runs(here)
    assert sorted(seen) == ["gaffer/diff", "gaffer/tests"]  # no `extra`
    assert seen["gaffer/tests"]["conclusion"] == "failure"  # `grep`, not the agent's `true`
    assert seen["gaffer/diff"]["conclusion"] == "neutral"
    assert seen["gaffer/diff"]["output"]["title"].endswith(
        ": gaffer config (.github/gaffer.yml) changed"
    )
    assert (
        "- gaffer config (.github/gaffer.yml) changed: `.github/gaffer.yml`"
        in (seen["gaffer/diff"]["output"]["summary"])
    )
    # The default branch's max_retries (0), not the agent's (5): no fix round ran.
    assert (plan.state, plan.fix_rounds) == (PlanState.FAILED, 0)
    assert plan.last_error == "checks failed on the last attempt: `tests`"
    assert disk(home) == Disk()


FLAGGED = [
    pytest.param(
        "pytest.ini",
        "neutral",
        "- test runner config changed: `pytest.ini`",
        id="an agent that edits the tests' runner config (pytest.ini) is flagged",
    ),
    pytest.param(
        "tests/conftest.py",
        "neutral",
        "- test runner config changed: `tests/conftest.py`",
        id="an agent that edits a conftest.py is flagged",
    ),
    pytest.param(
        ".github/workflows/ci.yml",
        "neutral",
        "- CI workflows changed: `.github/workflows/ci.yml`",
        id="an agent that edits .github/workflows is flagged",
    ),
    pytest.param(
        "secrets/key.txt",
        "failure",
        "- protected paths touched (fails the check): `secrets/key.txt`",
        id="an agent that touches a protected path fails the diff check",
    ),
]


@pytest.mark.parametrize(("path", "conclusion", "flag"), FLAGGED)
def test_an_agent_editing_what_judges_it_is_flagged_on_the_diff_check(
    open_issue: Open, home: Path, path: str, conclusion: str, flag: str
) -> None:
    edit = {"write": {"path": path, "content": "# edited by the agent\n"}}
    here = open_issue(script(execute=[GOOD, edit]))
    plan = approve(here)
    seen = runs(here)
    assert seen["gaffer/tests"]["conclusion"] == "success"
    diff = seen["gaffer/diff"]
    assert diff["conclusion"] == conclusion
    label = flag.removeprefix("- ").split(" (")[0].split(":")[0]
    assert diff["output"]["title"] == f"2 files changed, +2 -1: {label}"
    assert flag in diff["output"]["summary"]
    if conclusion == "failure":  # blocked: the plan fails and says which check
        assert (plan.state, plan.last_error) == (
            PlanState.FAILED,
            "checks failed on the last attempt: `diff`",
        )
        assert "`diff`" in went_wrong(here)
    else:  # flagged for the reviewer, not blocked
        assert plan.state == PlanState.IN_REVIEW
    assert disk(home) == Disk()


# --------------------------------------------------------------------------- a crash


def dirty_worktree(worktree: Path, branch: str, base: str) -> subprocess.Popen[bytes]:
    """Leave the worktree as a killed worker does: files written, a process still running."""
    create_branch(worktree, branch, base)
    (worktree / "half-written.txt").write_text("the worker died here\n")
    return subprocess.Popen(["sleep", "300"], cwd=worktree, start_new_session=True)


def unpushed_commit(worktree: Path, branch: str, base: str) -> None:
    """Leave the branch as a worker killed between its commit and its push does."""
    create_branch(worktree, branch, base)
    (worktree / "widgets.py").write_text("VALUE = 'half done'\n")
    git(["add", "--all"], cwd=worktree)
    git(["commit", "--quiet", "-m", "committed, never pushed"], cwd=worktree)


CRASHES = [
    pytest.param(
        dirty_worktree,
        id="a dead worker's dirty worktree and stray process do not block the resumed job",
    ),
    pytest.param(
        unpushed_commit,
        id="a worker killed between commit and push leaves no branch that blocks the next job",
    ),
]


@pytest.mark.parametrize("left_behind", CRASHES)
def test_a_crash_leaves_no_worktree_or_branch_that_blocks_the_next_job(
    open_issue: Open, home: Path, left_behind: Callable[[Path, str, str], Any]
) -> None:
    here = open_issue(script(execute=[GOOD]))
    here.flow.label()
    plan = here.settle()
    here.accept("/approve")  # the execute job is queued, as a resumed job is
    mirror = ensure_mirror(home, REPO, plan.clone_url, None)
    base = resolve_ref(mirror, "main")
    branch = branch_name(plan.issue_number, plan.issue_title)
    worktree = WorktreePool(home, REPO, mirror).acquire(plan_key(plan.id), base)
    stray = left_behind(worktree, branch, base)

    plan = here.settle()

    assert (plan.state, plan.last_error) == (PlanState.IN_REVIEW, None)
    assert plan.branch == branch
    assert git(["show", f"{plan.head_sha}:widgets.py"], cwd=here.flow.origin) == "VALUE = 'good'"
    assert {name: r["conclusion"] for name, r in runs(here).items()} == {
        "gaffer/tests": "success",
        "gaffer/diff": "success",
    }
    assert disk(home) == Disk()
    if stray is not None:
        stray.wait(timeout=5)  # killed by gaffer when it took the worktree back


@pytest.mark.parametrize(
    ("agent", "said"),
    [
        pytest.param(None, "no agent is chosen for this repository", id="none chosen anywhere"),
        pytest.param("nonesuch", "the agent 'nonesuch' is not defined", id="an unknown name"),
    ],
)
def test_a_plan_without_a_usable_agent_stops_and_says_how_to_choose_one(
    here: InProcess, agent: str | None, said: str
) -> None:
    here.wctx.settings = dataclasses.replace(here.wctx.settings, default_agent=agent)  # type: ignore[attr-defined]
    here.flow.label()
    plan = here.settle()
    assert plan.state == PlanState.FAILED
    status = here.flow.status()
    assert f"**What went wrong:** Stopped: {said}" in status
    assert "`/retry`" in status


def test_what_an_agents_cli_leaves_behind_is_never_committed(here: InProcess, monkeypatch) -> None:
    script = {
        "command": ["{python}", "-I", "-m", "tasks.agents.script_agent", "{prompt_file}"],
        "output": "text",
        "ignore": [".tool*"],
    }
    monkeypatch.setitem(here.wctx.settings.server_config, "agents", {"script": script})  # type: ignore[attr-defined]
    steps = (
        "```gaffer-script\nexecute:\n"
        "  - write: {path: fix.txt, content: ok}\n"
        "  - write: {path: .tool.history.md, content: the whole prompt}\n"
        "  - write: {path: .tool.cache/tags, content: x}\n```\n"
    )
    here.flow.github.issue_record(REPO, 1).body = steps
    plan = here.to_review()
    files = git(["ls-tree", "-r", "--name-only", plan.head_sha or ""], cwd=here.flow.origin)
    assert "fix.txt" in files.split()
    assert ".tool" not in files


DENIED = {
    "type": "result",
    "subtype": "success",
    "is_error": False,
    "result": "Done, but I could not run the tests.",
    "usage": {"input_tokens": 10, "output_tokens": 5},
    "permission_denials": [
        {"tool_name": "Bash", "tool_use_id": "t1", "tool_input": {"command": "pytest -q"}}
    ],
}


def test_tool_calls_an_agents_own_permissions_refused_are_told_on_the_issue(
    here: InProcess, monkeypatch
) -> None:
    code = (
        "import json, os\n"
        "if os.environ['GAFFER_STAGE'] == 'execute': open('x.txt', 'w').write('x')\n"
        f"print(json.dumps({DENIED!r}))\n"
    )
    escaped = code.replace("{", "{{").replace("}", "}}")  # braces are placeholders there
    claude_like = {"command": ["{python}", "-c", escaped], "output": "claude-json"}
    monkeypatch.setitem(here.wctx.settings.server_config, "agents", {"script": claude_like})  # type: ignore[attr-defined]
    here.to_review()
    told = [c["body"] for c in here.flow.comments() if "permissions refused" in c["body"]]
    assert told == [
        "During execute, the agent's own permissions refused 1 tool call: `Bash(pytest -q)`. "
        "Its work may be missing what those calls would have done (a test run, say); the "
        "checks below are gaffer's own."
    ]


# --------------------------------------------------------------------------- annotations

# A lint check that finds sixty lines to complain about, then fails.
SIXTY_FINDINGS = (
    'for n in $(seq 1 60); do echo "widgets.py:$n:1: E501 Line too long ($n > 88)"; done; exit 1'
)


def test_a_checks_findings_are_annotated_on_its_check_run_fifty_to_a_request(
    open_issue: Open,
) -> None:
    here = open_issue(script(execute=[GOOD]), repo_config(run=SIXTY_FINDINGS))
    approve(here)
    tests = runs(here)["gaffer/tests"]
    assert tests["conclusion"] == "failure"
    # The double refuses more than fifty in one request, as GitHub does.
    found = here.flow.github.annotations(tests["id"])
    assert len(found) == tests["output"]["annotations_count"] == 60
    assert found[59] == {
        "path": "widgets.py",
        "start_line": 60,
        "end_line": 60,
        "start_column": 1,
        "end_column": 1,
        "annotation_level": "failure",
        "title": "ruff E501",
        "message": "Line too long (60 > 88)",
    }


# --------------------------------------------------------------------------- "Re-run"


def click_rerun(here: InProcess, run: dict[str, Any], login: str = "maintainer") -> None:
    """Click "Re-run" on a check run, as GitHub then tells gaffer."""
    payload = check_run_rerequested(
        here.flow.repo, run, login=login, installation_id=INSTALLATION_ID
    )
    assert deliver(here.flow.client, "check_run", payload).status_code == 202
    here.settle()


def test_rerun_runs_the_checks_again_on_the_commit_under_review(
    open_issue: Open, origin: Path
) -> None:
    here = open_issue(script(execute=[GOOD]))
    plan = approve(here)
    assert plan.state == PlanState.IN_REVIEW, plan.last_error
    green = runs(here)["gaffer/tests"]
    assert green["conclusion"] == "success"
    # The default branch's checks grow stricter; someone asks GitHub to re-run them.
    commit_to_origin(origin, {".github/gaffer.yml": repo_config(run="false")}, "stricter")
    click_rerun(here, green)
    rerun = runs(here)["gaffer/tests"]
    assert (rerun["id"], rerun["head_sha"]) == (green["id"], plan.head_sha)
    assert rerun["conclusion"] == "failure"
    after = here.flow.plan()
    assert (after.state, after.head_sha) == (PlanState.IN_REVIEW, plan.head_sha)
    here.comment(f"/approve-diff {plan.head_sha}")
    assert "The checks on the head are not all green" in here.flow.replies()[-1]
    assert here.flow.github.pulls(REPO) == []


def test_rerun_of_a_plan_no_longer_in_review_is_answered_on_the_issue(open_issue: Open) -> None:
    here = open_issue(script(execute=[GOOD]))
    plan = approve(here)
    green = runs(here)["gaffer/tests"]
    here.comment("/reject")
    click_rerun(here, green, login="reviewer")
    assert here.flow.comments()[-1]["body"] == (
        f"@reviewer asked to re-run gaffer's checks on `{plan.head_sha[:12]}`, but they run "
        "again only while the plan is `in_review`; it is `rejected`."
    )
    assert runs(here)["gaffer/tests"]["conclusion"] == "success"


def test_rerun_all_checks_on_gaffers_suite_runs_them_again(open_issue: Open, origin: Path) -> None:
    here = open_issue(script(execute=[GOOD]))
    plan = approve(here)
    commit_to_origin(origin, {".github/gaffer.yml": repo_config(run="false")}, "stricter")
    payload = check_suite_rerequested(
        here.flow.repo,
        plan.head_sha or "",
        login="maintainer",
        installation_id=INSTALLATION_ID,
        app_id=APP_ID,
    )
    assert deliver(here.flow.client, "check_suite", payload).status_code == 202
    here.settle()
    assert runs(here)["gaffer/tests"]["conclusion"] == "failure"


def test_rerun_of_another_apps_check_run_or_suite_is_left_alone(
    open_issue: Open, origin: Path
) -> None:
    here = open_issue(script(execute=[GOOD]))
    plan = approve(here)
    commit_to_origin(origin, {".github/gaffer.yml": repo_config(run="false")}, "stricter")
    ours = runs(here)["gaffer/tests"]
    click_rerun(here, {**ours, "external_id": "ci-1234", "name": "build"})
    click_rerun(here, {**ours, "app": {**ours["app"], "id": APP_ID + 1}})
    suite = check_suite_rerequested(
        here.flow.repo,
        plan.head_sha or "",
        login="maintainer",
        installation_id=INSTALLATION_ID,
        app_id=APP_ID + 1,
    )
    assert deliver(here.flow.client, "check_suite", suite).status_code == 202
    here.settle()
    assert runs(here)["gaffer/tests"]["conclusion"] == "success"  # not run again


def test_a_diff_whose_checks_turn_red_after_its_approval_gets_no_pull_request(
    open_issue: Open, origin: Path
) -> None:
    here = open_issue(script(execute=[GOOD]))
    plan = approve(here)
    here.accept(f"/approve-diff {plan.head_sha}")  # approved; its pull request job waits
    commit_to_origin(origin, {".github/gaffer.yml": repo_config(run="false")}, "stricter")
    payload = check_run_rerequested(
        here.flow.repo,
        runs(here)["gaffer/tests"],
        login="maintainer",
        installation_id=INSTALLATION_ID,
    )
    assert deliver(here.flow.client, "check_run", payload).status_code == 202
    process_stored(here.wctx)
    with here.wctx.db.session() as session:  # type: ignore[attr-defined]
        recheck = session.scalars(select(Job.id).where(Job.stage == "recheck")).one()
    run_job(here.wctx, job_id=recheck)  # the checks run again before the pull request job
    here.settle()
    assert here.flow.github.pulls(REPO) == []
    assert here.flow.comments()[-1]["body"] == (
        "No pull request was opened: The checks on the head are not all green, and "
        "`require_green` is on."
    )
