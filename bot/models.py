"""The database: installations, repositories, plans and everything that happens to them."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    Numeric,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    """Return the current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


def github_time(text: str) -> datetime:
    """Parse a time as GitHub writes it (`2024-01-01T00:00:00Z`) into an aware datetime."""
    return aware(datetime.fromisoformat(text.replace("Z", "+00:00")))


def aware(moment: datetime) -> datetime:
    """Return moment as UTC-aware: SQLite hands back naive UTC datetimes, PostgreSQL aware."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    pass


class PlanState(StrEnum):
    PLANNING = "planning"
    DRAFT = "draft"
    APPROVED = "approved"
    EXECUTING = "executing"
    VERIFYING = "verifying"
    IN_REVIEW = "in_review"
    PR_OPEN = "pr_open"
    MERGED = "merged"
    CLOSED = "closed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    FAILED = "failed"
    ICEBOX = "icebox"
    SPLIT = "split"  # its parts are sub-issues with plans of their own; done when all merge


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Stage(StrEnum):
    """What a job does (stored in `jobs.stage`), and what an agent is run for: FIX is an
    agent run inside an execute or rework job, never a job of its own."""

    PLAN = "plan"
    REVISE = "revise"
    EXECUTE = "execute"
    REWORK = "rework"
    FIX = "fix"
    OPEN_PR = "open_pr"
    PARTS = "parts"  # open the sub-issues `/split` asked for, and start their plans
    RECHECK = "recheck"


class CandidateState(StrEnum):
    """Where one candidate of a best-of-N plan stands (stored in `candidates.state`)."""

    QUEUED = "queued"
    RUNNING = "running"
    VERIFIED = "verified"  # its checks ran on its head: green or not, it can be compared
    FAILED = "failed"  # no head to compare: the agent failed or was stopped
    CHOSEN = "chosen"  # `/approve-diff <sha>` picked it; its branch is the plan's
    DROPPED = "dropped"  # another was chosen; its branch and worktree are cleaned up


class ApprovalKind(StrEnum):
    """What an approval approved (stored in `approvals.kind`)."""

    PLAN = "plan"
    DIFF = "diff"


def _enum(cls: type[StrEnum]) -> Enum:
    # Stored by value so the rows read the same in SQL as in the code.
    return Enum(cls, values_callable=lambda e: [m.value for m in e], native_enum=False, length=20)


class Installation(Base):
    __tablename__ = "installations"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    account_login: Mapped[str] = mapped_column(String(200))
    suspended: Mapped[bool] = mapped_column(default=False)
    removed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Repository(Base):
    __tablename__ = "repositories"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    installation_id: Mapped[int | None] = mapped_column(
        ForeignKey("installations.id", ondelete="SET NULL")
    )
    full_name: Mapped[str] = mapped_column(String(200), index=True)
    removed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Delivery(Base):
    """One webhook delivery as received; the outbox work is enqueued from."""

    __tablename__ = "deliveries"
    __table_args__ = (
        UniqueConstraint("source", "hook_id", "delivery_id"),
        # The outbox: rows not yet handed to the broker (bot/outbox.py).
        Index(
            "ix_deliveries_unsent",
            "id",
            postgresql_where=text("enqueued_at IS NULL"),
            sqlite_where=text("enqueued_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    source: Mapped[str] = mapped_column(String(20))
    hook_id: Mapped[str] = mapped_column(String(64))
    delivery_id: Mapped[str] = mapped_column(String(128))
    event: Mapped[str] = mapped_column(String(64))
    action: Mapped[str | None] = mapped_column(String(64))
    payload: Mapped[str] = mapped_column(Text)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    enqueued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    processed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), index=True)
    attempts: Mapped[int] = mapped_column(default=0)
    error: Mapped[str | None] = mapped_column(Text)


class Plan(Base):
    """A plan for one issue, from the first draft to its pull request."""

    __tablename__ = "plans"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repository_id: Mapped[int] = mapped_column(ForeignKey("repositories.id"), index=True)
    installation_id: Mapped[int] = mapped_column(BigInteger)
    issue_number: Mapped[int] = mapped_column(Integer)
    issue_title: Mapped[str] = mapped_column(Text)
    issue_author: Mapped[str] = mapped_column(String(200))
    clone_url: Mapped[str] = mapped_column(Text)
    # Set while the plan is active and cleared when it ends: unique, so one issue
    # never has two active plans however the events race.
    active_key: Mapped[str | None] = mapped_column(String(250), unique=True)
    state: Mapped[PlanState] = mapped_column(_enum(PlanState), default=PlanState.PLANNING)
    version: Mapped[int] = mapped_column(default=1)
    current_revision: Mapped[int] = mapped_column(default=0)
    approved_revision: Mapped[int | None] = mapped_column(Integer)
    base_sha: Mapped[str | None] = mapped_column(String(40))
    branch: Mapped[str | None] = mapped_column(String(250))
    # The head the checks ran on: the only SHA /approve-diff can approve.
    head_sha: Mapped[str | None] = mapped_column(String(40))
    fix_rounds: Mapped[int] = mapped_column(default=0)
    pr_number: Mapped[int | None] = mapped_column(Integer)
    # A per-plan budget set by /budget; the repo config's budget.plan_usd applies otherwise.
    budget_usd: Mapped[Decimal | None] = mapped_column(Numeric(12, 2))
    agent: Mapped[str | None] = mapped_column(String(100))
    model: Mapped[str | None] = mapped_column(String(200))
    # 0 is the most urgent; None takes the repository's `priority` (tasks/slots.py reads it).
    priority: Mapped[int | None] = mapped_column(Integer)
    # The repository's own limit on agent jobs at once (`concurrency`), as it was set when
    # the plan began, like its agent and budget.
    concurrency: Mapped[int | None] = mapped_column(Integer)
    status_comment_id: Mapped[int | None] = mapped_column(BigInteger)
    # Set by the one publisher posting the first status comment, so no other posts one too.
    status_claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # What gaffer last put on the issue (bot/status.py): a digest of the status comment's
    # text and the state it labelled. They only spare GitHub reads: a write never trusts them.
    status_shown: Mapped[str | None] = mapped_column(String(64))
    label_shown: Mapped[PlanState | None] = mapped_column(_enum(PlanState))
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )

    repository: Mapped[Repository] = relationship(lazy="joined")
    revisions: Mapped[list[PlanRevision]] = relationship(
        back_populates="plan", order_by="PlanRevision.number"
    )


class PlanRevision(Base):
    __tablename__ = "plan_revisions"
    __table_args__ = (UniqueConstraint("plan_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    body: Mapped[str] = mapped_column(Text)
    feedback: Mapped[str | None] = mapped_column(Text)
    author: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # The issue as the revision was written from it (bot/snapshots.py): what the agent
    # reads when this revision is approved, and nothing that came later.
    source: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The lessons the revision was written with (bot/memory.py, Used.to_json): shown on the
    # plan, and the only ones its execution reads.
    memory: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    # The files the revision says it will change (its Scope section, paths or globs): two
    # approved plans whose scopes meet do not execute at once (tasks/forecast.py).
    scope: Mapped[list[str] | None] = mapped_column(JSON)

    plan: Mapped[Plan] = relationship(back_populates="revisions")


class IssueChange(Base):
    """An edit or comment on a plan's issue that its current revision did not read."""

    __tablename__ = "issue_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    revision: Mapped[int] = mapped_column(Integer)  # the plan's current revision then
    what: Mapped[str] = mapped_column(String(40))
    actor: Mapped[str] = mapped_column(String(200))
    # The comment's id for a comment change, 0 for the issue's title or body.
    ref: Mapped[int] = mapped_column(BigInteger, default=0)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Job(Base):
    """One unit of agent work; its lease keeps a redelivered task from running it twice."""

    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("plan_id", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    stage: Mapped[str] = mapped_column(String(20))
    # What makes this job unique within its plan, e.g. "plan:r2".
    key: Mapped[str] = mapped_column(String(100))
    state: Mapped[JobState] = mapped_column(_enum(JobState), default=JobState.QUEUED)
    feedback: Mapped[str | None] = mapped_column(Text)
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    attempts: Mapped[int] = mapped_column(default=0)
    agent: Mapped[str | None] = mapped_column(String(100))
    model: Mapped[str | None] = mapped_column(String(200))
    # What the job's agent runs used, summed over its runs (an execute job's fix rounds too).
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    reasoning_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_usd: Mapped[Decimal] = mapped_column(Numeric(12, 6), default=Decimal(0))
    # agent (reported by the tool), computed (tokens × prices) or estimated.
    cost_source: Mapped[str | None] = mapped_column(String(20))
    # Set while the job waits for a provider's quota to reset.
    parked_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Seconds the job was set to wait on quotas and budgets, summed over its parkings.
    parked_s: Mapped[float] = mapped_column(Float, default=0.0, server_default=text("0"))
    # What the job waits for, while it does: a limit's scope (tasks/slots.py), an earlier
    # plan (`plan:`, bot/plans.py), or its provider account's probe (`probe:`,
    # tasks/stages/governor.py).
    waiting_on: Mapped[str | None] = mapped_column(String(250))
    error: Mapped[str | None] = mapped_column(Text)
    log_path: Mapped[str | None] = mapped_column(Text)
    # The stage program the job asks for (expand, split…), when not the stage's own.
    program: Mapped[str | None] = mapped_column(String(40))
    # What the job's agent ran with: programs and conventions files with their blob SHAs,
    # and the lessons used or set aside (tasks/stages/guidance.py).
    inputs: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The candidate of a best-of-N plan the job works on (`candidates.number`), if any.
    candidate: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class CheckResult(Base):
    """One verification of a plan's head: a repository check or gaffer's diff check."""

    __tablename__ = "check_results"
    __table_args__ = (UniqueConstraint("plan_id", "head_sha", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    head_sha: Mapped[str] = mapped_column(String(40))
    name: Mapped[str] = mapped_column(String(100))
    conclusion: Mapped[str | None] = mapped_column(String(20))
    title: Mapped[str | None] = mapped_column(Text)
    check_run_id: Mapped[int | None] = mapped_column(BigInteger)
    html_url: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Approval(Base):
    """An approval bound to what it approved: a plan revision or a verified head SHA."""

    __tablename__ = "approvals"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(10))
    revision: Mapped[int | None] = mapped_column(Integer)
    sha: Mapped[str | None] = mapped_column(String(40))
    approver: Mapped[str] = mapped_column(String(200))
    comment_id: Mapped[int] = mapped_column(BigInteger)
    # `/approve parallel`: the plan may execute beside plans whose scopes meet its own.
    parallel: Mapped[bool] = mapped_column(default=False, server_default=text("false"))
    voided_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Candidate(Base):
    """One of the N candidates `/approve rN xN` runs: its own agent, branch, worktree and
    share of the plan's budget, and what its verification showed, for ranking."""

    __tablename__ = "candidates"
    __table_args__ = (UniqueConstraint("plan_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    state: Mapped[CandidateState] = mapped_column(
        _enum(CandidateState), default=CandidateState.QUEUED
    )
    agent: Mapped[str | None] = mapped_column(String(100))
    model: Mapped[str | None] = mapped_column(String(200))
    # Its share of what was left of the plan's budget when it was approved; None: no budget.
    budget_usd: Mapped[Decimal | None] = mapped_column(Numeric(12, 6))
    branch: Mapped[str | None] = mapped_column(String(250))
    head_sha: Mapped[str | None] = mapped_column(String(40))
    checks_passed: Mapped[int] = mapped_column(default=0)
    checks_total: Mapped[int] = mapped_column(default=0)
    files_changed: Mapped[int] = mapped_column(default=0)
    lines_changed: Mapped[int] = mapped_column(default=0)
    outside_scope: Mapped[int] = mapped_column(default=0)
    fix_rounds: Mapped[int] = mapped_column(default=0)
    cost_usd: Mapped[Decimal] = mapped_column(Numeric(12, 6), default=Decimal(0))
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PlanPart(Base):
    """One part `/split` made of a plan: a sub-issue of the plan's issue, planned on its own."""

    __tablename__ = "plan_parts"
    __table_args__ = (UniqueConstraint("plan_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    title: Mapped[str] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text)
    # The numbers of the parts that must be merged before this one executes.
    after: Mapped[list[int]] = mapped_column(JSON, default=list)
    # Set once its sub-issue is open (the number people read, the id the API links by).
    issue_number: Mapped[int | None] = mapped_column(Integer)
    issue_id: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Notice(Base):
    """A note gaffer posts on a plan's issue once, however many events ask for it."""

    __tablename__ = "notices"
    __table_args__ = (UniqueConstraint("plan_id", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class CommandReceipt(Base):
    """A command comment seen once: two deliveries of one comment act once."""

    __tablename__ = "command_receipts"
    __table_args__ = (
        UniqueConstraint("repository_id", "comment_id"),
        # Refusals are counted per user and issue (bot/refusals.py).
        Index("ix_command_receipts_thread", "repository_id", "issue_number", "actor"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repository_id: Mapped[int] = mapped_column(BigInteger)
    comment_id: Mapped[int] = mapped_column(BigInteger)
    # None on receipts written before gaffer counted refusals per issue.
    issue_number: Mapped[int | None] = mapped_column(Integer)
    command: Mapped[str] = mapped_column(String(40))
    actor: Mapped[str] = mapped_column(String(200))
    # How gaffer answered when it did not act: see bot/refusals.py.
    outcome: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AuditEvent(Base):
    """Who did what to a plan, when and why."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"), index=True)
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(40))
    from_state: Mapped[str | None] = mapped_column(String(20))
    to_state: Mapped[str | None] = mapped_column(String(20))
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LessonState(StrEnum):
    """Where a lesson stands (stored in `lessons.state`)."""

    HEARD = "heard"  # said while its plan runs; proposed when the plan ends
    PROPOSED = "proposed"  # waits for a writer's /keep
    KEPT = "kept"  # used by later plans while it holds
    FORGOTTEN = "forgotten"
    EXPIRED = "expired"  # neither used in a merged plan nor kept again for 28 days


class Lesson(Base):
    """What a reviewer or a check taught, with where it came from and the lines it is about."""

    __tablename__ = "lessons"
    __table_args__ = (UniqueConstraint("repository_id", "origin"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repository_id: Mapped[int] = mapped_column(BigInteger, index=True)
    state: Mapped[LessonState] = mapped_column(_enum(LessonState))
    text: Mapped[str] = mapped_column(Text)
    # What made it, once: "comment:<id>" for a command's words, "check:<plan>:<name>".
    origin: Mapped[str] = mapped_column(String(120))
    kind: Mapped[str] = mapped_column(String(20))  # revise, reject, check, remember
    # [{"path", "start", "end", "digest"}]: lines of the default branch; start None for a
    # whole file. The digests are taken when a writer keeps the lesson.
    citations: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    # Path globs a writer scoped it to (`/keep L3 src/**`): an issue naming a matching path
    # is one it concerns, as is one naming a cited file.
    scope: Mapped[list[str]] = mapped_column(JSON, default=list)
    author: Mapped[str] = mapped_column(String(200))
    said_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    source_url: Mapped[str | None] = mapped_column(Text)
    issue_number: Mapped[int] = mapped_column(Integer)
    plan_id: Mapped[int | None] = mapped_column(
        ForeignKey("plans.id", ondelete="SET NULL"), index=True
    )
    revision: Mapped[int | None] = mapped_column(Integer)
    diff_sha: Mapped[str | None] = mapped_column(String(40))
    pr_number: Mapped[int | None] = mapped_column(Integer)
    decided_by: Mapped[str | None] = mapped_column(String(200))  # who kept or forgot it
    decided_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Kept, or used by a plan that merged: 28 days from then it expires.
    confirmed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Heartbeat(Base):
    """When one of gaffer's background services last did its work, for /healthz."""

    __tablename__ = "heartbeats"

    name: Mapped[str] = mapped_column(String(40), primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ProviderHold(Base):
    """A provider account at its limit: no agent of that account starts before `until`, on
    any worker; after it, one job (the probe) tries first and the rest wait for its answer."""

    __tablename__ = "provider_holds"

    # The key's env name and a digest of its value (tasks/stages/governor.py), never the key.
    account: Mapped[str] = mapped_column(String(120), primary_key=True)
    until: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    reason: Mapped[str] = mapped_column(Text)
    job_id: Mapped[int | None] = mapped_column(Integer)  # the run that met the limit
    probe_job_id: Mapped[int | None] = mapped_column(Integer)
    probe_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    probe_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ProviderAnswer(Base):
    """When a provider account last answered one of its runs: an account heard from lately
    is warm, and its jobs start without waiting for a probe (tasks/stages/governor.py)."""

    __tablename__ = "provider_answers"

    account: Mapped[str] = mapped_column(String(120), primary_key=True)
    answered_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Slot(Base):
    """One place under a concurrency limit (tasks/slots.py): `scope` names what is limited
    (`repository:owner/name`, `account:<key name>`), `number` counts up to the limit, and
    `job_id` is the job running in it, if any."""

    __tablename__ = "slots"

    scope: Mapped[str] = mapped_column(String(250), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int | None] = mapped_column(Integer, index=True)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
