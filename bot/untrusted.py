"""Clean text written by people outside the trust boundary before gaffer uses it.

Issue bodies and comments reach agents and the command parser. Anything a reader of the
rendered issue cannot see (HTML comments, zero-width and bidi characters, control
characters) is removed, so what an agent reads and what a command says is what the human
on GitHub saw.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata

TRUNCATION_NOTE = "\n\n[truncated]"

# Letters that render as blank space but are not in category Cf (Hangul fillers).
_INVISIBLE_LETTERS = "\u115f\u1160\u3164\uffa0"
_KEPT_CONTROLS = "\n\t"
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Cc", "Cs"})
_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_LINE_BREAK = re.compile(r"\r\n?|[\u2028\u2029]")


def decode_body(raw: bytes) -> str:
    """Decode a request or file body as UTF-8, replacing invalid bytes."""
    return raw.decode("utf-8", errors="replace")


def clean_untrusted(text: str, *, limit: int = 60_000) -> str:
    """Return text without hidden content, with newlines normalised, at most limit chars."""
    if limit < len(TRUNCATION_NOTE):
        raise ValueError(f"limit must be at least {len(TRUNCATION_NOTE)}")
    visible = strip_html_comments(strip_invisible(text))
    if len(visible) <= limit:
        return visible
    return visible[: limit - len(TRUNCATION_NOTE)] + TRUNCATION_NOTE


def strip_invisible(text: str) -> str:
    """Normalise newlines to \\n and drop invisible, format and control characters."""
    return drop_invisible(normalise_newlines(text))


def drop_invisible(text: str) -> str:
    """Drop invisible, format and control characters (a lone \\r too); keep \\n and \\t."""
    return _invisible_pattern().sub("", text)


def normalise_newlines(text: str) -> str:
    """Turn \\r\\n, lone \\r and Unicode line/paragraph separators into \\n."""
    return _LINE_BREAK.sub("\n", text)


def strip_html_comments(text: str) -> str:
    """Remove HTML comments; an unclosed one hides the rest of the text, as in a browser."""
    return _HTML_COMMENT.sub("", text)


@functools.cache
def _invisible_pattern() -> re.Pattern[str]:
    # Built from the running Python's Unicode tables on first use (about 0.1 s) rather
    # than a hand-kept list, so new format characters are covered when Python updates.
    hidden = [chr(code) for code in range(sys.maxunicode + 1) if _is_invisible(chr(code))]
    return re.compile("[" + "".join(_class_ranges(hidden)) + "]")


def _is_invisible(char: str) -> bool:
    if char in _KEPT_CONTROLS:
        return False
    return char in _INVISIBLE_LETTERS or unicodedata.category(char) in _INVISIBLE_CATEGORIES


def _class_ranges(chars: list[str]) -> list[str]:
    """Collapse sorted characters into escaped regex class ranges like a-z."""
    ranges: list[list[str]] = []
    for char in chars:
        if ranges and ord(char) == ord(ranges[-1][1]) + 1:
            ranges[-1][1] = char
        else:
            ranges.append([char, char])
    return [_escape_range(first, last) for first, last in ranges]


def _escape_range(first: str, last: str) -> str:
    if first == last:
        return re.escape(first)
    return f"{re.escape(first)}-{re.escape(last)}"
