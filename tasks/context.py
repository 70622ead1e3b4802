"""What every task is given: settings, the database, GitHub and the broker."""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from celery import Celery

from bot.db import Database
from bot.github import GitHubApp, RepoClient
from bot.masking import SecretMask
from bot.queue import enqueue
from bot.settings import Settings
from tasks.isolation.sandbox import Sandbox


@dataclass
class WorkerContext:
    """The worker process's long-lived parts, built once when it starts."""

    settings: Settings
    db: Database
    celery: Celery
    github_app: GitHubApp
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")

    @property
    def mask(self) -> SecretMask:
        """Return the mask every text gaffer posts or logs passes through."""
        return self.github_app.mask

    @classmethod
    def build(
        cls, settings: Settings, celery: Celery, environ: Mapping[str, str] | None = None
    ) -> WorkerContext:
        """Build the context; agents read their keys from environ (os.environ by default)."""
        mask = SecretMask.from_settings(settings, os.environ if environ is None else environ)
        github_app = GitHubApp(settings, mask)
        return cls(settings, Database(settings.database_url), celery, github_app)

    @functools.cached_property
    def sandbox(self) -> Sandbox:
        """Return how this worker isolates agents and checks (the `sandbox:` setting)."""
        return Sandbox.from_settings(self.settings, os.environ)

    def client(self, installation_id: int, full_name: str) -> RepoClient:
        """Return a GitHub client for one repository of one installation."""
        return self.github_app.installation(installation_id, full_name)

    def send_task(self, name: str, *, countdown: float | None = None, **kwargs: Any) -> None:
        enqueue(self.celery, name, countdown=countdown, **kwargs)

    def setting(self, key: str, default: Any) -> Any:
        """Return a server-wide setting from the GAFFER_CONFIG file."""
        return self.settings.server_config.get(key, default)
