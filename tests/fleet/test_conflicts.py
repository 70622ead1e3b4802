"""A conflict between two plans in flight is shown on the diff check before anyone approves it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bot.models import PlanState
from double.driver import IssueFlow
from double.origin import commit_to_origin
from tests.conftest import INSTALLATION_ID, REPO
from tests.support import WEBHOOK_SECRET

CONFIG = "checks:\n  - name: tests\n    run: 'true'\n    timeout: 30\n"


def writes(value: str) -> str:
    step = f'- write: {{path: widgets.py, content: "VALUE = {value!r}\\n"}}'
    return f"Change the widget.\n\n```gaffer-script\nexecute:\n  {step}\n```\n"


def test_the_second_plan_on_the_same_lines_is_told_it_conflicts_with_the_first(
    app, client, github, origin: Path, worker
) -> None:
    commit_to_origin(origin, {".github/gaffer.yml": CONFIG}, "configure gaffer")
    flow = IssueFlow(app, client, github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET)
    first = dataclasses.replace(flow, number=1, body=writes("first")).open()
    second = dataclasses.replace(flow, number=2, body=writes("second")).open()
    for issue in (first, second):
        issue.label()
        issue.wait_state(PlanState.DRAFT)
    first.comment("/approve")
    first_plan = first.wait_state(PlanState.IN_REVIEW)
    second.comment("/approve")
    second_plan = second.wait_state(PlanState.IN_REVIEW)

    runs = {(run["name"], run["head_sha"]): run for run in flow.check_runs()}
    diff = runs[("gaffer/diff", second_plan.head_sha)]
    assert diff["conclusion"] == "neutral"
    assert f"conflicts with plan #{first_plan.id} ({REPO}#1)" in diff["output"]["title"]
    assert "widgets.py" in diff["output"]["summary"]
    # The first plan met nothing in flight when it was checked, nor does `main` conflict.
    assert runs[("gaffer/diff", first_plan.head_sha)]["conclusion"] == "success"
