"""What agents cost, where the dollars came from, and budgets that stop work."""

from __future__ import annotations

from decimal import Decimal

import pytest
from sqlalchemy import select

from bot.models import Job, PlanState, aware
from double.origin import commit_to_origin
from tests.in_process import CONFIG, InProcess


def configure(here: InProcess, extra: str) -> None:
    commit_to_origin(here.flow.origin, {".github/gaffer.yml": CONFIG + extra}, "configure agents")


def jobs(here: InProcess) -> list[Job]:
    with here.wctx.db.session() as session:  # type: ignore[attr-defined]
        return list(session.scalars(select(Job).order_by(Job.id)))


@pytest.mark.parametrize(
    ("agent", "model", "source"),
    [
        pytest.param("claude-like", "", "agent", id="a Claude result reports its own dollars"),
        pytest.param(
            "codex-like",
            "model: gpt-4o\n",
            "computed",
            id="Codex tokens without dollars are priced from the table",
        ),
    ],
)
def test_the_plan_comment_and_cost_show_dollars_with_their_source(
    here: InProcess, agent, model, source
) -> None:
    configure(here, f"agent: {agent}\n{model}")
    here.flow.label()
    plan = here.settle()
    assert plan.state == PlanState.DRAFT, plan.last_error
    [job] = jobs(here)
    assert job.cost_source == source and job.cost_usd > 0
    if agent == "claude-like":
        assert job.cost_usd == Decimal("0.1234")
        assert (job.input_tokens, job.output_tokens, job.cache_read_tokens) == (1200, 300, 5000)
    else:  # Codex counts cached tokens inside its input: gaffer separates them
        assert (job.input_tokens, job.cache_read_tokens, job.output_tokens) == (
            60_000,
            40_000,
            2_000,
        )
    assert f"${job.cost_usd:.4f} ({source})" in here.flow.status()
    here.comment("/cost", login="stranger")
    reply = here.flow.comments()[-1]["body"]
    assert f"{job.cost_usd:.4f}" in reply and source in reply


def test_an_agent_streaming_past_its_budget_is_stopped_and_the_issue_says_so(
    here: InProcess,
) -> None:
    configure(here, "agent: streaming-claude\nbudget: {plan_usd: 2}\n")
    here.flow.label()
    plan = here.settle()
    assert plan.state == PlanState.FAILED
    assert "budget of $2" in here.flow.status() and "/budget <usd>" in here.flow.status()
    [job] = jobs(here)
    assert Decimal(2) <= job.cost_usd < Decimal(4)  # stopped within a message or two of it


def test_the_budget_is_stated_on_the_plan_before_approval(here: InProcess) -> None:
    configure(here, "agent: claude-like\nbudget: {plan_usd: 5}\n")
    here.flow.label()
    here.settle()
    assert "**budget:** $5" in here.flow.status()
    here.comment("/budget 12.50")
    assert "**budget:** $12.50" in here.flow.status()


def test_the_daily_budget_holds_the_next_plan_in_the_queue(here: InProcess) -> None:
    configure(here, "agent: claude-like\nbudget: {daily_usd: 0.1}\n")
    here.flow.label()
    first = here.settle()
    assert first.state == PlanState.DRAFT  # the first plan spent $0.1234
    second = here.flow.__class__(**{**here.flow.__dict__, "number": 2, "title": "Another"}).open()
    second.label()
    here.settle()
    [_, held] = jobs(here)
    assert held.state == "queued" and held.parked_until is not None
    assert any("daily budget" in c["body"] for c in second.comments())


def test_an_unknown_agent_gets_the_list_of_configured_ones(here: InProcess) -> None:
    configure(here, "agent: claude-like\n")
    here.flow.label()
    here.settle()
    here.comment("/agent nonesuch")
    reply = here.flow.replies()[-1]
    assert "There is no agent `nonesuch`" in reply and "`claude-like`" in reply
    here.comment("/agent codex-like gpt-4o")
    assert here.flow.plan().agent == "codex-like"


def test_choosing_an_agent_once_the_work_is_done_names_the_states_it_applies_in(
    here: InProcess,
) -> None:
    here.to_review()
    here.comment("/agent claude")
    assert here.flow.replies()[-1].endswith(
        "`/agent` applies when the plan is `planning` or `draft` or `approved`; it is `in_review`."
    )
    assert here.flow.plan().agent == "script"  # the one that did the work


def test_an_agent_stopped_by_its_quota_is_parked_not_failed(here: InProcess) -> None:
    configure(here, "agent: quota-hit\n")
    here.flow.label()
    plan = here.settle()
    assert plan.state == PlanState.PLANNING  # waiting, not failed
    [job] = jobs(here)
    assert job.state == "queued" and job.parked_until is not None
    # The wait is counted, for the dashboard's lead times (parked, not waiting for people).
    assert job.parked_s == pytest.approx(
        (aware(job.parked_until) - aware(job.started_at)).total_seconds(), abs=30
    )
    assert job.parked_s > 0
    assert any("provider's limit" in c["body"] for c in here.flow.comments())
