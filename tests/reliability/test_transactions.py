"""No call to GitHub while a database transaction is open, in handlers or tasks.

A transaction held across a network round trip holds its locks that long (on SQLite, the
one write lock every worker and the web front wait for). The test counts the transactions
open in this thread from SQLAlchemy's own events and has the GitHub double note every
request that arrives while one is open; the whole lifecycle must make none.
"""

from __future__ import annotations

from bot.models import PlanState
from double.webhooks import check_run_rerequested
from tests.conftest import INSTALLATION_ID
from tests.in_process import InProcess
from tests.reliability.conftest import send_comment
from tests.support import deliver


def test_no_github_call_is_made_inside_a_transaction_from_label_to_pull_request(
    in_transactions: list[str], here: InProcess
) -> None:
    here.flow.label()
    assert here.settle().state == PlanState.DRAFT
    send_comment(here, "/approve r9")  # refused: the reply, too, waits for the commit
    send_comment(here, "/status")
    plan = here.comment("/approve")
    assert plan.state == PlanState.IN_REVIEW, plan.last_error
    [tests] = [run for run in here.flow.check_runs() if run["name"] == "gaffer/tests"]
    rerun = check_run_rerequested(
        here.flow.repo, tests, login="maintainer", installation_id=INSTALLATION_ID
    )
    assert deliver(here.flow.client, "check_run", rerun).status_code == 202
    plan = here.comment(f"/approve-diff {plan.head_sha}")
    assert plan.state == PlanState.PR_OPEN, plan.last_error
    assert in_transactions == [], "\n".join(in_transactions)
