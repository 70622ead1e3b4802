"""Find installations gaffer has not seen in a webhook, by asking GitHub as the App."""

from __future__ import annotations

from bot.handlers.installations import remember_found
from tasks.context import WorkerContext


def discover_installation(wctx: WorkerContext, full_name: str) -> bool:
    """Record the installation GitHub says holds full_name; False if the App is not on it.

    Runs outside any transaction: GitHub is asked first, then one short write records it.
    A GitHub failure other than 404 propagates, so the task that asked is retried.
    """
    found = wctx.github_app.find_installation(full_name)
    if found is None:
        return False
    with wctx.db.session() as session:
        remember_found(session, found)
    return True
