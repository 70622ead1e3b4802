"""Log records that say which delivery, plan and job they are about, as text or JSON lines.

`about(delivery=…, plan=…, job=…)` marks what the code inside it works on; every record
logged there carries those ids. With GAFFER_LOG_FORMAT=json each record is one JSON object
per line (time, level, logger, message, the ids, a traceback when there is one), for a log
collector; the text format stays as each handler writes it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime

_ABOUT: ContextVar[dict[str, int]] = ContextVar("gaffer_log_about", default={})  # noqa: B039


@contextmanager
def about(**ids: int | None) -> Iterator[None]:
    """Mark the records logged inside with these ids (delivery, plan, job)."""
    known = {name: value for name, value in ids.items() if value is not None}
    token = _ABOUT.set({**_ABOUT.get(), **known})
    try:
        yield
    finally:
        _ABOUT.reset(token)


class AboutFilter(logging.Filter):
    """Put the ids of what is being worked on on each record, as `gaffer_about`."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.gaffer_about = dict(_ABOUT.get())
        return True


class JsonLines(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        data = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **getattr(record, "gaffer_about", {}),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            data["traceback"] = record.exc_text
        return json.dumps(data, ensure_ascii=False)


def structure_logs(loggers: Iterable[logging.Logger], *, json_lines: bool) -> None:
    """Give each handler of loggers the ids of what is being worked on, and JSON lines as
    its format when asked."""
    for handler in [handler for logger in loggers for handler in logger.handlers]:
        if not any(isinstance(each, AboutFilter) for each in handler.filters):
            handler.addFilter(AboutFilter())
        if json_lines:
            handler.setFormatter(JsonLines())
