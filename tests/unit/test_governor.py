"""The quota governor's rules, on the database every worker shares."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import update

from bot.db import Database
from bot.models import Job, JobState, ProviderHold, aware, utcnow
from tasks.agents.definitions import AgentSpec, SpendMeter
from tasks.stages.governor import (
    PROBE_TRUST,
    WAIT_FOR_PROBE,
    account_of,
    admit,
    answered,
    let_go,
    limit_met,
    probe_key,
)

ACCOUNT = "ANTHROPIC_API_KEY:0123456789ab"
# What Claude Code prints: a refused run bills no tokens, an answer does.
REFUSED = {"type": "result", "is_error": True, "result": "Claude AI usage limit reached|1"}
ANSWER = {
    "type": "assistant",
    "message": {"id": "m1", "model": "claude-sonnet-4-5", "usage": {"input_tokens": 900}},
}


def park(db: Database, job_id: int) -> None:
    """Put the job back in the queue for a probe's wait, as the stage does."""
    with db.session() as session:
        job = session.get_one(Job, job_id)
        job.state, job.parked_until = JobState.QUEUED, utcnow() + WAIT_FOR_PROBE
        job.parked_s += WAIT_FOR_PROBE.total_seconds()


def job(db: Database, job_id: int) -> Job:
    with db.session() as session:
        return session.get_one(Job, job_id)


def lapse(db: Database, job_id: int) -> None:
    """The job's worker died: its lease runs out."""
    with db.session() as session:
        lapsed = utcnow() - timedelta(seconds=1)
        session.execute(update(Job).where(Job.id == job_id).values(lease_expires_at=lapsed))


@pytest.mark.parametrize(
    ("env_names", "env", "account"),
    [
        pytest.param(
            ("ANTHROPIC_API_KEY",),
            {"ANTHROPIC_API_KEY": "sk-one"},
            "ANTHROPIC_API_KEY:",
            id="the key's name and a digest of it",
        ),
        pytest.param(("OPENAI_API_KEY",), {}, "agent:a", id="no key given: the agent itself"),
        pytest.param(("HOME",), {"HOME": "/root"}, "agent:a", id="a name that is not a key"),
    ],
)
def test_an_agents_account_is_its_key(env_names, env, account) -> None:
    spec = AgentSpec(name="a", command=("a",), output="text", env=env_names)
    found = account_of(spec, env)
    assert found.startswith(account)
    assert "sk-one" not in found


def test_agents_sharing_a_key_share_an_account_and_other_keys_do_not() -> None:
    def spec(name: str) -> AgentSpec:
        return AgentSpec(name=name, command=("x",), output="text", env=("ANTHROPIC_API_KEY",))

    one, other = {"ANTHROPIC_API_KEY": "sk-one"}, {"ANTHROPIC_API_KEY": "sk-two"}
    assert account_of(spec("claude"), one) == account_of(spec("claude-fast"), one)
    assert account_of(spec("claude"), one) != account_of(spec("claude"), other)


def test_a_warm_account_admits_every_job(db: Database, jobs) -> None:
    answered(db, ACCOUNT)
    assert all(admit(db, ACCOUNT, job_id) is None for job_id in jobs)


def test_a_cold_account_sends_one_job_first_and_the_rest_wait_quietly(db: Database, jobs) -> None:
    first, second, third, _ = jobs
    assert admit(db, ACCOUNT, first) is None  # the probe
    for waiter in (second, third):
        wait = admit(db, ACCOUNT, waiter)
        assert wait is not None and not wait.tell
        assert f"job {first} is finding whether the provider answers" in wait.reason
        assert job(db, waiter).waiting_on == probe_key(ACCOUNT)
    assert admit(db, ACCOUNT, first) is None  # the probe itself, once more (a resent task)
    assert admit(db, "OPENAI_API_KEY:fedcba987654", third) is None  # its own account's probe


def test_the_probes_answer_mid_run_wakes_the_jobs_waiting_for_it(db: Database, jobs) -> None:
    first, second, third, _ = jobs
    admit(db, ACCOUNT, first)
    admit(db, ACCOUNT, second)
    park(db, second)
    woken: list[int] = []
    refused = SpendMeter(None, None, None, lambda: woken.extend(answered(db, ACCOUNT)))
    refused.feed(json.dumps(REFUSED))
    assert woken == []  # a refusal is no answer
    meter = SpendMeter(None, None, None, lambda: woken.extend(answered(db, ACCOUNT)))
    meter.feed(json.dumps(ANSWER))
    meter.feed(json.dumps(ANSWER))
    assert woken == [second]  # once, at the first answer, while the probe still runs
    waiter = job(db, second)
    assert waiter.parked_until is not None and aware(waiter.parked_until) <= utcnow()
    assert waiter.parked_s < WAIT_FOR_PROBE.total_seconds()  # only the time it waited
    assert admit(db, ACCOUNT, second) is None and admit(db, ACCOUNT, third) is None
    assert job(db, second).waiting_on is None


def test_a_probe_running_unrefused_for_a_while_lets_the_others_go(db: Database, jobs) -> None:
    first, second, *_ = jobs
    admit(db, ACCOUNT, first)
    assert admit(db, ACCOUNT, second) is not None
    with db.session() as session:
        began = utcnow() - PROBE_TRUST - timedelta(seconds=1)
        session.execute(update(ProviderHold).values(probe_since=began))
    assert admit(db, ACCOUNT, second) is None


def test_a_refused_probe_holds_every_job_until_the_reset(db: Database, jobs) -> None:
    first, second, *_ = jobs
    admit(db, ACCOUNT, first)
    reset = utcnow() + timedelta(minutes=5)
    limit_met(db, ACCOUNT, first, reset, "usage limit")
    wait = admit(db, ACCOUNT, second)
    assert wait is not None and wait.until == reset and wait.tell


def test_a_probe_whose_worker_died_is_replaced(db: Database, jobs) -> None:
    first, second, *_ = jobs
    admit(db, ACCOUNT, first)
    assert admit(db, ACCOUNT, second) is not None
    lapse(db, first)
    assert admit(db, ACCOUNT, second) is None


def test_a_met_limit_holds_every_job_of_the_account_until_its_reset(db: Database, jobs) -> None:
    first, second, third, _ = jobs
    reset = utcnow() + timedelta(minutes=5)
    limit_met(db, ACCOUNT, first, reset, "usage limit")
    wait = admit(db, ACCOUNT, second)
    assert wait is not None and wait.until == reset and wait.tell
    assert "usage limit" in wait.reason and f"job {first}" in wait.reason
    assert job(db, second).waiting_on is None  # it resumes at the reset, not at an answer
    answered(db, "OPENAI_API_KEY:fedcba987654")
    assert admit(db, "OPENAI_API_KEY:fedcba987654", third) is None  # other accounts go on


def test_the_latest_reset_heard_wins(db: Database, jobs) -> None:
    first, second, third, _ = jobs
    later = utcnow() + timedelta(minutes=9)
    limit_met(db, ACCOUNT, first, later, "first")
    limit_met(db, ACCOUNT, second, later - timedelta(minutes=5), "second")
    wait = admit(db, ACCOUNT, third)
    assert wait is not None and wait.until == later


def test_after_the_reset_one_job_probes_and_the_rest_wait_quietly(db: Database, jobs) -> None:
    first, second, third, _ = jobs
    answered(db, ACCOUNT)  # a warm account: the limit, not the cold, makes the probe
    limit_met(db, ACCOUNT, first, utcnow() - timedelta(seconds=1), "usage limit")
    assert admit(db, ACCOUNT, second) is None  # the probe
    wait = admit(db, ACCOUNT, third)
    assert wait is not None and not wait.tell and f"job {second}" in wait.reason
    assert "limit has reset" in wait.reason
    assert admit(db, ACCOUNT, second) is None  # the probe itself, once more (a resent task)


def test_a_probe_silent_too_long_is_replaced(db: Database, jobs) -> None:
    first, second, *_ = jobs
    assert admit(db, ACCOUNT, first) is None
    with db.session() as session:
        stale = utcnow() - timedelta(seconds=1)
        session.execute(update(ProviderHold).values(probe_until=stale))
    assert admit(db, ACCOUNT, second) is None


def test_a_probe_that_never_ran_hands_its_turn_on(db: Database, jobs) -> None:
    first, second, *_ = jobs
    admit(db, ACCOUNT, first)
    admit(db, ACCOUNT, second)
    park(db, second)
    assert let_go(db, ACCOUNT, first) == [second]
    with db.session() as session:  # the worker takes it up
        session.execute(update(Job).where(Job.id == second).values(state=JobState.RUNNING))
    assert admit(db, ACCOUNT, second) is None  # the new probe
    assert admit(db, ACCOUNT, first) is not None


def test_an_answer_clears_the_hold(db: Database, jobs) -> None:
    first, second, *_ = jobs
    limit_met(db, ACCOUNT, first, utcnow() + timedelta(minutes=5), "usage limit")
    answered(db, ACCOUNT)
    assert admit(db, ACCOUNT, second) is None
