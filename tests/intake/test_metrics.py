"""`/metrics` counts what a plan went through, from the database gaffer keeps."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from bot.models import Job, JobState, utcnow
from tests.conftest import REPO
from tests.in_process import InProcess


def scrape(client) -> dict[tuple[str, frozenset], float]:
    """Every sample /metrics shows, by name and labels."""
    answer = client.get("/metrics")
    assert answer.status_code == 200
    assert answer.mimetype == "text/plain"
    families = text_string_to_metric_families(answer.get_data(as_text=True))
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in families
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def test_metrics_count_what_the_plan_went_through(here: InProcess, client, app) -> None:
    plan = here.to_review()
    here.comment("/status", login="reader")
    here.comment("/approve", login="reader")
    db = app.extensions["gaffer_db"]
    with db.session() as session:  # what the agents cost, as their runs would have said
        session.execute(update(Job).where(Job.stage == "plan").values(cost_usd=Decimal("0.25")))
        session.execute(
            update(Job)
            .where(Job.stage == "execute")
            .values(cost_usd=Decimal("0.5"), output_tokens=700)
        )
    samples = scrape(client)

    assert (
        value(
            samples, "gaffer_deliveries_total", source="github", event="issues", outcome="processed"
        )
        == 1
    )
    assert (
        value(
            samples,
            "gaffer_deliveries_total",
            source="github",
            event="issue_comment",
            outcome="processed",
        )
        == 3
    )
    assert value(samples, "gaffer_commands_total", command="approve", outcome="done") == 1
    assert value(samples, "gaffer_commands_total", command="approve", outcome="refused") == 1
    assert value(samples, "gaffer_commands_total", command="status", outcome="answered") == 1
    assert (
        value(samples, "gaffer_plan_transitions_total", from_state="draft", to_state="approved")
        == 1
    )
    assert (
        value(
            samples, "gaffer_plan_transitions_total", from_state="verifying", to_state="in_review"
        )
        == 1
    )
    assert value(samples, "gaffer_plans", state="in_review") == 1
    agent = plan.agent or "script"
    for stage in ("plan", "execute"):
        assert value(samples, "gaffer_job_duration_seconds_count", stage=stage, agent=agent) == 1
        assert value(samples, "gaffer_job_duration_seconds_sum", stage=stage, agent=agent) > 0
    assert value(samples, "gaffer_check_runs_total", check="tests", conclusion="success") == 1
    assert value(samples, "gaffer_agent_cost_usd_total", repository=REPO, agent=agent) == 0.75
    assert (
        value(samples, "gaffer_agent_tokens_total", repository=REPO, agent=agent, kind="output")
        == 700
    )
    assert value(samples, "gaffer_jobs_parked") == 0
    assert value(samples, "gaffer_queue_depth", stage="execute") is None

    # A job waiting for a provider's quota is parked, not queued.
    with db.session() as session:
        session.execute(
            update(Job)
            .where(Job.stage == "execute")
            .values(state=JobState.QUEUED, parked_until=utcnow() + timedelta(minutes=5))
        )
    samples = scrape(client)
    assert value(samples, "gaffer_jobs_parked") == 1
    assert value(samples, "gaffer_queue_depth", stage="execute") is None
