"""The parts a plan proposes, read from its **Parts** section, for `/split`.

    **Parts**
    1. Add the widget model
       What the part does, in as many lines as it needs.
    2. Serve widgets from the API (after 1)
       ...

Each numbered line is a part's title, and the lines under it until the next part or
section are its description. `(after 1)` or `(after 1, 2)` names parts that must be merged
before this one executes; only earlier parts may be named, so the order has no cycle.
Hidden HTML comments and gaffer's markers are taken out: a part's issue says only what the
writer who approved the split could read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_PARTS = 10
MAX_TITLE = 200

_HEADING = re.compile(
    r"^\s*(?:#{1,6}\s*|\d+[.)]\s*|[-*+]\s*)?(?:\*\*|__)?parts\b(?:\*\*|__)?\s*:?\s*$",
    re.IGNORECASE,
)
_NEXT_SECTION = re.compile(r"^\s*(?:#{1,6}\s|(?:\*\*|__)[A-Za-z][A-Za-z ]*(?:\*\*|__)\s*:?\s*$)")
_ITEM = re.compile(r"^\s{0,3}(?P<number>\d{1,3})[.)]\s+(?P<title>.+?)\s*$")
_AFTER = re.compile(r"\(\s*after\s+(?P<parts>[\d\s,and]+?)\s*\)", re.IGNORECASE)


# What a part's issue must not carry from the agent's text: hidden comments (unseen by the
# writer who reviewed the plan, read by the next prompt) and gaffer's own markers.
_HIDDEN = re.compile(r"<!--.*?(?:-->|$)", re.DOTALL)
_MARKER = re.compile(r"gaffer:part", re.IGNORECASE)


def _shown(text: str) -> str:
    return _MARKER.sub("gaffer part", _HIDDEN.sub("", text))


class PartsError(ValueError):
    """The Parts section cannot be followed; the message says what to fix."""


@dataclass(frozen=True)
class Part:
    number: int
    title: str
    body: str
    after: tuple[int, ...] = ()


def proposed_parts(plan_text: str) -> list[Part]:
    """The parts the plan proposes, in order; [] when it has no Parts section."""
    items = _items(plan_text.splitlines())
    if not items:
        return []
    if len(items) > MAX_PARTS:
        raise PartsError(
            f"the plan proposes {len(items)} parts; gaffer splits into at most {MAX_PARTS}"
        )
    parts = [
        _part(index, number, title, body) for index, (number, title, body) in enumerate(items, 1)
    ]
    if len(parts) < 2:
        raise PartsError("the plan proposes one part: a split needs at least two")
    return parts


def _items(lines: list[str]) -> list[tuple[int, str, list[str]]]:
    items: list[tuple[int, str, list[str]]] = []
    heading_indent: int | None = None  # set inside the section
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if heading_indent is None:
            if _HEADING.match(line):
                # A numbered heading (`6. **Parts**`) holds its parts indented under it.
                numbered = re.match(r"\s*\d+[.)]", line) is not None
                heading_indent = indent if numbered else -1
            continue
        if _NEXT_SECTION.match(line) or (line.strip() and indent <= heading_indent):
            break
        item = _ITEM.match(line[heading_indent + 1 :] if heading_indent >= 0 else line)
        if item:
            items.append((int(item["number"]), item["title"], []))
        elif items:
            items[-1][2].append(line.strip())
    return items


def _part(index: int, number: int, title: str, body: list[str]) -> Part:
    if number != index:
        raise PartsError(
            f"parts are numbered 1, 2, 3 … in order; part {index} is numbered {number}"
        )
    after: list[int] = []
    for found in _AFTER.finditer(title):
        after += [int(n) for n in re.findall(r"\d+", found["parts"])]
    if any(not 1 <= earlier < number for earlier in after):
        raise PartsError(f"part {number} may only come after earlier parts (1 to {number - 1})")
    title = " ".join(_shown(_AFTER.sub("", title)).replace("**", "").split())[:MAX_TITLE]
    if not title:
        raise PartsError(f"part {number} has no title")
    return Part(number, title, _shown("\n".join(body)).strip(), tuple(sorted(set(after))))
