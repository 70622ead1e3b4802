"""The REST API and the operator's CLI, on a plan that went to review: what they show, that
they agree, and that the API answers only a token."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from decimal import Decimal

import jsonschema
import pytest
from sqlalchemy import update

from bot.api import DESCRIPTION
from bot.models import Job
from tests.conftest import REPO
from tests.in_process import InProcess

TOKEN = "t0ken-for-the-api-tests-0001"
SPEC = json.loads(DESCRIPTION.read_text())


@pytest.fixture
def api(make_app, settings):
    """A web app with the API on for TOKEN, on this test's database."""
    return make_app(dataclasses.replace(settings, api_tokens=(TOKEN,))).test_client()


def get(api, path: str, schema: str | None = None, **query: str):
    answer = api.get(
        f"/api/v1{path}", query_string=query, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    if schema is not None:
        assert answer.status_code == 200, answer.get_json()
        jsonschema.validate(answer.get_json(), {"$ref": f"#/components/schemas/{schema}", **SPEC})
    return answer


def gaffer(settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **{key: value for key, value in os.environ.items() if key != "WEBHOOK_SECRET"},
        "DATABASE_URL": settings.database_url,
        "GAFFER_HOME": str(settings.home),
    }
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_api_and_the_cli_show_a_plan_its_jobs_logs_and_costs(
    here: InProcess, api, app, settings
) -> None:
    plan = here.to_review()
    with app.extensions["gaffer_db"].session() as session:
        session.execute(update(Job).where(Job.stage == "execute").values(cost_usd=Decimal("0.5")))

    listed = get(api, "/plans", repo=REPO.upper(), state="in_review").get_json()["plans"]
    jsonschema.validate(
        {"plans": listed},
        SPEC["paths"]["/plans"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        | {"components": SPEC["components"]},
    )
    assert [(p["id"], p["issue"], p["state"], p["cost_usd"]) for p in listed] == [
        (plan.id, 1, "in_review", "0.5000")
    ]
    assert get(api, "/plans", state="merged").get_json() == {"plans": []}
    assert get(api, "/plans", state="nonsense").status_code == 404

    detail = get(api, f"/plans/{plan.id}", "PlanDetail").get_json()
    assert [e["to_state"] for e in detail["timeline"]] == [
        "draft",
        "approved",
        "executing",
        "verifying",
        "in_review",
    ]
    assert [(a["kind"], a["approver"]) for a in detail["approvals"]] == [("plan", "maintainer")]
    assert [j["stage"] for j in detail["jobs"]] == ["plan", "execute"]
    assert ("tests", "success") in [(c["name"], c["conclusion"]) for c in detail["checks"]]
    execute = detail["jobs"][1]
    assert get(api, f"/jobs/{execute['id']}", "Job").get_json() == execute
    log = get(api, f"/jobs/{execute['id']}/log")
    assert log.mimetype == "text/plain" and "==> check-tests.log <==" in log.get_data(as_text=True)
    assert get(api, "/jobs/99999").status_code == 404

    costs = get(api, "/costs", "Costs").get_json()
    assert costs["by_repository"] == {REPO: "0.5000"} and costs["by_stage"]["execute"] == "0.5000"
    assert get(api, "/costs", since="yesterday").status_code == 400

    # The CLI reads the same database and says the same.
    cli_costs = gaffer(settings, "cost", "--json")
    assert cli_costs.returncode == 0, cli_costs.stderr
    assert json.loads(cli_costs.stdout) == costs
    assert json.loads(gaffer(settings, "plans", "--json").stdout) == {
        "plans": get(api, "/plans").get_json()["plans"]
    }
    assert json.loads(gaffer(settings, "show", f"{REPO}#1", "--json").stdout) == detail
    shown = gaffer(settings, "show", f"{REPO}#1").stdout
    assert f"plan {plan.id}: in_review, revision r1" in shown
    logs = gaffer(settings, "logs", str(execute["id"]))
    assert logs.returncode == 0 and "==> check-tests.log <==" in logs.stdout
    missing = gaffer(settings, "show", f"{REPO}#9")
    assert (missing.returncode, missing.stderr) == (1, f"gaffer: gaffer has no plan for {REPO}#9\n")


def test_the_api_answers_only_a_valid_token(api, make_app, settings) -> None:
    assert api.get("/api/v1/plans").status_code == 401
    wrong = api.get(
        "/api/v1/plans", headers={"Authorization": "Bearer t0ken-for-the-api-tests-0002"}
    )
    assert wrong.status_code == 401
    assert wrong.get_json() == {"message": "a valid `Authorization: Bearer <token>` is required"}
    off = (
        make_app(settings)
        .test_client()
        .get("/api/v1/plans", headers={"Authorization": f"Bearer {TOKEN}"})
    )
    assert (off.status_code, off.get_json()["message"]) == (
        401,
        "the API is off: set GAFFER_API_TOKENS to turn it on",
    )
    described = api.get("/api/v1/openapi.json")  # the description needs no token
    assert described.status_code == 200 and described.get_json()["openapi"] == "3.1.0"
    assert set(described.get_json()["paths"]) == {
        "/plans",
        "/plans/{plan_id}",
        "/jobs/{job_id}",
        "/jobs/{job_id}/log",
        "/costs",
    }
