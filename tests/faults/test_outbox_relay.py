"""The outbox's relay with real processes: deliveries stored while the broker is down are
handed on by the github worker's relay once it is back, and each is processed once."""

from __future__ import annotations

import dataclasses

from sqlalchemy import select

from bot.github import STATUS_MARKER
from bot.models import Delivery, Plan, PlanState
from double.driver import IssueFlow
from tests.faults.conftest import BrokerOutage, StartWorker
from tests.support import wait_for


def test_deliveries_stored_while_the_broker_is_down_are_relayed_by_the_worker_once_it_is_back(
    flow: IssueFlow, make_app, settings, broker_outage: BrokerOutage, start_worker: StartWorker
) -> None:
    app = make_app(dataclasses.replace(settings, broker_url=broker_outage.url))
    issues = [
        dataclasses.replace(flow, app=app, client=app.test_client(), number=n) for n in (1, 2)
    ]
    broker_outage.stop()
    for each in issues:
        each.open().label()  # asserts 202: answered, with the broker down
    with app.extensions["gaffer_db"].session() as session:
        assert all(row.enqueued_at is None for row in session.scalars(select(Delivery)))

    broker_outage.start()
    # No reconciler runs here: the github worker's relay finds the stored deliveries.
    start_worker("github", broker_url=broker_outage.url, concurrency=3)
    start_worker("agent", broker_url=broker_outage.url)

    def all_drafted() -> list[Plan] | None:
        with app.extensions["gaffer_db"].session() as session:
            plans = session.scalars(select(Plan).where(Plan.state == PlanState.DRAFT)).all()
        return list(plans) if len(plans) == len(issues) else None

    plans = wait_for(all_drafted, timeout=60, what="a draft plan on every issue")
    assert sorted(plan.issue_number for plan in plans) == [1, 2]
    statuses = [[c for c in each.comments() if STATUS_MARKER in c["body"]] for each in issues]
    assert [len(each) for each in statuses] == [1, 1]
    with app.extensions["gaffer_db"].session() as session:
        rows = session.scalars(select(Delivery)).all()
    assert all(row.processed_at is not None and row.enqueued_at is not None for row in rows)
