"""Run a stage's agent within the budgets, park it on quota limits, and record its cost."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from functools import partial
from pathlib import Path

from bot.models import Job, Plan
from bot.queue import RUN_JOB
from bot.repo_config import RepoConfig
from tasks.agent_slots import SlotWaitStopped, agent_slot, agent_slots
from tasks.agents.definitions import AgentResult, AgentSpec, load_agents, run_agent
from tasks.context import WorkerContext
from tasks.leases import is_cancelled
from tasks.stages.costs import (
    add_usage,
    daily_budget_reached,
    plan_budget,
    quota_reset,
    spend_left,
    tomorrow,
)
from tasks.stages.governor import account_of, admit, answered, let_go, limit_met
from tasks.worktrees import git_dirs

log = logging.getLogger(__name__)

# Enough for any agent CLI; a runaway is stopped long before it starves the worker.
AGENT_MEMORY_MB = 4096
# A job that waited longer than this for its agent slot asks its budgets again.
BUDGETS_STALE_S = 1.0


class Held(Exception):
    """The job must wait until a time; the message says why, for the issue (unless `tell` is
    False: a wait of seconds that would only add noise to the thread)."""

    def __init__(self, until: datetime, message: str, *, tell: bool = True) -> None:
        super().__init__(message)
        self.until = until
        self.tell = tell


class Stopped(Exception):
    """The stage cannot run; the message says why and how to go on."""


class OverBudget(Stopped):
    """The plan's budget is spent."""


class NoAgent(Stopped):
    """Neither the repository nor the server chose an agent."""


NO_AGENT = (
    "no agent is chosen for this repository. Set `agent:` in `.github/gaffer.yml` or "
    "GAFFER_DEFAULT_AGENT on the server (for example `claude`, installed on the workers; "
    "see the README's agents table), then answer `/retry`."
)


def run_stage_agent(
    wctx: WorkerContext,
    job: Job,
    plan: Plan,
    config: RepoConfig,
    stage: str,
    prompt: str,
    workdir: Path,
    job_dir: Path,
) -> AgentResult:
    """Run the plan's agent for stage, enforcing budgets and parking on quota limits."""
    spec = agent_of(wctx, plan, job)
    account = account_of(spec, os.environ)
    should_stop = partial(is_cancelled, wctx.db, job.id)
    slots = agent_slots(wctx.setting("agent_slots", None))
    left = _budget_left(wctx, job, plan, config)  # before the wait: a spent plan need not wait
    asked = time.monotonic()

    @contextmanager
    def turn() -> Iterator[Decimal | None]:
        """The machine's slot, for the agent's run alone (tasks/agent_slots.py): the agent
        is readied before it and started on taking it."""
        with agent_slot(wctx.settings.home, slots, should_stop):
            limit = left
            if time.monotonic() - asked > BUDGETS_STALE_S:  # others spent while it waited
                limit = _budget_left(wctx, job, plan, config)
            # The account is asked only now: a limit met while the job waited counts.
            if (wait := admit(wctx.db, account, job.id)) is not None:
                raise Held(wait.until, f"{wait.reason}.", tell=wait.tell)
            yield limit

    heard = partial(_heard, wctx, account)
    try:
        result = run_agent(
            spec,
            stage=stage,
            prompt=prompt,
            workdir=workdir,
            job_dir=job_dir,
            model=job.model if job.candidate else plan.model,
            timeout_s=float(wctx.setting("agent_timeout_s", 3600)),
            idle_timeout_s=float(wctx.setting("agent_idle_timeout_s", 600)),
            source_env=os.environ,
            should_stop=should_stop,
            prices=wctx.setting("prices", None),
            memory_mb=spec.memory_limit_mb(wctx.setting("agent_memory_mb", AGENT_MEMORY_MB)),
            sandbox=wctx.sandbox,
            shown=git_dirs(workdir, wctx.settings.home),
            on_answer=heard,  # the jobs waiting for this one's answer go at once
            turn=turn(),
        )
    except SlotWaitStopped as stopped:
        raise Stopped(str(stopped)) from stopped
    add_usage(wctx, job.id, result.usage)
    if result.over_budget:
        raise OverBudget(_over_budget_message(plan, config))
    if result.quota is None:
        if result.ok or (result.usage is not None and result.usage.total_tokens):
            heard()  # the provider answered
        else:  # not started, stopped or failed before any answer: another job may probe
            _send(wctx, let_go(wctx.db, account, job.id))
    else:
        until = quota_reset(result.quota.retry_after_s)
        limit_met(wctx.db, account, job.id, until, result.quota.reason)
        raise Held(
            until,
            f"the agent hit its provider's limit ({result.quota.reason}); "
            f"gaffer resumes the job at {until:%Y-%m-%d %H:%M} UTC.",
        )
    return result


def _budget_left(wctx: WorkerContext, job: Job, plan: Plan, config: RepoConfig) -> Decimal | None:
    """What the plan may still spend (None: no limit); Held or OverBudget when its budgets
    are spent."""
    if daily_budget_reached(wctx, plan, config):
        raise Held(
            tomorrow(),
            f"the repository has spent its daily budget of "
            f"${config.budget.daily_usd}; the job starts again tomorrow "
            "(UTC) or when `budget.daily_usd` is raised.",
        )
    left = spend_left(wctx, plan, config, job)
    if left is not None and left <= 0:
        raise OverBudget(_over_budget_message(plan, config))
    return left


def _heard(wctx: WorkerContext, account: str) -> None:
    """The provider answered: clear the account's hold and send the jobs that waited. Called
    while the agent runs, so a fault here is logged, never let through to stop the run: the
    waiters look again on their own."""
    try:
        _send(wctx, answered(wctx.db, account))
    except Exception:  # noqa: BLE001 - see above
        log.warning("the answer on account %s was not recorded", account, exc_info=True)


def _send(wctx: WorkerContext, job_ids: list[int]) -> None:
    for job_id in job_ids:
        wctx.send_task(RUN_JOB, job_id=job_id)


def agent_of(wctx: WorkerContext, plan: Plan, job: Job) -> AgentSpec:
    """Return the job's agent: a candidate's own, else the plan's, else the server's
    default; NoAgent says what to do."""
    name = (job.agent if job.candidate else None) or plan.agent or wctx.settings.default_agent
    if name is None:
        raise NoAgent(NO_AGENT)
    agents = load_agents(wctx.setting("agents", None))
    if name not in agents:
        raise NoAgent(
            f"the agent {name!r} is not defined on this server (defined: "
            f"{', '.join(sorted(agents))}). Choose one with `/agent <name>` or `agent:` in "
            "`.github/gaffer.yml`, then answer `/retry`."
        )
    return agents[name]


def _over_budget_message(plan: Plan, config: RepoConfig) -> str:
    return (
        f"the plan reached its budget of ${plan_budget(plan, config)}. "
        "Raise it with `/budget <usd>` and answer `/retry` to go on."
    )
