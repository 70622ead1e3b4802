"""One quota governor per provider account, shared by every worker through the database.

The first run that meets its provider's limit holds the account until the reset the
provider named; a job of that account about to start meanwhile parks until then instead of
spending a run on a refusal. When the time comes one job goes first, the probe, and the
rest wait for its answer: a limit that outlasts its promised reset costs one run, not one
per waiting job. Any run that gets an answer clears the hold.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, or_, update

from bot.db import Database, insert_missing, rows_changed
from bot.models import ProviderHold, aware, utcnow
from tasks.agents.definitions import AgentSpec

# The others wait this long for the probe, then look again; a probe silent for longer than
# PROBE_GRACE (its worker died) is replaced by whoever looks next.
WAIT_FOR_PROBE = timedelta(seconds=5)
PROBE_GRACE = timedelta(minutes=15)
KEY_SUFFIXES = ("_API_KEY", "_KEY", "_TOKEN")


@dataclass(frozen=True)
class Wait:
    """The job may not run its agent yet: until when, why, and whether to say so on the issue."""

    until: datetime
    reason: str
    tell: bool = True


def account_of(spec: AgentSpec, env: Mapping[str, str]) -> str:
    """The provider account an agent's runs count against: the env name of the key it is
    given and a digest of the key, so agents sharing a key share its limit."""
    for name in spec.env:
        if name.endswith(KEY_SUFFIXES) and env.get(name):
            return f"{name}:{hashlib.sha256(env[name].encode()).hexdigest()[:12]}"
    return f"agent:{spec.name}"


def admit(db: Database, account: str, job_id: int) -> Wait | None:
    """None when the job may run its agent now; otherwise how long it waits, and why."""
    now = utcnow()
    with db.session() as session:
        hold = session.get(ProviderHold, account)
        if hold is None:
            return None
        if aware(hold.until) > now:
            return Wait(
                aware(hold.until),
                f"its provider account is at its limit ({hold.reason}, met by job "
                f"{hold.job_id}); no agent of that account starts before "
                f"{aware(hold.until):%Y-%m-%d %H:%M:%S} UTC",
            )
        probing = update(ProviderHold).where(
            ProviderHold.account == account,
            or_(
                ProviderHold.probe_job_id.is_(None),
                ProviderHold.probe_job_id == job_id,
                ProviderHold.probe_until < now,
            ),
        )
        claimed = probing.values(probe_job_id=job_id, probe_until=now + PROBE_GRACE)
        # The claim is decided by the database, not by the row already read into the session.
        claimed = claimed.execution_options(synchronize_session=False)
        if rows_changed(session, claimed) == 1:
            return None  # this job is the probe
        return Wait(
            now + WAIT_FOR_PROBE,
            f"job {hold.probe_job_id} is finding whether the provider's limit has reset",
            tell=False,
        )


def limit_met(db: Database, account: str, job_id: int, until: datetime, reason: str) -> None:
    """Hold the account until the provider's reset (the latest heard, when runs disagree)."""
    now = utcnow()
    with db.session() as session:
        insert_missing(
            session, ProviderHold, account=account, until=until, reason=reason, updated_at=now
        )
        hold = session.get_one(ProviderHold, account, with_for_update=True)
        if hold.job_id is None or aware(hold.until) <= until:
            hold.until, hold.reason, hold.job_id = until, reason[:500], job_id
        hold.probe_job_id, hold.probe_until, hold.updated_at = None, None, now


def answered(db: Database, account: str) -> None:
    """The provider answered a run: the account is not at its limit."""
    with db.session() as session:
        session.execute(delete(ProviderHold).where(ProviderHold.account == account))
