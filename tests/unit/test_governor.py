"""The quota governor's rules, on the database every worker shares."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from bot.db import Database
from bot.models import ProviderHold, utcnow
from tasks.agents.definitions import AgentSpec
from tasks.stages.governor import account_of, admit, answered, limit_met

ACCOUNT = "ANTHROPIC_API_KEY:0123456789ab"


@pytest.fixture
def db(settings):
    database = Database(settings.database_url)
    yield database
    database.dispose()


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


def test_no_hold_admits_every_job(db: Database) -> None:
    assert admit(db, ACCOUNT, 1) is None and admit(db, ACCOUNT, 2) is None


def test_a_met_limit_holds_every_job_of_the_account_until_its_reset(db: Database) -> None:
    reset = utcnow() + timedelta(minutes=5)
    limit_met(db, ACCOUNT, 1, reset, "usage limit")
    wait = admit(db, ACCOUNT, 2)
    assert wait is not None and wait.until == reset and wait.tell
    assert "usage limit" in wait.reason and "job 1" in wait.reason
    assert admit(db, "OPENAI_API_KEY:fedcba987654", 3) is None  # other accounts go on


def test_the_latest_reset_heard_wins(db: Database) -> None:
    later = utcnow() + timedelta(minutes=9)
    limit_met(db, ACCOUNT, 1, later, "first")
    limit_met(db, ACCOUNT, 2, later - timedelta(minutes=5), "second")
    wait = admit(db, ACCOUNT, 3)
    assert wait is not None and wait.until == later


def test_after_the_reset_one_job_probes_and_the_rest_wait_quietly(db: Database) -> None:
    limit_met(db, ACCOUNT, 1, utcnow() - timedelta(seconds=1), "usage limit")
    assert admit(db, ACCOUNT, 2) is None  # the probe
    wait = admit(db, ACCOUNT, 3)
    assert wait is not None and not wait.tell and "job 2" in wait.reason
    assert admit(db, ACCOUNT, 2) is None  # the probe itself, once more (a resent task)


def test_a_probe_silent_too_long_is_replaced(db: Database) -> None:
    limit_met(db, ACCOUNT, 1, utcnow() - timedelta(seconds=1), "usage limit")
    assert admit(db, ACCOUNT, 2) is None
    with db.session() as session:
        stale = utcnow() - timedelta(seconds=1)
        session.execute(update(ProviderHold).values(probe_until=stale))
    assert admit(db, ACCOUNT, 3) is None


def test_an_answer_clears_the_hold(db: Database) -> None:
    limit_met(db, ACCOUNT, 1, utcnow() + timedelta(minutes=5), "usage limit")
    answered(db, ACCOUNT)
    assert admit(db, ACCOUNT, 2) is None
