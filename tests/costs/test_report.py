"""`gaffer cost`: totals by repository, stage and day, and the cost per merged PR with waste."""

from __future__ import annotations

from decimal import Decimal

from bot.cost_report import cost_report, cost_totals
from bot.models import Job, Plan, PlanState, Repository


def _plan(session, number: int, state: PlanState, *costs: tuple[str, str]) -> None:
    plan = Plan(
        repository_id=1,
        installation_id=1,
        issue_number=number,
        issue_title="t",
        issue_author="a",
        clone_url="/x",
        state=state,
    )
    session.add(plan)
    session.flush()
    for index, (stage, usd) in enumerate(costs):
        session.add(
            Job(
                plan_id=plan.id,
                stage=stage,
                key=f"{stage}:{index}",
                cost_usd=Decimal(usd),
                cost_source="agent",
            )
        )


def test_cost_report_totals_and_cost_per_merged_pr(app) -> None:
    with app.extensions["gaffer_db"].session() as session:
        session.add(Repository(id=1, full_name="acme/widgets"))
        _plan(session, 1, PlanState.MERGED, ("plan", "0.50"), ("execute", "1.50"))
        _plan(session, 2, PlanState.REJECTED, ("plan", "1.00"))
        _plan(session, 3, PlanState.DRAFT, ("plan", "0.25"))
    with app.extensions["gaffer_db"].session() as session:
        report = cost_report(cost_totals(session))
    assert "acme/widgets" in report and "$      3.2500" in report
    assert "execute" in report and "$      1.5000" in report
    assert "merged PRs: 1" in report
    assert "waste on plans that ended unmerged: $1.0000" in report
    assert "cost per merged PR, waste included: $3.0000" in report
