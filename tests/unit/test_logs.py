"""Log records say which delivery, plan and job they are about; JSON lines when asked."""

from __future__ import annotations

import io
import json
import logging

from bot.logs import about, structure_logs


def test_json_lines_carry_the_ids_of_what_is_being_worked_on() -> None:
    logger = logging.getLogger("gaffer.test.logs")
    logger.propagate = False
    stream = io.StringIO()
    logger.handlers = [logging.StreamHandler(stream)]
    structure_logs([logger], json_lines=True)
    with about(delivery=7):
        logger.warning("handled %s", "issues")
        with about(plan=3, job=11):
            try:
                raise ValueError("broken")
            except ValueError:
                logger.exception("job failed")
    logger.warning("outside")
    first, second, third = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert (first["message"], first["delivery"], first["level"]) == ("handled issues", 7, "WARNING")
    assert "plan" not in first
    assert (second["delivery"], second["plan"], second["job"]) == (7, 3, 11)
    assert "ValueError: broken" in second["traceback"]
    assert set(third) == {"time", "level", "logger", "message"}
