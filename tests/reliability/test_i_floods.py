"""I. Floods are cheap: a stream of commands gaffer will not act on costs a reaction each."""

from __future__ import annotations

from typing import Any

import pytest

from bot.models import PlanState
from bot.refusals import QUIET_REACTION, REPLIES_PER_WINDOW
from tests.in_process import InProcess
from tests.reliability.conftest import seen, send_comment

FLOOD = 200
# What the whole flood may cost besides one reaction per comment: the repository, the
# default branch's head, the config file, the user's permission, the limited replies (an
# issue and a comment each) and a token.
LOOK_UPS_AND_REPLIES = 20


def gaffers_comments(here: InProcess) -> list[dict[str, Any]]:
    github = here.flow.github
    return [c for c in here.flow.comments() if c["user"]["login"] == github.bot_login]


FLOODS = [
    pytest.param(
        "/approve",
        QUIET_REACTION,
        id="200 /approve by a non-writer get three refusals, then one reaction each",
    ),
    pytest.param(
        "/help",
        "eyes",
        id="200 /help by a non-writer get three answers, then one reaction each",
    ),
]


@pytest.mark.parametrize(("body", "answered_with"), FLOODS)
def test_a_flood_from_one_user_on_one_issue_gets_three_replies_and_costs_a_reaction_each(
    drafted: InProcess, body: str, answered_with: str
) -> None:
    github = drafted.flow.github
    comments_before, requests_before = len(gaffers_comments(drafted)), len(github.requests)

    flood = [send_comment(drafted, body, login="stranger") for _ in range(FLOOD)]

    assert len(gaffers_comments(drafted)) - comments_before == REPLIES_PER_WINDOW
    calls = len(github.requests) - requests_before
    assert calls <= LOOK_UPS_AND_REPLIES + FLOOD, f"{calls} GitHub calls for {FLOOD} comments"
    reactions = [seen(drafted, payload).reactions for payload in flood]
    answered = [] if answered_with == QUIET_REACTION else [answered_with]
    assert reactions[:REPLIES_PER_WINDOW] == [answered] * REPLIES_PER_WINDOW
    assert reactions[REPLIES_PER_WINDOW:] == [[QUIET_REACTION]] * (FLOOD - REPLIES_PER_WINDOW)
    after = seen(drafted)
    assert (after.state, after.approvals) == (PlanState.DRAFT, [])


def test_a_writers_approve_after_a_flood_is_acted_on(drafted: InProcess) -> None:
    for _ in range(20):
        send_comment(drafted, "/approve", login="stranger")
    payload = send_comment(drafted, "/approve", login="maintainer")
    after = seen(drafted, payload)
    assert (after.state, after.reactions) == (PlanState.APPROVED, ["eyes"])
    assert after.approvals == [("plan", 1, None, "maintainer")]


def test_the_limit_is_per_user_another_non_writer_still_gets_a_refusal(
    drafted: InProcess,
) -> None:
    for _ in range(REPLIES_PER_WINDOW + 2):
        send_comment(drafted, "/approve", login="stranger")
    payload = send_comment(drafted, "/approve", login="reader")
    after = seen(drafted, payload)
    assert after.reactions == []
    assert after.replies[-1].startswith("> /approve") and "@reader" in after.replies[-1]
