"""Every text gaffer posts on GitHub, in one place."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.costs import Spend
from bot.github import STATUS_MARKER
from bot.memory import Offered
from bot.models import Candidate, CheckResult, Job, Lesson, Plan, PlanState, Stage
from bot.states import Event, events_from

# The command a person types for each event a comment can cause.
_COMMAND_FOR = {
    Event.APPROVE: "/approve r{revision}",
    Event.REVISE: "/revise <feedback>",
    Event.EXPAND: "/expand",
    Event.SPLIT: "/split",
    Event.REJECT: "/reject [reason]",
    Event.ICEBOX: "/icebox",
    Event.THAW: "/thaw",
    Event.RETRY: "/retry",
    Event.RETRY_PLAN: "/retry",
    Event.APPROVE_DIFF: "/approve-diff {head}",
    Event.CANCEL: "/cancel",
}

_HEADLINE = {
    PlanState.PLANNING: "An agent is writing the plan.",
    PlanState.DRAFT: "The plan below waits for approval.",
    PlanState.APPROVED: "Plan approved; waiting for a worker.",
    PlanState.EXECUTING: "An agent is working on the approved plan.",
    PlanState.VERIFYING: "gaffer is running the repository's checks.",
    PlanState.IN_REVIEW: "The change waits for review.",
    PlanState.PR_OPEN: "The pull request is open.",
    PlanState.MERGED: "The pull request was merged.",
    PlanState.CLOSED: "The pull request was closed without merging.",
    PlanState.REJECTED: "The plan was rejected.",
    PlanState.CANCELLED: "The plan was cancelled.",
    PlanState.FAILED: "The work failed.",
    PlanState.ICEBOX: "The plan is on ice.",
    PlanState.SPLIT: "The work is split into the sub-issues below, each planned on its own.",
}


def commands_for(plan: Plan) -> list[str]:
    """List the commands that apply to the plan in its current state."""
    head = (plan.head_sha or "")[:12] or "<sha>"  # a best-of-N plan's: one of its candidates'
    usages = [
        _COMMAND_FOR[event].format(revision=plan.current_revision, head=head)
        for event in events_from(plan.state)
        if event in _COMMAND_FOR
    ]
    return [*dict.fromkeys(usages), "/status", "/help"]


@dataclass(frozen=True)
class Verification:
    """What the status comment shows of the checks on the plan's head."""

    checks: Sequence[CheckResult]
    compare_url: str | None = None
    pr_url: str | None = None


@dataclass(frozen=True)
class PartShown:
    """One part of a split plan as its parent's status shows it."""

    number: int
    title: str
    after: Sequence[int]
    issue_number: int | None
    state: str | None  # its plan's, once it has one


def parts_section(parts: Sequence[PartShown]) -> str:
    lines = ["#### Parts"]
    for part in parts:
        after = f" (after {', '.join(str(n) for n in part.after)})" if part.after else ""
        where = f"#{part.issue_number} " if part.issue_number else ""
        state = f" — `{part.state}`" if part.state else " — not opened yet"
        lines.append(f"{part.number}. {where}{part.title}{after}{state}")
    return "\n".join(lines)


def candidates_section(candidates: Sequence[Candidate], *, in_review: bool) -> str:
    """The candidates of a best-of-N plan, best first (bot/candidates.py ranks them)."""
    lines = [
        "#### Candidates, best first",
        "| | candidate | agent | head | checks | diff | outside scope | fix rounds | cost | time |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for place, each in enumerate(candidates, 1):
        head = f"`{each.head_sha[:12]}`" if each.head_sha else "—"
        if each.head_sha:
            mark = "✅" if each.checks_total and each.checks_passed == each.checks_total else "❌"
            checks = f"{mark} {each.checks_passed}/{each.checks_total} passed"
        else:
            checks = each.error or each.state.value
        diff = f"{each.files_changed} files, {each.lines_changed} lines" if each.head_sha else "—"
        lines.append(
            f"| {place} | c{each.number} | {each.agent or 'default'} | {head} | {checks} | {diff} "
            f"| {each.outside_scope} | {each.fix_rounds} | ${each.cost_usd:.4f} "
            f"| {each.seconds:.0f} s |"
        )
    if in_review and any(each.head_sha for each in candidates):
        lines.append(
            "\nApprove one with `/approve-diff <sha>`: gaffer opens the pull request from its "
            "branch and deletes the others'."
        )
    return "\n".join(lines)


def status_comment(
    plan: Plan,
    plan_text: str | None,
    verification: Verification | None = None,
    spend: Spend | None = None,
    *,
    changes: Sequence[str] = (),
    unsandboxed: bool = False,
    used: Sequence[Offered] = (),
    proposed: Sequence[Lesson] = (),
    waiting: str | None = None,
    split_into: Sequence[PartShown] = (),
    candidates: Sequence[Candidate] = (),
) -> str:
    """Render gaffer's one status comment for the plan.

    changes: what happened on the issue since the current revision was written, said
    once per kind and person (bot/snapshots.py). waiting: why its job is parked, if it is.
    split_into: the parts `/split` opened, with their plans' states. candidates: a
    best-of-N plan's, ranked, until one is picked.
    """
    revision = f" · revision r{plan.current_revision}" if plan.current_revision else ""
    parts = [
        STATUS_MARKER,
        f"### gaffer · `{plan.state.value}`{revision}",
        "Every part was merged."
        if split_into and plan.state == PlanState.MERGED
        else _HEADLINE[plan.state],
    ]
    if waiting:
        parts.append(f"**Waiting:** {waiting}")
    if plan.last_error and plan.state == PlanState.FAILED:
        parts.append(f"**What went wrong:** {plan.last_error}")
    if plan_text:
        parts.append(f"#### Plan r{plan.current_revision}\n\n{plan_text.strip()}")
    if used:
        parts.append(lessons_used(plan.current_revision, used))
    if split_into:
        parts.append(parts_section(split_into))
    if plan.approved_revision:
        parts.append(f"Approved: revision r{plan.approved_revision}.")
    if changes and plan.state in _READS_SNAPSHOT:
        parts.append(changed_since(plan.current_revision, changes))
    if candidates:
        parts.append(candidates_section(candidates, in_review=plan.state == PlanState.IN_REVIEW))
    if verification is not None and plan.head_sha:
        parts.append(_verification(plan, verification))
    if proposed:
        parts.append(lessons_proposed(proposed))
    parts.append(cost_line(plan, spend))
    parts.append("**Commands:** " + " · ".join(f"`{c}`" for c in commands_for(plan)))
    if unsandboxed:
        parts.append(UNSANDBOXED)
    agent = plan.agent or "default"
    parts.append(
        f"<sub>agent: {agent} · plan #{plan.id} · the database is the record; "
        "editing this comment changes nothing.</sub>"
    )
    return "\n\n".join(parts)


# States in which the plan's current revision, not the issue as it is now, is what counts.
_READS_SNAPSHOT = frozenset(
    {
        PlanState.DRAFT,
        PlanState.APPROVED,
        PlanState.EXECUTING,
        PlanState.VERIFYING,
        PlanState.IN_REVIEW,
        PlanState.ICEBOX,
        PlanState.FAILED,
        PlanState.SPLIT,
    }
)


def lessons_used(revision: int, offered: Sequence[Offered]) -> str:
    """List the kept lessons revision rN was written with, and those set aside."""
    lines = [f"#### Lessons r{revision} was written with", ""]
    for lesson in offered:
        if lesson.needs_look is None:
            lines.append(
                f"- {_lesson_line(lesson.id, lesson.text, lesson.author, lesson.source_url)}"
            )
    aside = [lesson for lesson in offered if lesson.needs_look is not None]
    if aside:
        lines += ["", "Needs a look, so not used (`/keep L<id>` after reading it again):", ""]
        for lesson in aside:
            line = _lesson_line(lesson.id, lesson.text, lesson.author, lesson.source_url)
            lines.append(f"- {line} — {lesson.needs_look}")
    return "\n".join(lines)


def lessons_proposed(lessons: Sequence[Lesson]) -> str:
    """List what the ended plan taught, for a writer to keep."""
    lines = ["#### Lessons this plan proposes", ""]
    for lesson in lessons:
        lines.append(f"- {_lesson_line(lesson.id, lesson.text, lesson.author, lesson.source_url)}")
    lines.append(
        "\nA writer's `/keep L<id>` keeps one for later plans of this repository (add "
        "`path:12-20` to tie it to lines); `/forget L<id>` drops it. Nothing is kept otherwise."
    )
    return "\n".join(lines)


def lessons_reply(lessons: Sequence[Lesson]) -> str:
    """Render the answer to /lessons."""
    if not lessons:
        return "This repository has no lessons yet: they are proposed when plans end."
    lines = ["| lesson | state | about | lesson |", "|---|---|---|---|"]
    for lesson in lessons:
        about = [c["path"] for c in lesson.citations] + list(lesson.scope or [])
        cites = ", ".join(f"`{each}`" for each in dict.fromkeys(about)) or "—"
        text = _lesson_line(lesson.id, lesson.text, lesson.author, lesson.source_url)
        lines.append(f"| L{lesson.id} | {lesson.state.value} | {cites} | {text} |")
    return "\n".join(lines)


def _lesson_line(number: int, text: str, author: str, url: str | None) -> str:
    words = " ".join(text.split()).replace("|", "\\|")
    source = f"[source]({url})" if url else "source unknown"
    return f"**L{number}** “{words}” — @{author}, {source}"


def changed_since(revision: int, changes: Sequence[str]) -> str:
    """Say that the issue changed after revision rN and that agents do not see it."""
    return (
        f"**Changed since r{revision}:** {'; '.join(changes)}. Agents work from the issue as "
        f"r{revision} read it; only a writer's `/revise <feedback>` brings new words in."
    )


UNSANDBOXED = (
    "⚠️ **This server runs agents and checks without a sandbox** (`sandbox: none`): they "
    "can reach what the worker can."
)

_ICON = {"success": "✅", "failure": "❌", "timed_out": "⏱️", "neutral": "➖", None: "⏳"}


def _verification(plan: Plan, verification: Verification) -> str:
    lines = [f"#### Checks on `{plan.head_sha}` (branch `{plan.branch}`)", ""]
    for check in verification.checks:
        icon = _ICON.get(check.conclusion, "❔")
        title = f" — {check.title}" if check.title else ""
        link = (
            f"[gaffer/{check.name}]({check.html_url})" if check.html_url else f"gaffer/{check.name}"
        )
        lines.append(f"- {icon} {link}{title}")
    if verification.compare_url:
        lines.append(f"\n[Compare with the base]({verification.compare_url})")
    if verification.pr_url:
        lines.append(f"\nPull request: {verification.pr_url}")
    if plan.state == PlanState.IN_REVIEW:
        lines.append(f"\n`/approve-diff {plan.head_sha}` approves exactly this commit.")
    return "\n".join(lines)


def cost_line(plan: Plan, spend: Spend | None) -> str:
    """Render what the plan has cost and its budget."""
    spent = str(spend) if spend and spend.source else "$0"
    budget = f"${plan.budget_usd}" if plan.budget_usd is not None else "no budget set"
    return f"**Cost so far:** {spent} · **budget:** {budget} (`/budget <usd>` to change)"


def cost_reply(plan: Plan, jobs: Sequence[Job], spend: Spend) -> str:
    """Render the answer to /cost: the plan's spend, job by job."""
    rows = [
        "| job | stage | model | input | output | cache read | cache write | $ | source |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for job in jobs:
        rows.append(
            f"| {job.id} | {job.stage} | {job.model or '—'} | {job.input_tokens} | "
            f"{job.output_tokens} | {job.cache_read_tokens} | {job.cache_write_tokens} | "
            f"{job.cost_usd:.4f} | {job.cost_source or '—'} |"
        )
    return f"Plan #{plan.id} has cost {spend} so far.\n\n" + "\n".join(rows)


def refusal(raw: str, reason: str) -> str:
    """Render the one reply to a refused command, quoting it."""
    quoted = raw.strip()[:300]
    return f"> {quoted}\n\n{reason}"


def status_reply(plan: Plan | None) -> str:
    """Render the answer to /status."""
    if plan is None:
        return "gaffer has no plan for this issue. Add the trigger label to ask for one."
    return (
        f"Plan #{plan.id} is `{plan.state.value}` at revision r{plan.current_revision}. "
        "Commands: " + " · ".join(f"`{c}`" for c in commands_for(plan))
    )


def denied_calls(stage: str, denials: Sequence[str]) -> str:
    """Tell the issue which tool calls the agent's own permissions refused in a stage."""
    shown = ", ".join(f"`{each}`" for each in denials[:10])
    more = f" and {len(denials) - 10} more" if len(denials) > 10 else ""
    return (
        f"During {stage}, the agent's own permissions refused {len(denials)} tool "
        f"call{'s' if len(denials) > 1 else ''}: {shown}{more}. Its work may be missing what "
        "those calls would have done (a test run, say); the checks below are gaffer's own."
    )


def config_error(message: str) -> str:
    """Render the reply about an invalid .github/gaffer.yml."""
    return f"gaffer cannot use `.github/gaffer.yml` from the default branch: {message}"


def foreign_pull_note(number: int, author: str, head_label: str, base: str) -> str:
    """Tell the issue that a PR on the plan's branch is someone else's, and ignored."""
    return (
        f"#{number} by @{author} (from `{head_label}` into `{base}`) is not gaffer's pull "
        "request, so gaffer ignores it: the plan's pull request is the one gaffer opens itself "
        "from its branch into the default branch after `/approve-diff`."
    )


# What each stage was doing, for the reply after its worker died.
_DOING: dict[str, str] = {
    Stage.PLAN: "planning",
    Stage.REVISE: "planning",
    Stage.EXECUTE: "execution",
    Stage.REWORK: "rework",
    Stage.OPEN_PR: "the pull request job",
    Stage.RECHECK: "the re-run of the checks",
}


def times_stopped(attempts: int) -> str:
    """Say how often a job's worker stopped: once, or N times."""
    return "once" if attempts <= 1 else f"{attempts} times"


def stage_doing(stage: str, *, checking: bool) -> str:
    """Name what a job of this stage was doing, for a person."""
    return "the checks" if checking else _DOING.get(stage, stage)


def lost_worker_reply(
    doing: str, attempts: int, *, resumed: bool, failed: bool, state: PlanState
) -> str:
    """Tell the issue what became of a job whose worker died: resumed, failed, or left."""
    if resumed:
        return f"gaffer's worker stopped while {doing} ran; the job was resumed on another worker."
    stopped = f"gaffer's worker stopped {times_stopped(attempts)} while {doing} ran"
    if failed:
        return f"{stopped}, so the plan is marked failed. Comment `/retry` to start again."
    return f"{stopped}, so gaffer stopped trying. The plan stays `{state.value}`."
