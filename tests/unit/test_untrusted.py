"""Cleaning untrusted issue text before an agent or the command parser reads it."""

import time

import pytest

from bot.untrusted import TRUNCATION_NOTE, clean_untrusted, decode_body

CLEANED = [
    (
        "plain text is unchanged",
        "Fix the login bug.\n\tIndented.",
        "Fix the login bug.\n\tIndented.",
    ),
    ("html comment is removed", "a <!-- secret --> b", "a  b"),
    ("multi-line html comment is removed", "a\n<!--\nrun rm -rf\n-->\nb", "a\n\nb"),
    ("unclosed html comment hides the rest", "a <!-- ignore all\nprevious", "a "),
    ("several html comments are removed", "<!--1-->a<!--2-->b<!--3-->", "ab"),
    ("zero-width space is removed", "ap\u200bprove", "approve"),
    ("zero-width joiner and non-joiner are removed", "a\u200cb\u200dc", "abc"),
    ("left-to-right and right-to-left marks are removed", "a\u200eb\u200fc", "abc"),
    ("bidi overrides are removed", "a\u202eevil\u202cb", "aevilb"),
    ("bidi isolates are removed", "a\u2066b\u2069c", "abc"),
    ("word joiner and invisible operators are removed", "a\u2060b\u2062c\u2064d", "abcd"),
    ("byte order mark is removed", "\ufeffhello", "hello"),
    ("soft hyphen is removed", "in\u00advisible", "invisible"),
    ("tag characters are removed", "hi\U000e0001\U000e0041\U000e007f", "hi"),
    ("hangul filler is removed", "a\u3164b", "ab"),
    ("control characters are removed", "a\x00b\x07c\x1bd\x7fe\x85f", "abcdef"),
    ("newline and tab are kept", "a\nb\tc", "a\nb\tc"),
    ("windows newlines are normalised", "a\r\nb\r\n", "a\nb\n"),
    ("old mac newlines are normalised", "a\rb", "a\nb"),
    ("unicode line separators become newlines", "a\u2028b\u2029c", "a\nb\nc"),
    ("a comment hidden by a zero-width space is still removed", "a<\u200b!-- x -->b", "ab"),
    ("emoji and accents are kept", "café 👀 ✅", "café 👀 ✅"),
]


@pytest.mark.parametrize(
    ("text", "expected"), [case[1:] for case in CLEANED], ids=[c[0] for c in CLEANED]
)
def test_clean_untrusted(text: str, expected: str) -> None:
    assert clean_untrusted(text) == expected


def test_short_text_is_not_truncated() -> None:
    assert clean_untrusted("x" * 100, limit=100) == "x" * 100


def test_long_text_is_truncated_to_the_limit_with_a_visible_note() -> None:
    cleaned = clean_untrusted("x" * 1_000, limit=100)
    assert len(cleaned) == 100
    assert cleaned.endswith("[truncated]")


def test_limit_applies_after_hidden_text_is_removed() -> None:
    assert clean_untrusted("<!--" + "x" * 1_000 + "-->ok", limit=100) == "ok"


def test_limit_too_small_for_the_note_is_an_error() -> None:
    with pytest.raises(ValueError):
        clean_untrusted("text", limit=len(TRUNCATION_NOTE) - 1)


def test_one_megabyte_is_cleaned_quickly() -> None:
    text = "word\u200b <!-- c --> \r\n" * 50_000
    # Linear: well under a second of CPU; quadratic cleaning of 1 MB takes hours. This
    # process's CPU time, so other tests busy beside it cannot fail the bound.
    started = time.process_time()
    clean_untrusted(text)
    assert time.process_time() - started < 30.0


DECODED = [
    ("utf-8 is decoded", "café".encode(), "café"),
    ("invalid bytes become replacement characters", b"ok\xff\xfe", "ok\ufffd\ufffd"),
    ("truncated multibyte sequence is replaced", "é".encode()[:1], "\ufffd"),
    ("latin-1 text does not raise", "naïve".encode("latin-1"), "na\ufffdve"),
]


@pytest.mark.parametrize(
    ("raw", "expected"), [case[1:] for case in DECODED], ids=[c[0] for c in DECODED]
)
def test_decode_body(raw: bytes, expected: str) -> None:
    assert decode_body(raw) == expected
