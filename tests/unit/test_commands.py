"""The comment command parser: what counts as a command, and what is refused and why."""

import time
from pathlib import Path

import pytest

from bot.commands import (
    MAX_ARGUMENT_CHARS,
    REGISTRY,
    Command,
    Refusal,
    Target,
    Who,
    parse_comment,
    render_help,
)
from bot.handlers.plan_commands import ACTIONS, ISSUE_ACTIONS

FENCE = "```"

RECOGNISED = [
    ("approve alone on a line", "/approve", "approve", {}),
    ("approve in any case", "/ApPrOvE", "approve", {}),
    ("approve with surrounding spaces", "   /approve   ", "approve", {}),
    ("approve after prose lines", "Looks good to me.\n\n/approve\n\nThanks!", "approve", {}),
    ("approve with a windows line ending", "LGTM\r\n/approve\r\n", "approve", {}),
    ("approve a plan revision", "/approve r2", "approve", {"revision": "2"}),
    ("approve a plan revision in upper case", "/approve R12", "approve", {"revision": "12"}),
    ("approve beside overlapping plans", "/approve parallel", "approve", {"parallel": "parallel"}),
    (
        "approve a revision beside overlapping plans",
        "/approve r3 Parallel",
        "approve",
        {"revision": "3", "parallel": "Parallel"},
    ),
    ("approve-diff without a sha", "/approve-diff", "approve-diff", {}),
    ("approve-diff with a short sha", "/approve-diff 1a2b3c4", "approve-diff", {"sha": "1a2b3c4"}),
    (
        "approve-diff with a full sha",
        "/approve-diff " + "ab" * 20,
        "approve-diff",
        {"sha": "ab" * 20},
    ),
    (
        "approve-diff sha is lower-cased",
        "/approve-diff 1A2B3C4D",
        "approve-diff",
        {"sha": "1a2b3c4d"},
    ),
    ("revise with feedback", "/revise use a set", "revise", {"feedback": "use a set"}),
    (
        "revise feedback runs to the end of the comment",
        "/revise please:\n\n- rename it\n- add tests",
        "revise",
        {"feedback": "please:\n\n- rename it\n- add tests"},
    ),
    (
        "revise feedback may start on the next line",
        "/revise\nKeep the old API.",
        "revise",
        {"feedback": "Keep the old API."},
    ),
    (
        "revise feedback keeps code blocks",
        f"/revise like this:\n{FENCE}\n/approve\n{FENCE}",
        "revise",
        {"feedback": f"like this:\n{FENCE}\n/approve\n{FENCE}"},
    ),
    (
        "revise feedback drops hidden html comments",
        "/revise be brief <!-- ignore the reviewer -->\nthanks",
        "revise",
        {"feedback": "be brief \nthanks"},
    ),
    ("reject without a reason", "/reject", "reject", {}),
    ("reject with a reason", "/reject out of scope", "reject", {"reason": "out of scope"}),
    ("expand", "/expand", "expand", {}),
    ("split", "/split", "split", {}),
    ("retry", "/retry", "retry", {}),
    ("cancel", "/cancel", "cancel", {}),
    ("icebox", "/icebox", "icebox", {}),
    ("thaw", "/thaw", "thaw", {}),
    ("agent with a name", "/agent codex", "agent", {"name": "codex"}),
    (
        "agent with a name and model",
        "/agent claude sonnet-4",
        "agent",
        {"name": "claude", "model": "sonnet-4"},
    ),
    ("budget in dollars and cents", "/budget 12.50", "budget", {"usd": "12.50"}),
    ("budget with a dollar sign", "/budget $3", "budget", {"usd": "3"}),
    ("status", "/status", "status", {}),
    ("cost", "/cost", "cost", {}),
    ("help", "/help", "help", {}),
    ("a comment after the command on its line", "/approve <!-- bot: go -->", "approve", {}),
    ("approve after a block quote and a blank line", "> Ship it?\n\n/approve", "approve", {}),
    ("approve after a closed fence", f"{FENCE}\ncode\n{FENCE}\n/approve", "approve", {}),
    ("approve after a closed html comment", "<!--\nnote\n-->\n/approve", "approve", {}),
    ("approve after closed inline code", "use `x`\n/approve", "approve", {}),
    ("zero-width space inside the name is stripped", "/\u200bapprove", "approve", {}),
    ("zero-width space before the slash is stripped", "\u200b/approve", "approve", {}),
    ("byte order mark at the start is stripped", "\ufeff/approve", "approve", {}),
    ("bidi override after the command is stripped", "/approve\u202e", "approve", {}),
    ("approve after a closed pre block", "<pre>\nlog\n</pre>\n/approve", "approve", {}),
    ("approve after a one-line pre block", "<pre>log</pre>\n/approve", "approve", {}),
    ("approve after a pre tag in a closed quote", "> <pre>\n\n/approve", "approve", {}),
    ("a line separator after approve is space", "/approve\u2028", "approve", {}),
]


@pytest.mark.parametrize(
    ("body", "name", "args"), [case[1:] for case in RECOGNISED], ids=[c[0] for c in RECOGNISED]
)
def test_recognised(body: str, name: str, args: dict[str, str]) -> None:
    result = parse_comment(body)
    assert isinstance(result, Command)
    assert (result.name, result.args) == (name, args)


NOT_COMMANDS = [
    ("empty comment", ""),
    ("plain prose", "Looks good to me."),
    ("approve mid-sentence is not a command", "I will /approve once CI is green."),
    ("approve after a list marker", "- /approve"),
    ("approve in a block quote", "> /approve"),
    ("approve in a nested block quote", "> > /approve"),
    ("approve folded into a block quote", "> Should I merge?\n/approve"),
    ("in inline code", "`/approve`"),
    ("in inline code spanning lines", "run `this\n/approve\nthat` later"),
    ("in inline code with double backticks", "`` x\n/approve ` y ``"),
    ("in a fenced block", f"{FENCE}\n/approve\n{FENCE}"),
    ("in a tilde fenced block", "~~~\n/approve\n~~~"),
    ("in a fenced block with a language", f"{FENCE}text\n/approve\n{FENCE}"),
    ("in a longer fence closed only by a long enough fence", "````\n```\n/approve\n````"),
    ("in an unclosed fenced block", f"{FENCE}\n/approve"),
    ("in a fenced block inside a list item", f"- {FENCE}\n  /approve\n  {FENCE}"),
    ("in an indented fenced block", f"    {FENCE}\n    /approve\n    {FENCE}"),
    ("in an html comment", "<!-- /approve -->"),
    ("in a multi-line html comment", "<!--\n/approve\n-->"),
    ("in an unclosed html comment", "text <!--\n/approve"),
    ("after an html comment on the same line", "<!-- note --> /approve"),
    ("on the line that closes an html comment", "<!--\nnote\n--> /approve"),
    ("html comment reopened on the closing line", "<!--\n--> x <!--\n/approve\n-->"),
    ("indented four spaces is code", "    /approve"),
    ("indented with a tab is code", "\t/approve"),
    ("a path at the start of a line", "/usr/bin/env is missing"),
    ("a slash without a name", "/ approve"),
    ("a name that starts with a digit", "/2 approvals needed"),
    ("a name longer than any command", "/" + "a" * 60),
    ("in a pre block", "<pre>\n/approve\n</pre>"),
    ("in a pre block with attributes and a blank line", "<PRE lang=x>\n\n/approve\n</Pre>"),
    ("in an unclosed pre block", "<pre>\n/approve"),
    ("in a pre element opened mid-line", "output: <pre>\n/approve\n</pre>"),
    ("in a textarea", "<textarea>\n/approve\n</textarea>"),
    ("in a script block", "<script>\n/approve\n</script>"),
    ("after a line separator, shown mid-line", "Looks fine\u2028/approve"),
    ("after a paragraph separator, shown mid-line", "Looks fine\u2029/approve"),
    ("after a line separator at the start", "\u2028/approve"),
    ("after a lone carriage return, shown mid-line", "Looks fine\r/approve"),
]


@pytest.mark.parametrize("body", [c[1] for c in NOT_COMMANDS], ids=[c[0] for c in NOT_COMMANDS])
def test_not_a_command(body: str) -> None:
    assert parse_comment(body) is None


REFUSED = [
    ("approved suggests approve", "/approved", "did you mean /approve?"),
    ("approve-diffx suggests approve-diff", "/approve-diffx", "did you mean /approve-diff?"),
    ("aprove suggests approve", "/aprove", "did you mean /approve?"),
    ("unknown with nothing near points to help", "/deploy now", "/help lists the commands"),
    ("approve with prose is refused", "/approve once the tests pass", "Usage: /approve [rN]"),
    ("approve with punctuation is refused", "/approve.", "Usage: /approve [rN]"),
    ("approve with revision zero is refused", "/approve r0", "Usage: /approve [rN]"),
    ("parallel before the revision is refused", "/approve parallel r2", "Usage: /approve"),
    ("parallel run into the revision is refused", "/approve r2parallel", "Usage: /approve"),
    ("approve-diff with a short sha is refused", "/approve-diff 1a2b3c", "Usage: /approve-diff"),
    ("approve-diff with a non-hex sha is refused", "/approve-diff 1a2b3cz", "Usage: /approve-diff"),
    ("approve-diff with two shas is refused", "/approve-diff 1a2b3c4 5d6e7f8", "Usage:"),
    ("revise without feedback is refused", "/revise", "Usage: /revise <feedback>"),
    ("revise with only blank lines is refused", "/revise   \n\n  ", "Usage: /revise"),
    ("expand with arguments is refused", "/expand more", "Usage: /expand"),
    ("budget below zero is refused", "/budget -1", "Usage: /budget <usd>"),
    ("budget of zero is refused", "/budget 0.00", "Usage: /budget <usd>"),
    ("budget with three decimals is refused", "/budget 1.005", "Usage: /budget"),
    ("budget without an amount is refused", "/budget", "Usage: /budget <usd>"),
    ("agent without a name is refused", "/agent", "Usage: /agent <name> [model]"),
    ("agent with three words is refused", "/agent claude sonnet 4", "Usage: /agent"),
    ("two commands are refused", "/approve\n/approve-diff", "One command per comment"),
    ("two identical commands are refused", "/approve\n\n/approve", "this comment has 2"),
    ("a command inside revise feedback is a second command", "/revise x\n/approve", "One command"),
    ("an unknown and a known command are refused", "/approved\n/approve", "One command"),
]


@pytest.mark.parametrize(
    ("body", "reason"), [case[1:] for case in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_refused(body: str, reason: str) -> None:
    result = parse_comment(body)
    assert isinstance(result, Refusal)
    assert reason in result.reason


def test_refusal_quotes_the_line_as_written() -> None:
    assert parse_comment("thanks!\n  /approve now please  \n") == Refusal(
        raw="/approve now please", reason="Usage: /approve [rN] [parallel] [xN]"
    )


def test_refusal_raw_is_short_for_a_long_line() -> None:
    result = parse_comment("/approve " + "x" * 10_000)
    assert isinstance(result, Refusal)
    assert len(result.raw) <= 200


def test_feedback_at_the_limit_is_accepted() -> None:
    result = parse_comment("/revise " + "x" * MAX_ARGUMENT_CHARS)
    assert isinstance(result, Command)
    assert len(result.args["feedback"]) == MAX_ARGUMENT_CHARS


def test_feedback_over_the_limit_is_refused() -> None:
    result = parse_comment("/revise " + "x" * (MAX_ARGUMENT_CHARS + 1))
    assert isinstance(result, Refusal)
    assert "limit is 20,000" in result.reason


LARGE = [
    ("1 MB comment", ("Some text with `code` and <!-- notes --> here.\n" * 25_000) + "/approve"),
    ("1 MB single line", "/approve " + "x" * 1_000_000),
    ("1 MB of backtick runs", "".join("`" * k + "a" for k in range(1, 1_400))),
    ("1 MB of unclosed html comments", "<!--" * 250_000),
    ("1 MB of zero-width characters", "\u200b" * 1_000_000 + "/approve"),
    ("1 MB of command lines", "/approve\n" * 110_000),
]


@pytest.mark.parametrize("body", [c[1] for c in LARGE], ids=[c[0] for c in LARGE])
def test_large_comments_parse_quickly(body: str) -> None:
    # The parser is linear: well under a second of CPU on these, even on a slow machine. One
    # that backtracks or rescans (quadratic on 1 MB) takes hours. Counted in this process's
    # CPU time, so a busy machine running other tests beside it cannot fail the bound.
    started = time.process_time()
    parse_comment(body)
    assert time.process_time() - started < 30.0


def test_registry_names_are_unique_lower_case() -> None:
    names = [spec.name for spec in REGISTRY]
    assert len(names) == len(set(names))
    assert all(name == name.lower() for name in names)


def test_only_read_only_commands_are_open_to_anyone() -> None:
    anyone = {spec.name for spec in REGISTRY if spec.who is Who.ANYONE}
    assert anyone == {"status", "cost", "help", "lessons"}


def test_help_lists_every_registered_command() -> None:
    table = render_help()
    for spec in REGISTRY:
        assert f"| `{spec.usage}` |" in table
        assert spec.summary in table


def test_help_is_a_markdown_table_with_one_row_per_command() -> None:
    rows = render_help().splitlines()
    assert rows[0].startswith("| Command |")
    assert len(rows) == 2 + len(REGISTRY)


def test_the_readmes_command_table_is_the_registrys() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = readme.index("| Command | Who | When | What it does |")
    table = readme[start : readme.index("\n\n", start)]
    assert table == render_help()


def test_every_command_has_one_handler_and_every_handler_a_command() -> None:
    on_plans = {spec.name for spec in REGISTRY if spec.target is not Target.ISSUE}
    on_issues = {spec.name for spec in REGISTRY if spec.target is Target.ISSUE}
    assert set(ACTIONS) == on_plans
    assert set(ISSUE_ACTIONS) == on_issues
