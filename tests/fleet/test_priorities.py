"""An issue's `gaffer: pN` label, or its repository's `priority`, sets its plan's place in
line under a concurrency limit (the line itself: tests/unit/test_slots.py)."""

from __future__ import annotations

from pathlib import Path

from double.origin import commit_to_origin
from tests.in_process import CONFIG, InProcess, process_stored, settle, the_plan


def test_a_priority_label_sets_the_plans_priority_and_taking_it_off_restores_the_repos(
    here: InProcess, origin: Path, github_http
) -> None:
    commit_to_origin(origin, {".github/gaffer.yml": CONFIG + "priority: 1\n"}, "urgent repo")
    here.flow.label("gaffer: p0")  # before the trigger label: no plan, nothing said
    process_stored(here.wctx)
    assert here.flow.plan() is None
    assert here.flow.comments() == []

    here.flow.label()
    settle(here.wctx)  # the plan is drafted, and its state shown by a label
    assert the_plan(here.wctx).priority == 0
    assert here.flow.labels() == ["gaffer: p0", "gaffer", "gaffer: draft"]

    here.flow.unlabel("gaffer: p0")
    process_stored(here.wctx)
    assert the_plan(here.wctx).priority == 1  # the repository's own

    here.flow.label("gaffer: P3")
    process_stored(here.wctx)
    assert the_plan(here.wctx).priority == 3


def test_without_a_label_a_plan_takes_the_repositorys_priority(here: InProcess) -> None:
    here.flow.label()
    process_stored(here.wctx)
    assert the_plan(here.wctx).priority == 2  # gaffer's default
