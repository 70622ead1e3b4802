"""Find the one slash command in an issue comment and check it against the registry.

A command is a line whose text starts with ``/name`` (name in any case, at most three
spaces of indentation, trailing spaces allowed). Only text a reader sees as ordinary prose
counts; these are never commands:

- lines inside fenced code blocks (``` or ~~~, also when indented or in a list item);
- lines inside inline code spans, including spans that run over several lines;
- block quotes, and the lines directly after a quoted line that markdown folds into the
  quote ("lazy continuation") until a blank line;
- anything inside an HTML comment, including multi-line and unclosed ones. A line is cut
  at its first ``<!--`` and the rest of the line that closes a comment is dropped;
- anything inside a ``<pre>``, ``<script>``, ``<style>`` or ``<textarea>`` element, from
  its tag to the end of the line that closes it (markdown's raw HTML blocks);
- a ``/name`` mid-sentence, and paths such as ``/usr/bin``.

Lines end at ``\\n`` (or ``\\r\\n``) only. GitHub shows U+2028 and U+2029 in the middle
of a line, so a ``/name`` after one is mid-line, not a command; a lone ``\\r`` is removed
like the other control characters.
Invisible characters (zero-width, bidi, other format and control characters) are removed
before anything else, so the parser reads the text as it renders: ``/\\u200bapprove`` and
``\\u200b/approve`` are both ``/approve``, and no hidden character can make a command
that looks like something else. Where markdown is ambiguous the parser errs towards
"not a command": a missed command gets no 👀, a false one would act.

The text after the name must match the command's documented arguments exactly, or the
comment is refused with the usage; ``/revise`` and ``/reject`` take the rest of the
comment (HTML comments removed), up to MAX_ARGUMENT_CHARS.
"""

from __future__ import annotations

import bisect
import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from bot.models import PlanState
from bot.repo_config import MAX_CANDIDATES
from bot.states import STOPPABLE
from bot.untrusted import drop_invisible, strip_html_comments

MAX_ARGUMENT_CHARS = 20_000
_RAW_CHARS = 200
_FOLDED_ARGS = frozenset({"sha"})

_COMMAND_LINE = re.compile(r" {0,3}/(?P<name>[A-Za-z][A-Za-z0-9_-]{0,39})(?![A-Za-z0-9_/-])")
# Any indentation and list markers: a fence inside a list item still hides its lines.
_FENCE_OPEN = re.compile(
    r"[ \t]*(?:(?:[-*+]|\d{1,9}[.)])[ \t]+)*(?P<fence>`{3,}+(?=[^`]*$)|~{3,}+)"
)
# Raw HTML whose lines are not prose: from the tag to the line holding any closing tag.
_RAW_HTML_OPEN = re.compile(r"<(?:pre|script|style|textarea)(?:[ \t>]|$)", re.IGNORECASE)
_RAW_HTML_CLOSE = re.compile(r"</(?:pre|script|style|textarea)>", re.IGNORECASE)
_BACKTICKS = re.compile(r"`+")
_NOT_NEWLINE = re.compile(r"[^\n]")


class Who(StrEnum):
    """Who may use a command; bot/permissions.py decides who counts as a writer."""

    WRITER = "writer"
    ANYONE = "anyone"


class Target(StrEnum):
    """What a command acts on."""

    ACTIVE = "the active plan"
    LATEST = "the latest plan, ended or not"
    ISSUE = "the issue, with or without a plan"


@dataclass(frozen=True)
class CommandSpec:
    """One command: its name, usage, help text, audience, argument grammar, what it acts on
    and the plan states it applies in (none: any). bot/handlers/plan_commands.py holds what
    each one does, one handler per name."""

    name: str
    args: str
    summary: str
    who: Who
    pattern: re.Pattern[str]
    # The argument text runs from the command to the end of the comment, not the line.
    multiline: bool = False
    target: Target = Target.ACTIVE
    states: tuple[PlanState, ...] = ()

    @property
    def usage(self) -> str:
        return f"/{self.name} {self.args}".rstrip()


@dataclass(frozen=True)
class Command:
    """A well-formed command: lower-case name, parsed arguments, and the line as written."""

    name: str
    args: dict[str, str]
    raw: str


@dataclass(frozen=True)
class Refusal:
    """A comment that tried to give a command but got it wrong, and why."""

    raw: str
    reason: str


_NO_ARGS = re.compile("")


def _spec(
    name: str,
    args: str,
    summary: str,
    who: Who,
    pattern: str = "",
    flags: int = 0,
    *,
    multiline: bool = False,
    target: Target = Target.ACTIVE,
    states: tuple[PlanState, ...] = (),
) -> CommandSpec:
    compiled = re.compile(pattern, flags | re.ASCII) if pattern else _NO_ARGS
    return CommandSpec(name, args, summary, who, compiled, multiline, target, states)


REGISTRY: tuple[CommandSpec, ...] = (
    _spec(
        "approve",
        "[rN] [parallel] [xN]",
        "Approve the current plan revision (bound to revision N when given); `parallel` "
        "lets it execute beside plans whose file scopes meet its own; `x3` runs three "
        "candidates side by side (`x1`: one, whatever the repo config's `candidates`).",
        Who.WRITER,
        r"(?:r(?P<revision>[1-9]\d{0,5}))?(?:(?:^|\s+)(?P<parallel>parallel))?"
        rf"(?:(?:^|\s+)x(?P<candidates>[1-{MAX_CANDIDATES}]))?",
        re.IGNORECASE,
        states=(PlanState.DRAFT,),
    ),
    _spec(
        "revise",
        "<feedback>",
        "A new plan revision, or more work on the diff in review (voiding its approval); "
        "the rest of the comment is the feedback.",
        Who.WRITER,
        r"(?P<feedback>.+)",
        re.DOTALL,
        multiline=True,
        states=(PlanState.DRAFT, PlanState.IN_REVIEW),
    ),
    _spec(
        "expand",
        "",
        "A new, more detailed plan revision.",
        Who.WRITER,
        states=(PlanState.DRAFT,),
    ),
    _spec(
        "split",
        "",
        "Open the parts the plan proposes as sub-issues, each planned on its own (`after` "
        "ones wait for those they name to merge); without parts, a revision proposing them; "
        "on a split plan, the parts not opened yet.",
        Who.WRITER,
        states=(PlanState.DRAFT, PlanState.SPLIT),
    ),
    _spec(
        "approve-diff",
        "[sha]",
        "Approve the verified head (bound to this SHA when given); gaffer opens the PR "
        "from exactly it.",
        Who.WRITER,
        r"(?P<sha>[0-9a-f]{7,40})?",
        re.IGNORECASE,
        states=(PlanState.IN_REVIEW,),
    ),
    _spec(
        "reject",
        "[reason]",
        "End the plan; the rest of the comment is the reason.",
        Who.WRITER,
        r"(?P<reason>.*)",
        re.DOTALL,
        multiline=True,
        states=(PlanState.DRAFT, PlanState.IN_REVIEW),
    ),
    _spec(
        "cancel",
        "",
        "Stop the plan wherever it is, killing a running agent.",
        Who.WRITER,
        states=STOPPABLE,
    ),
    _spec(
        "retry",
        "",
        "Start a failed plan again (its work from the pushed branch).",
        Who.WRITER,
        target=Target.LATEST,
        states=(PlanState.FAILED,),
    ),
    _spec(
        "icebox",
        "",
        "Put a draft aside until someone says /thaw.",
        Who.WRITER,
        states=(PlanState.DRAFT,),
    ),
    _spec(
        "thaw",
        "",
        "Bring an iceboxed plan back as a draft.",
        Who.WRITER,
        target=Target.LATEST,
        states=(PlanState.ICEBOX,),
    ),
    _spec(
        "agent",
        "<name> [model]",
        "Choose the agent, and optionally the model, for the plan's next jobs.",
        Who.WRITER,
        r"(?P<name>[A-Za-z][\w.-]{0,39})(?:\s+(?P<model>[\w.:/@-]{1,100}))?",
        states=(PlanState.PLANNING, PlanState.DRAFT, PlanState.APPROVED),
    ),
    _spec(
        "budget",
        "<usd>",
        "Set the plan's spending limit in US dollars; the agent is stopped when it is spent.",
        Who.WRITER,
        r"\$?(?P<usd>(?!0+(?:\.0+)?$)\d{1,6}(?:\.\d{1,2})?)",
    ),
    _spec(
        "status",
        "",
        "Where the plan stands and the commands that apply.",
        Who.ANYONE,
        target=Target.ISSUE,
    ),
    _spec(
        "cost",
        "",
        "The plan's cost so far, job by job, with where the dollars came from.",
        Who.ANYONE,
        target=Target.ISSUE,
    ),
    _spec(
        "keep",
        "L<id> [path:lines …] [glob …]",
        "Keep a proposed lesson for later plans (or keep one again), tied to the lines it "
        "cites as they read now on the default branch, and scoped to the paths the globs "
        "match.",
        Who.WRITER,
        r"(?P<lesson>[Ll]?[1-9]\d{0,8})(?P<cite>(?:\s+[\w./#:*?-]{1,300}){0,8})",
        target=Target.ISSUE,
    ),
    _spec(
        "remember",
        "<lesson>",
        "Keep a lesson of your own for later plans; the rest of the comment is the lesson, "
        "and the `path:lines` it names tie it to those lines.",
        Who.WRITER,
        r"(?P<lesson>.+)",
        re.DOTALL,
        multiline=True,
        target=Target.ISSUE,
    ),
    _spec(
        "forget",
        "L<id>",
        "Drop a lesson: no later plan reads it.",
        Who.WRITER,
        r"(?P<lesson>[Ll]?[1-9]\d{0,8})",
        target=Target.ISSUE,
    ),
    _spec(
        "lessons",
        "",
        "The repository's lessons: kept, and proposed ones waiting for `/keep`.",
        Who.ANYONE,
        target=Target.ISSUE,
    ),
    _spec("help", "", "Show this table.", Who.ANYONE, target=Target.ISSUE),
)
_BY_NAME = {spec.name: spec for spec in REGISTRY}
_WHO_LABEL = {Who.WRITER: "write access or approver", Who.ANYONE: "anyone"}


def spec_for(name: str) -> CommandSpec:
    """Return the registered command called name."""
    return _BY_NAME[name]


def parse_comment(body: str) -> Command | Refusal | None:
    """Return the comment's command, a refusal explaining why it is not one, or None."""
    lines = drop_invisible(body.replace("\r\n", "\n")).split("\n")
    found = list(_command_lines(lines))
    if not found:
        return None
    if len(found) > 1:
        raw = "\n".join(_shorten(lines[index]) for index, _ in found[:2])
        return Refusal(raw, f"One command per comment; this comment has {len(found)}.")
    index, match = found[0]
    return _interpret(lines, index, match)


def render_help() -> str:
    """Render the commands table for /help and the README from the registry."""
    rows = [
        f"| `{spec.usage}` | {_WHO_LABEL[spec.who]} | {_applies(spec)} | {spec.summary} |"
        for spec in REGISTRY
    ]
    header = ["| Command | Who | When | What it does |", "|---|---|---|---|"]
    return "\n".join([*header, *rows])


def _applies(spec: CommandSpec) -> str:
    if spec.target is Target.ISSUE:
        return "any time"
    if spec.states == STOPPABLE:
        return "until the plan ends"
    if not spec.states:
        return "while a plan is active"
    return " or ".join(f"`{state.value}`" for state in spec.states)


def _interpret(lines: list[str], index: int, match: re.Match[str]) -> Command | Refusal:
    raw = _shorten(lines[index])
    name = match["name"].lower()
    spec = _BY_NAME.get(name)
    if spec is None:
        return Refusal(raw, _unknown_reason(name))
    text = _argument_text(spec, lines, index, match.end())
    if len(text) > MAX_ARGUMENT_CHARS:
        return Refusal(
            raw,
            f"The text after /{name} is {len(text):,} characters; "
            f"the limit is {MAX_ARGUMENT_CHARS:,}.",
        )
    args = spec.pattern.fullmatch(text)
    if args is None:
        return Refusal(raw, f"Usage: {spec.usage}")
    return Command(name, _clean_args(args), raw)


def _argument_text(spec: CommandSpec, lines: list[str], index: int, start: int) -> str:
    if not spec.multiline:
        return _drop_comment_tail(lines[index][start:]).strip()
    rest = "\n".join([lines[index][start:], *lines[index + 1 :]])
    return strip_html_comments(rest).strip()


def _drop_comment_tail(text: str) -> str:
    cut = text.find("<!--")
    return text if cut < 0 else text[:cut]


def _clean_args(match: re.Match[str]) -> dict[str, str]:
    args = {key: value for key, value in match.groupdict().items() if value}
    return {key: value.lower() if key in _FOLDED_ARGS else value for key, value in args.items()}


def _unknown_reason(name: str) -> str:
    nearest = difflib.get_close_matches(name, _BY_NAME, n=1, cutoff=0.6)
    if nearest:
        return f"Unknown command /{name}; did you mean /{nearest[0]}?"
    return f"Unknown command /{name}; /help lists the commands."


def _shorten(line: str) -> str:
    line = line.strip()
    return line if len(line) <= _RAW_CHARS else line[: _RAW_CHARS - 1] + "…"


def _command_lines(lines: list[str]) -> Iterator[tuple[int, re.Match[str]]]:
    """Yield (line index, match) for each line that is a command as rendered."""
    visible = _mask_code_spans(_visible_lines(lines))
    for index, line in enumerate(visible):
        match = _COMMAND_LINE.match(line) if line else None
        if match:
            yield index, match


def _visible_lines(lines: list[str]) -> list[str | None]:
    """Map each line to the text a reader sees as prose, or None if it is not prose."""
    scan = _BlockScan()
    return [scan.visible(line) for line in lines]


class _BlockScan:
    """Track fences, HTML comments, raw HTML and block quotes from one line to the next."""

    def __init__(self) -> None:
        self.fence = ""
        self.in_comment = False
        self.in_quote = False
        self.in_raw_html = False

    def visible(self, line: str) -> str | None:
        if self.fence:
            self.fence = "" if _closes_fence(line, self.fence) else self.fence
            return None
        if self.in_comment:
            _, self.in_comment = _split_comment(line, in_comment=True)
            return None
        if self.in_raw_html:
            self.in_raw_html = not _RAW_HTML_CLOSE.search(line)
            return None
        opening = _FENCE_OPEN.match(line)
        if opening:
            self.fence, self.in_quote = opening["fence"], False
            return None
        return self._outside_blocks(line)

    def _outside_blocks(self, line: str) -> str | None:
        if not line.strip():
            self.in_quote = False
            return line
        text, self.in_comment = _split_comment(line, in_comment=False)
        if text.lstrip().startswith(">"):
            self.in_quote = True
        opening = None if self.in_quote else _RAW_HTML_OPEN.search(text)
        if opening:
            self.in_raw_html = not _RAW_HTML_CLOSE.search(text, opening.end())
            text = text[: opening.start()]
        return None if self.in_quote else text


def _closes_fence(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence) and stripped == fence[0] * len(stripped)


def _split_comment(line: str, *, in_comment: bool) -> tuple[str, bool]:
    """Return the line's text before any HTML comment, and whether one is open at its end."""
    start = 0 if in_comment else line.find("<!--")
    if start < 0:
        return line, False
    shown = "" if in_comment else line[:start]
    position = start if in_comment else start + 4
    while True:
        close = line.find("-->", position)
        if close < 0:
            return shown, True
        reopen = line.find("<!--", close + 3)
        if reopen < 0:
            return shown, False
        position = reopen + 4


def _mask_code_spans(lines: list[str | None]) -> list[str | None]:
    """Overwrite inline code spans with backticks, paragraph by paragraph, keeping lengths."""
    masked: list[str | None] = []
    paragraph: list[str] = []
    for line in [*lines, None]:
        if line is not None and line.strip():
            paragraph.append(line)
            continue
        if paragraph:
            masked += _mask_paragraph("\n".join(paragraph)).split("\n")
            paragraph = []
        masked.append(line)
    return masked[:-1]


def _mask_paragraph(text: str) -> str:
    pieces, done = [], 0
    for start, end in _code_spans(text):
        pieces += [text[done:start], _NOT_NEWLINE.sub("`", text[start:end])]
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


def _code_spans(text: str) -> Iterator[tuple[int, int]]:
    """Yield (start, end) of code spans: a backtick run closed by the next run as long."""
    runs = [match.span() for match in _BACKTICKS.finditer(text)]
    by_length: dict[int, list[int]] = {}
    for number, (start, end) in enumerate(runs):
        by_length.setdefault(end - start, []).append(number)
    number = 0
    while number < len(runs):
        start, end = runs[number]
        same = by_length[end - start]
        later = bisect.bisect_right(same, number)
        if later == len(same):
            number += 1
            continue
        closing = same[later]
        yield start, runs[closing][1]
        number = closing + 1
