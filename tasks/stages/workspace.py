"""One job's working room: where its prompt and logs are kept, and what execution works with."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from bot.db import Database
from bot.github import RepoClient
from bot.memory import Offered
from bot.models import Job, Plan
from bot.repo_config import RepoConfig
from bot.snapshots import Snapshot
from bot.status import publish_status
from bot.views import job_folder
from tasks.context import WorkerContext

log = logging.getLogger(__name__)


def job_dir(wctx: WorkerContext, job: Job) -> Path:
    """Return the folder that keeps one job's prompt and logs."""
    path = job_folder(wctx.settings.home, job)
    path.mkdir(parents=True, exist_ok=True)
    return path


class Teller:
    """Shows the plan as it stands on its issue, each showing after the last has landed.
    A showing may go on beside the job, which need not wait for GitHub to move on."""

    def __init__(self, db: Database, client: RepoClient, plan_id: int) -> None:
        self.db, self.client, self.plan_id = db, client, plan_id
        self._showing: threading.Thread | None = None

    def show(self, *, beside_job: bool = False) -> None:
        self.wait()
        if not beside_job:
            publish_status(self.db, self.client, self.plan_id)
            return
        self._showing = threading.Thread(target=self._show_logged, daemon=True)
        self._showing.start()

    def wait(self) -> None:
        if self._showing is not None:
            self._showing.join()
            self._showing = None

    def _show_logged(self) -> None:
        try:
            publish_status(self.db, self.client, self.plan_id)
        except Exception:  # noqa: BLE001 - the job's next showing tells the issue again
            log.warning("the status of plan %s was not shown", self.plan_id, exc_info=True)


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
    # What shows the plan on its issue, if the job keeps one for its whole length.
    teller: Teller | None = None
    # Whether origin has the plan branch (a new one is not protected: no need to ask).
    branch_on_origin: bool = True
    # A commit this job made and pushed, not yet verified: GitHub holds no check run for it.
    new_head: str | None = None

    @property
    def dir(self) -> Path:
        return job_dir(self.wctx, self.job)
