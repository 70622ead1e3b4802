"""C. Commands: what counts as a command on an issue, and what is refused with a reply.

Every case goes from the webhook to the issue thread: the plan's state, the replies, the
👀 reaction and the approvals recorded. The parser's own tables, with many more spellings,
are in tests/unit/test_commands.py (including 1 MB comments parsed in linear time).
"""

from __future__ import annotations

import json

import pytest

from bot.models import PlanState
from tests.conftest import INSTALLATION_ID
from tests.in_process import InProcess
from tests.reliability.conftest import handle, human_comment, post_raw, seen, send_comment, stored
from tests.support import labeled, sign

APPROVED = ("plan", 1, None, "maintainer")

RECOGNISED = [
    pytest.param("/approve", id="approve alone on a line is recognised"),
    pytest.param("/APPROVE", id="approve in upper case is recognised"),
    pytest.param("/ApPrOvE", id="approve in mixed case is recognised"),
    pytest.param("   /approve   ", id="approve with surrounding spaces is recognised"),
    pytest.param("Looks right.\n\n/approve\n", id="approve on its own line after prose"),
    pytest.param("/\u200bappro\u200dve", id="approve with zero-width characters is recognised"),
]


@pytest.mark.parametrize("body", RECOGNISED)
def test_a_recognised_approve_approves_with_one_reaction(drafted: InProcess, body: str) -> None:
    payload = send_comment(drafted, body)
    after = seen(drafted, payload)
    assert after.state == PlanState.APPROVED
    assert after.reactions == ["eyes"]
    assert after.replies == []
    assert after.approvals == [APPROVED]
    assert after.jobs == ["plan:r1", "execute:r1"]


NOT_COMMANDS = [
    pytest.param("I think we should /approve this", {}, id="approve mid-sentence is ignored"),
    pytest.param("> /approve", {}, id="approve in a quote is ignored"),
    pytest.param("Type `/approve` when ready", {}, id="approve in inline code is ignored"),
    pytest.param("`/approve`", {}, id="approve alone in inline code is ignored"),
    pytest.param("```\n/approve\n```", {}, id="approve in a fenced block is ignored"),
    pytest.param("<!-- /approve -->", {}, id="approve in an html comment is ignored"),
    pytest.param("/approve", {"action": "edited"}, id="an edited comment is ignored"),
    pytest.param("/approve", {"kind": "Bot"}, id="a comment by another bot is ignored"),
    pytest.param(
        "/approve", {"login": "gaffer[bot]", "kind": "Bot"}, id="a comment by gaffer is ignored"
    ),
    pytest.param("\u200b\u200c\u200d\ufeff", {}, id="a comment of zero-width characters only"),
    pytest.param("<pre>\n/approve\n</pre>", {}, id="approve inside a pre block is ignored"),
    pytest.param(
        "Looks fine\u2028/approve", {}, id="approve after a line separator GitHub shows mid-line"
    ),
    pytest.param(
        "Looks fine\u2029/approve", {}, id="approve after a paragraph separator is ignored"
    ),
]


@pytest.mark.parametrize(("body", "extra"), NOT_COMMANDS)
def test_text_that_is_not_a_command_does_nothing(drafted: InProcess, body: str, extra) -> None:
    comments = len(drafted.flow.comments())
    payload = send_comment(drafted, body, **extra)
    after = seen(drafted, payload)
    assert len(drafted.flow.comments()) == comments + 1  # only the comment itself
    assert (after.state, after.reactions, after.replies) == (PlanState.DRAFT, [], [])
    assert after.approvals == []
    assert after.jobs == ["plan:r1"]
    assert all(row.processed_at for row in stored(drafted.flow.app))


ISSUE_TEXT = [
    pytest.param({"body": "/approve"}, id="approve in the issue body is not recognised"),
    pytest.param({"title": "/approve"}, id="approve in the issue title is not recognised"),
]


@pytest.mark.parametrize("text", ISSUE_TEXT)
def test_approve_in_the_issue_itself_is_not_a_command(here: InProcess, text) -> None:
    for name, value in text.items():
        setattr(here.flow, name, value)
    here.flow.open().label()
    here.settle()
    edited = labeled(here.flow.repo, here.flow.issue, installation_id=INSTALLATION_ID)
    handle(here, "issues", {**edited, "action": "edited"})
    after = seen(here)
    assert (after.state, after.replies, after.approvals) == (PlanState.DRAFT, [], [])
    assert after.jobs == ["plan:r1"]


NEAREST = [
    pytest.param("/approved", "did you mean /approve?", id="approved gets a reply naming approve"),
    pytest.param(
        "/approve-diffx", "did you mean /approve-diff?", id="approve-diffx gets approve-diff"
    ),
    pytest.param("/aprove", "did you mean /approve?", id="a misspelt approve gets approve"),
    pytest.param("/deploy now", "/help lists the commands", id="an unknown command gets /help"),
]
ARGUMENTS = [
    pytest.param(
        "/approve once the tests pass", "Usage: /approve", id="approve once the tests pass"
    ),
    pytest.param("/approve.", "Usage: /approve", id="approve with punctuation is refused"),
    pytest.param("/expand more", "Usage: /expand", id="expand with an argument is refused"),
    pytest.param("/approve-diff xyz", "Usage: /approve-diff", id="approve-diff with a non-sha"),
    pytest.param(
        "/approve r7", "r7 is not the current plan", id="approving another revision is refused"
    ),
]
TWO_COMMANDS = [
    pytest.param("/approve\n/reject", "One command per comment", id="approve and reject"),
    pytest.param("/approve\n\n/approve", "this comment has 2", id="approve twice in one comment"),
    pytest.param("/approved\n/approve", "One command per comment", id="a typo then the command"),
]


def refused_once(here: InProcess, body: str, reason: str, login: str = "maintainer") -> None:
    """Send body; it must get one reply quoting it with reason, and change nothing."""
    payload = send_comment(here, body, login=login)
    after = seen(here, payload)
    [reply] = after.replies
    assert reply.startswith("> " + body.splitlines()[0].strip())
    assert reason in reply
    assert (after.state, after.reactions, after.approvals) == (PlanState.DRAFT, [], [])
    assert after.jobs == ["plan:r1"]


@pytest.mark.parametrize(("body", "reason"), NEAREST)
def test_a_near_miss_gets_a_short_reply_naming_the_nearest_command(
    drafted: InProcess, body: str, reason: str
) -> None:
    refused_once(drafted, body, reason)
    assert len(seen(drafted).replies[0]) < 400


@pytest.mark.parametrize(("body", "reason"), ARGUMENTS)
def test_a_command_with_undocumented_arguments_is_refused(
    drafted: InProcess, body: str, reason: str
) -> None:
    refused_once(drafted, body, reason)


@pytest.mark.parametrize(("body", "reason"), TWO_COMMANDS)
def test_two_commands_in_one_comment_are_refused(
    drafted: InProcess, body: str, reason: str
) -> None:
    refused_once(drafted, body, reason)


def test_approve_diff_for_a_sha_that_is_not_the_head_is_refused_with_the_head_shown(
    here: InProcess,
) -> None:
    plan = here.to_review()
    payload = send_comment(here, "/approve-diff 0123456789abcdef")
    after = seen(here, payload)
    assert (after.state, after.reactions, after.pulls) == (PlanState.IN_REVIEW, [], 0)
    assert "is not the verified head" in after.replies[-1]
    assert plan.head_sha in after.replies[-1]
    assert [kind for kind, *_ in after.approvals] == ["plan"]


GITHUB_COMMENT_LIMIT = 65_536
ODD_COMMENTS = [
    pytest.param(
        "x" * (GITHUB_COMMENT_LIMIT - 10) + "\n/approve",
        "approved",
        id="a comment at GitHub's length limit ending in approve approves",
    ),
    pytest.param(
        "/approve " + "x" * (GITHUB_COMMENT_LIMIT - 10),
        "refused",
        id="a very long line after approve is refused with a short reply",
    ),
    pytest.param(
        "\u200b" * 30_000 + "\n/approve",
        "approved",
        id="thirty thousand zero-width characters before approve",
    ),
    pytest.param(
        "/approve \udc80\udcff", "approved", id="bytes that are not UTF-8 after approve are dropped"
    ),
    pytest.param("\ud800/approve", "approved", id="a lone surrogate before approve is dropped"),
]


@pytest.mark.parametrize(("body", "outcome"), ODD_COMMENTS)
def test_long_non_utf8_and_zero_width_comments_are_handled_safely(
    drafted: InProcess, body: str, outcome: str
) -> None:
    payload = send_comment(drafted, body)
    after = seen(drafted, payload)
    assert all(row.processed_at and not row.error for row in stored(drafted.flow.app))
    if outcome == "approved":
        assert (after.state, after.reactions, after.replies) == (PlanState.APPROVED, ["eyes"], [])
    else:
        assert (after.state, after.reactions, after.approvals) == (PlanState.DRAFT, [], [])
        [reply] = after.replies
        assert "the limit is 20,000" in reply and len(reply) < 1000


def test_a_delivery_whose_bytes_are_not_utf8_is_refused_and_stores_nothing(
    drafted: InProcess,
) -> None:
    payload = human_comment(drafted, "/approve")
    body = json.dumps(payload).replace("/approve", "/approve \\u00e9").encode()
    body = body.replace(b"\\u00e9", b"\xe9")  # Latin-1, not UTF-8
    rows = len(stored(drafted.flow.app))
    response = post_raw(
        drafted.flow.client,
        body,
        **{"X-GitHub-Event": "issue_comment", "X-Hub-Signature-256": sign(body)},
    )
    assert response.status_code == 400
    assert len(stored(drafted.flow.app)) == rows
    assert seen(drafted, payload).state == PlanState.DRAFT
    assert drafted.flow.state_labels() == ["gaffer: draft"]
