"""One job's working room: where its prompt and logs are kept, and what execution works with."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bot.github import RepoClient
from bot.memory import Offered
from bot.models import Job, Plan
from bot.repo_config import RepoConfig
from bot.snapshots import Snapshot
from bot.views import job_folder
from tasks.context import WorkerContext


def job_dir(wctx: WorkerContext, job: Job) -> Path:
    """Return the folder that keeps one job's prompt and logs."""
    path = job_folder(wctx.settings.home, job)
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Workspace:
    """Everything one execution job works with."""

    wctx: WorkerContext
    job: Job
    plan: Plan
    client: RepoClient
    config: RepoConfig
    issue: Snapshot  # as the approved revision read it
    plan_text: str
    worktree: Path
    mirror: Path
    default_branch: str
    # The kept lessons the approved revision was written with (bot/memory.py).
    lessons: list[Offered] = field(default_factory=list)

    @property
    def dir(self) -> Path:
        return job_dir(self.wctx, self.job)
