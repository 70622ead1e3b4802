"""What every task is given: settings, the database, GitHub and the broker."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

from celery import Celery

from bot.db import Database
from bot.github import GitHubApp, RepoClient
from bot.queue import enqueue
from bot.settings import Settings


@dataclass
class WorkerContext:
    """The worker process's long-lived parts, built once when it starts."""

    settings: Settings
    db: Database
    celery: Celery
    github_app: GitHubApp
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")

    @classmethod
    def build(cls, settings: Settings, celery: Celery) -> WorkerContext:
        return cls(settings, Database(settings.database_url), celery, GitHubApp(settings))

    def client(self, installation_id: int, full_name: str) -> RepoClient:
        """Return a GitHub client for one repository of one installation."""
        return self.github_app.installation(installation_id, full_name)

    def send_task(self, name: str, **kwargs: Any) -> None:
        enqueue(self.celery, name, **kwargs)

    def setting(self, key: str, default: Any) -> Any:
        """Return a server-wide setting from the GAFFER_CONFIG file."""
        return self.settings.server_config.get(key, default)
