"""Issues: the trigger label starts a plan; closing or losing the issue stops it."""

from __future__ import annotations

from typing import Any

from bot.context import Asker, Context, Facts
from bot.event_router import Router
from bot.github import LABEL_PREFIX
from bot.handlers.installations import remember_installation, remember_repository
from bot.models import Job, JobState, Plan, Stage
from bot.plans import active_plan, add_job, advance, inherit_from_parent, new_plan, start_plan
from bot.queue import CLEANUP, RUN_JOB
from bot.render import config_error
from bot.repo_config import (
    DEFAULT_PRIORITY,
    PRIORITY_LABEL,
    RepoConfig,
    RepoConfigError,
    fetch_repo_config,
    load_repo_config,
    priority_in_labels,
)
from bot.snapshots import BODY_EDITED, TITLE_EDITED, note_change
from bot.states import Event

router = Router()


def gather(payload: dict[str, Any], ask: Asker) -> Facts:
    """Read the repository's config, before the transaction, for a label someone added
    (or a priority label someone took away)."""
    label = (payload.get("label") or {}).get("name") or ""
    prioritising = PRIORITY_LABEL.fullmatch(label.strip()) is not None
    if payload.get("action") not in ("labeled", "unlabeled") or (
        label.startswith(LABEL_PREFIX) and not prioritising
    ):
        return Facts()
    if payload["action"] == "unlabeled" and not prioritising:
        return Facts()
    client = ask.github(payload["installation"]["id"], payload["repository"]["full_name"])
    defaults = ask.settings.server_config.get("defaults")
    try:
        return Facts(config=fetch_repo_config(client, defaults))
    except RepoConfigError as error:
        return Facts(config_error=str(error))


@router.register("issues", "labeled")
def label_added(ctx: Context, payload: dict[str, Any]) -> None:
    """Start a plan when the trigger label is added to an issue without an active plan."""
    issue, repo = payload["issue"], payload["repository"]
    installation_id = payload["installation"]["id"]
    client = ctx.github(installation_id, repo["full_name"])
    label = (payload.get("label") or {}).get("name") or ""
    if PRIORITY_LABEL.fullmatch(label.strip()):
        prioritise(ctx, payload)
        return
    if label.startswith(LABEL_PREFIX):  # gaffer's own state labels come back as events
        return
    config = ctx.facts.config
    if config is None:
        # The broken file may have renamed the label; answer when the usual one is used.
        defaults = ctx.settings.server_config.get("defaults")
        if label == load_repo_config(None, defaults).label:
            message = config_error(ctx.facts.config_error or "it could not be read")
            ctx.after_commit(lambda: client.reply(issue["number"], message))
        return
    if label != config.label or issue.get("state") != "open":
        return
    remember_installation(ctx.session, payload)
    remember_repository(ctx.session, installation_id, repo)
    plan = new_plan(
        config,
        ctx.settings.default_agent,
        repository_id=repo["id"],
        installation_id=installation_id,
        issue=issue,
        clone_url=repo["clone_url"],
        priority=_priority(issue, config),
    )
    inherit_from_parent(ctx.session, plan)
    if not start_plan(ctx.session, plan):
        return
    job = add_job(ctx.session, plan, Stage.PLAN, "plan:r1")
    assert job is not None  # a new plan has no jobs yet
    ctx.session.flush()
    # The planning job shows the plan on the issue once GitHub confirms the issue is open
    # and labeled: this payload may be an old one replayed.
    ctx.enqueue(RUN_JOB, job_id=job.id)


@router.register("issues", "unlabeled")
def prioritise(ctx: Context, payload: dict[str, Any]) -> None:
    """A `gaffer: pN` label added or taken away: the active plan takes the issue's most
    urgent priority label, or the repository's `priority` when none is left."""
    label = (payload.get("label") or {}).get("name") or ""
    if not PRIORITY_LABEL.fullmatch(label.strip()):
        return
    plan = active_plan(ctx.session, payload["repository"]["id"], payload["issue"]["number"])
    if plan is not None:
        plan.priority = _priority(payload["issue"], ctx.facts.config)


def _priority(issue: dict[str, Any], config: RepoConfig | None) -> int:
    chosen = priority_in_labels(issue.get("labels") or [])
    if chosen is not None:
        return chosen
    return config.priority if config else DEFAULT_PRIORITY


@router.register("issues", "closed")
@router.register("issues", "locked")
@router.register("issues", "deleted")
@router.register("issues", "transferred")
def issue_gone(ctx: Context, payload: dict[str, Any]) -> None:
    """Stop the issue's plan when the issue is closed, locked, deleted or moved away."""
    repo, number = payload["repository"], payload["issue"]["number"]
    plan = active_plan(ctx.session, repo["id"], number)
    if plan is None:
        return
    reason = f"issue {payload['action']}"
    if advance(ctx.session, plan, Event.ISSUE_CLOSED, actor=_login(payload), reason=reason):
        stop_plan_work(ctx, plan)
        if payload["action"] in ("closed", "locked"):  # the issue is still there to show it
            ctx.publish_status(plan.installation_id, repo["full_name"], plan.id)


@router.register("issues", "edited")
def issue_edited(ctx: Context, payload: dict[str, Any]) -> None:
    """Note an edited title or body on the status comment; the running work does not see it."""
    repo, issue = payload["repository"], payload["issue"]
    plan = active_plan(ctx.session, repo["id"], issue["number"])
    if plan is None:
        return
    changed = payload.get("changes") or {}
    noted = [
        note_change(ctx.session, plan, what, _login(payload), text=issue.get(key) or "")
        for key, what in (("title", TITLE_EDITED), ("body", BODY_EDITED))
        if key in changed
    ]
    if any(noted):
        ctx.publish_status(plan.installation_id, repo["full_name"], plan.id)


def stop_plan_work(ctx: Context, plan: Plan) -> None:
    """Cancel the plan's unfinished jobs (a running agent sees it and stops) and clean up."""
    for job in ctx.session.query(Job).filter(
        Job.plan_id == plan.id, Job.state.in_([JobState.QUEUED, JobState.RUNNING])
    ):
        job.state = JobState.CANCELLED
    ctx.enqueue(CLEANUP, plan_id=plan.id)


def _login(payload: dict[str, Any]) -> str:
    return str((payload.get("sender") or {}).get("login", "unknown"))
