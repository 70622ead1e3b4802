"""Verify a pushed head: run the repository's checks and the diff check as GitHub check runs."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from bot.costs import Spend
from bot.models import CheckResult, Job, Plan, PlanState
from bot.repo_config import DIFF_CHECK, Check
from tasks.checks.checkruns import (
    CheckOutput,
    annotations_from_output,
    batches,
    check_output,
    check_run_name,
    external_id,
    fit_head,
    fit_title,
)
from tasks.checks.diffcheck import analyse, changed_files, merge_conflicts, plan_scope
from tasks.isolation.netns import offline_argv
from tasks.isolation.runner import RunResult, run_process, sandbox_env
from tasks.recovery.strays import worktree_mark
from tasks.stages.workspace import Workspace
from tasks.worktrees import git_dirs, repair_gitfile, worktree_git

# Each check process may use this much memory unless the server's `check_memory_mb` says
# otherwise (null: no limit); a check's own `memory_mb` may ask for less, never more.
CHECK_MEMORY_MB = 4096
OFFLINE = "The check ran without network (`checks_network: false`)."
SANDBOX_NETWORK = (
    "The check reached the network through gaffer's proxy (never gaffer's own services)."
)
NOT_OFFLINE = "Network isolation is not available on this worker; the check ran with network."


@dataclass
class Verdict:
    """The checks' outcome on one head: green, or which failed and their logs."""

    failures: list[tuple[str, str]] = field(default_factory=list)

    @property
    def green(self) -> bool:
        return not self.failures

    @property
    def failure_summary(self) -> str:
        names = ", ".join(f"`{name}`" for name, _log in self.failures)
        return f"checks failed on the last attempt: {names}"


def verify(space: Workspace, head_sha: str) -> Verdict:
    """Run each configured check, then the built-in ones, on head_sha; post each as a check
    run.

    The built-in checks read the mirror, not the worktree, so they are worked out while the
    repository's checks run; they are posted after them, in the same order as ever.
    """
    verdict = Verdict()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="built-in-checks") as beside:
        built = {name: beside.submit(check, space, head_sha) for name, check in BUILT_IN.items()}
        for check in space.config.checks:
            output, log = _run_check(space, head_sha, check)
            if output.conclusion != "success":
                verdict.failures.append((check.name, log))
            _restore(space.worktree)
        for name, worked_out in built.items():
            output = worked_out.result()
            ext = external_id(space.plan.id, name, head_sha)
            _complete(space, head_sha, name, ext, output, None)
            if output.conclusion == "failure":
                verdict.failures.append((name, output.summary))
    space.new_head = None  # its check runs are posted now
    return verdict


def _run_check(space: Workspace, head_sha: str, check: Check) -> tuple[CheckOutput, str]:
    name = check.name
    ext = external_id(space.plan.id, name, head_sha)
    ref = space.client.check_run(
        head_sha,
        check_run_name(name),
        ext,
        new_commit=head_sha == space.new_head,
        status="in_progress",
        started_at=datetime.now(UTC),
    )
    sandbox = space.wctx.sandbox
    # A Check's name is a short name (bot/repo_config.py refuses any other), so these
    # folders stay in the job's own.
    home = space.dir / f"check-{name}-home"
    argv, network_note = _check_argv(
        check.run, offline=not space.config.checks_network, sandboxed=sandbox.enabled
    )
    run = run_process(
        argv,
        cwd=space.worktree,
        env=sandbox_env(
            allow=(), source=os.environ, home=home, extra=worktree_mark(space.worktree)
        ),
        log_path=space.dir / f"check-{name}.log",
        timeout_s=float(check.timeout),
        should_stop=None,
        memory_mb=check_memory_mb(check, space.wctx.setting("check_memory_mb", CHECK_MEMORY_MB)),
        sandbox=sandbox,
        box=sandbox.box(
            space.worktree,
            home,
            read_only=git_dirs(space.worktree, space.wctx.settings.home),
            egress=None if space.config.checks_network else (),
            egress_log=space.dir / f"check-{name}-egress.log",
        ),
    )
    output = check_output(
        name,
        returncode=run.returncode,
        timed_out=run.timed_out,
        output_limited=run.output_limited,
        output=run.output,
        duration_s=run.duration_s,
        cost_line=_job_cost(space),
    )
    output = _with_notes(output, name, run, network_note)
    found = annotations_from_output(run.output, str(space.worktree.resolve()))
    _complete(space, head_sha, name, ext, output, ref.id, found)
    return output, run.output


def check_memory_mb(check: Check, server_mb: int | None) -> int | None:
    """Return a check's memory limit: its own `memory_mb`, never above the server's."""
    if server_mb is None:
        return check.memory_mb
    return min(check.memory_mb or server_mb, server_mb)


def _check_argv(command: str, *, offline: bool, sandboxed: bool) -> tuple[list[str], str | None]:
    """Return the check's argv and what its summary says about the network it had."""
    argv = ["bash", "-c", command]
    if sandboxed:
        # The sandbox gives the check loopback only, or the outside through gaffer's proxy.
        return argv, OFFLINE if offline else SANDBOX_NETWORK
    if not offline:
        return argv, None
    isolated = offline_argv(argv)
    if isolated is None:
        return argv, NOT_OFFLINE
    return isolated, OFFLINE


def _with_notes(output: CheckOutput, name: str, run: RunResult, network: str | None) -> CheckOutput:
    """Add to the summary what the user should know about the check's memory and network."""
    notes = [note for note in (_memory_note(run), network) if note]
    if not notes:
        return output
    summary = fit_head("\n\n".join([output.summary, *notes]))
    if run.out_of_memory:
        return replace(output, title=fit_title(f"{name} ran out of memory"), summary=summary)
    return replace(output, summary=summary)


def _memory_note(run: RunResult) -> str | None:
    """Say when the check ran out of memory, or may have, and what the limit is."""
    if run.out_of_memory:
        return f"The check ran out of memory: each check process may use {run.memory_mb} MB."
    if run.maybe_out_of_memory:
        return (
            f"A check killed by a signal may have run out of memory: each check process "
            f"may use {run.memory_mb} MB."
        )
    return None


def _job_cost(space: Workspace) -> str:
    with space.wctx.db.session() as session:
        job = session.get_one(Job, space.job.id)
        spend = Spend(job.cost_usd, job.cost_source)
    return f"This job's agent runs cost {spend} so far."


def _restore(worktree: Path) -> None:
    # What a check leaves behind (caches, reports) must not be committed as the agent's work;
    # ignored files such as a set-up virtualenv stay.
    repair_gitfile(worktree)
    worktree_git(worktree, ["reset", "--quiet", "--hard", "HEAD"])
    worktree_git(worktree, ["clean", "-ffdq"])


def _diff_check(space: Workspace, head_sha: str) -> CheckOutput:
    """What the diff changed against the plan's scope and the protected paths, and where
    merging it would conflict with the default branch or another plan in flight."""
    report = analyse(
        changed_files(space.mirror, space.plan.base_sha or "", head_sha),
        scope=plan_scope(space.plan_text),
        protected_paths=list(space.config.protected_paths),
        conflicts=merge_conflicts(space.mirror, head_sha, _merged_with(space)),
    )
    return CheckOutput(
        conclusion=report.conclusion, title=report.title, summary=report.summary, text=""
    )


IN_FLIGHT = (PlanState.EXECUTING, PlanState.VERIFYING, PlanState.IN_REVIEW, PlanState.PR_OPEN)


def _merged_with(space: Workspace) -> list[tuple[str, str]]:
    """The lines of work the diff will meet: the default branch, and every other plan of the
    repository with a head of its own, from execution to an open pull request."""
    with space.wctx.db.session() as session:
        siblings = session.execute(
            select(Plan.id, Plan.issue_number, Plan.head_sha)
            .where(
                Plan.repository_id == space.plan.repository_id,
                Plan.id != space.plan.id,
                Plan.state.in_(IN_FLIGHT),
                Plan.head_sha.is_not(None),
            )
            .order_by(Plan.id)
        ).all()
    repository = space.plan.repository.full_name
    return [
        (f"`{space.default_branch}`", f"refs/remotes/origin/{space.default_branch}"),
        *((f"plan #{id_} ({repository}#{issue})", sha) for id_, issue, sha in siblings if sha),
    ]


# The built-in checks by name (bot/repo_config.py's BUILT_IN_CHECKS), run in this order.
BUILT_IN: dict[str, Callable[[Workspace, str], CheckOutput]] = {DIFF_CHECK: _diff_check}


def _complete(
    space: Workspace,
    head_sha: str,
    name: str,
    ext: str,
    output: CheckOutput,
    check_run_id: int | None,
    annotations: Sequence[dict[str, Any]] = (),
) -> None:
    """Complete the check run (made now unless check_run_id says which); its annotations
    go with it, the rest in later updates (the Checks API takes 50 a request and appends
    each request's to the run's)."""
    fields: dict[str, Any] = {"title": output.title, "summary": output.summary}
    if output.text:
        fields["text"] = output.text
    first, *more = list(batches(annotations)) or [[]]
    done: dict[str, Any] = {
        "status": "completed",
        "conclusion": output.conclusion,
        "completed_at": datetime.now(UTC),
        "output": {**fields, **({"annotations": first} if first else {})},
    }
    client = space.client
    if check_run_id is None:
        fresh = head_sha == space.new_head
        ref = client.check_run(head_sha, check_run_name(name), ext, new_commit=fresh, **done)
    else:
        ref = client.update_check_run(check_run_id, **done)
    for batch in more:
        more_output = {"title": output.title, "summary": output.summary, "annotations": batch}
        client.update_check_run(ref.id, output=more_output)
    _record(space, head_sha, name, output, ref.id, ref.html_url)


def _record(
    space: Workspace, head_sha: str, name: str, output: CheckOutput, run_id: int, url: str
) -> None:
    with space.wctx.db.session() as session:
        row = session.scalars(
            select(CheckResult).filter_by(plan_id=space.plan.id, head_sha=head_sha, name=name)
        ).one_or_none()
        row = row or CheckResult(plan_id=space.plan.id, head_sha=head_sha, name=name)
        row.conclusion, row.title, row.check_run_id, row.html_url = (
            output.conclusion,
            output.title,
            run_id,
            url,
        )
        session.add(row)
