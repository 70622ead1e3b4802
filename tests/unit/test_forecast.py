"""Whether two plans' file scopes could name one file."""

from __future__ import annotations

import pytest

from tasks.forecast import entries_meet, scopes_meet

MEET = [
    ("the same file", "src/app.py", "src/app.py"),
    ("a file inside a folder", "src/app.py", "src/"),
    ("a file inside a folder named without its slash", "src/app.py", "src"),
    ("a file a glob matches", "src/app.py", "src/*.py"),
    ("a file deep under a double star", "src/a/b/c.py", "src/**"),
    ("a name glob matches at any depth", "src/a/b.lock", "*.lock"),
    ("two globs in one folder", "src/*.py", "src/*.txt"),
    ("a glob in a folder under another's", "src/a/*.py", "src/**"),
    ("a name glob against any glob", "*.md", "docs/**/*.txt"),
    ("a glob whose folder is itself a wildcard", "*/app.py", "src/*.py"),
]
APART = [
    ("two different files", "src/app.py", "src/other.py"),
    ("a file outside a folder", "docs/app.md", "src/"),
    ("a file a glob does not match", "src/app.txt", "src/*.py"),
    ("globs in sibling folders", "src/a/*.py", "src/b/*.py"),
    ("globs in different top folders", "src/**", "docs/*.md"),
]


@pytest.mark.parametrize(("one", "other"), [case[1:] for case in MEET], ids=[c[0] for c in MEET])
def test_entries_that_could_name_one_file_meet(one: str, other: str) -> None:
    assert entries_meet(one, other)
    assert entries_meet(other, one)


@pytest.mark.parametrize(("one", "other"), [case[1:] for case in APART], ids=[c[0] for c in APART])
def test_entries_that_cannot_name_one_file_stay_apart(one: str, other: str) -> None:
    assert not entries_meet(one, other)
    assert not entries_meet(other, one)


def test_scopes_meet_at_their_first_meeting_pair_and_an_empty_scope_meets_none() -> None:
    assert scopes_meet(["README.md", "src/app.py"], ["docs/", "src/*.py"]) == (
        "src/app.py",
        "src/*.py",
    )
    assert scopes_meet(["README.md"], ["docs/"]) is None
    assert scopes_meet([], ["src/"]) is None
