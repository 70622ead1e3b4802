"""A synchronous router shaped like gidgethub's: handlers keyed by event and action."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.context import Context

Handler = Callable[[Context, dict[str, Any]], None]


class Router:
    """Handlers keyed by event and action."""

    def __init__(self) -> None:
        self._handlers: dict[tuple[str, str | None], list[Handler]] = {}

    def register(self, event: str, action: str | None = None) -> Callable[[Handler], Handler]:
        def add(handler: Handler) -> Handler:
            self._handlers.setdefault((event, action), []).append(handler)
            return handler

        return add

    def handlers_for(self, event: str, action: str | None) -> list[Handler]:
        return self._handlers.get((event, action), []) + (
            self._handlers.get((event, None), []) if action is not None else []
        )

    def events(self) -> set[str]:
        """Return the event names any handler is registered for."""
        return {event for event, _ in self._handlers}

    def include(self, other: Router) -> None:
        for key, handlers in other._handlers.items():
            self._handlers.setdefault(key, []).extend(handlers)
