"""Lessons: what reviewers and checks taught one plan, offered to the next ones.

A lesson's life:

1. **heard** — a writer's `/revise` feedback or `/reject` reason, and a writer's review of
   the plan's pull request (bot/handlers/reviews.py), are kept as the plan runs, with where
   they were said; so is a merged revert of its pull request within a week.
2. **proposed** — when the plan ends, its heard lessons, and what its checks taught (a check
   that failed and then passed after a fix), are listed on its status comment.
3. **kept** — a writer answers `/keep L<id>`. gaffer reads the lines the lesson cites on the
   default branch and stores their digests. A writer's `/remember <lesson>` is kept at once.
4. Used by later plans of the repository that it concerns (the paths it cites, or the words
   it shares with the issue), while every cited line still reads as it did when kept. One
   whose lines changed is set aside as "needs a look" and shown, never used.
5. **expired** 28 days after it was kept or last used by a plan that merged; or
   **forgotten** by `/forget L<id>`.

Only writers can make a lesson heard, keep or remember one: what someone without write
access says is never a lesson.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.models import (
    Candidate,
    CheckResult,
    Job,
    Lesson,
    LessonState,
    Plan,
    PlanState,
    aware,
    utcnow,
)
from bot.states import TERMINAL

LIFETIME = timedelta(days=28)
MAX_CHARS = 600  # a lesson is a sentence or two, not an essay
MAX_CITATIONS = 8
MAX_USED = 8
# A lesson shares at least this many words with an issue to count as about it.
SHARED_WORDS = 2

# `path/to/file.py`, optionally `:12`, `:12-20` or GitHub's `#L12-L20`. A bare name counts
# only with an extension and two letters before it (so "e.g." is not a file).
_CITATION = re.compile(
    r"(?<![\w/.:@-])(?P<path>(?:[\w.-]+/)*[\w-][\w.-]+\.[A-Za-z0-9]{1,8})"
    r"(?::(?P<start>\d{1,6})(?:-(?P<end>\d{1,6}))?|#L(?P<lstart>\d{1,6})(?:-L(?P<lend>\d{1,6}))?)?"
    r"(?![\w/-])"
)
_WORD = re.compile(r"[a-z][a-z0-9_]{3,}")
_COMMON_WORDS = (
    "this that with from have will when what which should would could there their they "
    "them about into only also just than then more most some such each every other make "
    "made used uses using instead please plan change changes code file files test tests issue"
)
_COMMON = frozenset(_COMMON_WORDS.split(" "))
LESSON_ID = re.compile(r"[Ll]?(?P<id>[1-9]\d{0,8})")
# A scope glob: a relative path with `*` or `?`, never leaving the repository.
_GLOB = re.compile(r"(?!/)(?!.*(?:^|/)\.\.(?:/|$))[\w./*?-]*[*?][\w./*?-]*")


@dataclass(frozen=True)
class Citation:
    """Lines of one file (a whole file when start is None) a lesson is about."""

    path: str
    start: int | None = None
    end: int | None = None

    @property
    def label(self) -> str:
        if self.start is None:
            return self.path
        return f"{self.path}:{self.start}" + (f"-{self.end}" if self.end != self.start else "")


def citations_in(text: str) -> list[Citation]:
    """Return the file lines a text names, in order, each once."""
    found: dict[Citation, None] = {}
    for match in _CITATION.finditer(text):
        path = match["path"].removeprefix("./")
        if ".." in path.split("/"):
            continue
        start = match["start"] or match["lstart"]
        end = match["end"] or match["lend"] or start
        if start is None:
            found[Citation(path)] = None
        elif int(end) >= int(start) > 0:
            found[Citation(path, int(start), int(end))] = None
    return list(found)[:MAX_CITATIONS]


def cited_and_scoped(words: str) -> tuple[list[Citation], list[str]]:
    """Split a writer's `/keep` words into the lines they cite (`app.py:3-9`) and the
    scope globs they give (`src/**/*.py`)."""
    globs = list(dict.fromkeys(word for word in words.split() if _GLOB.fullmatch(word)))
    rest = " ".join(word for word in words.split() if word not in globs)
    return citations_in(rest), globs


def digest(text: str, citation: Citation) -> str | None:
    """Return the digest of the cited lines of a file's text, None when it has no such lines."""
    lines = text.rstrip("\n").split("\n")  # git and GitHub's API differ on the last newline
    if citation.start is not None:
        assert citation.end is not None
        if citation.end > len(lines):
            return None
        lines = lines[citation.start - 1 : citation.end]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def citations_of(lesson: Lesson) -> list[Citation]:
    return [Citation(each["path"], each.get("start"), each.get("end")) for each in lesson.citations]


# -- hearing and proposing -----------------------------------------------------------------


def hear(
    session: Session,
    plan: Plan,
    *,
    kind: str,
    text: str,
    author: str,
    origin: str,
    source_url: str | None,
    revision: int | None = None,
    diff_sha: str | None = None,
    citations: Sequence[Citation] = (),
) -> bool:
    """Keep a writer's words about a plan; they are proposed when it ends (at once if it
    has). origin names what said them, once. Return whether a lesson was added."""
    words = " ".join(text.split())
    if not words:
        return False
    cited = list(dict.fromkeys([*citations, *citations_in(text)]))[:MAX_CITATIONS]
    return _add_once(
        session,
        Lesson(
            repository_id=plan.repository_id,
            # Words that ended the plan (a /reject reason) come after its end was handled.
            state=LessonState.PROPOSED if plan.state in TERMINAL else LessonState.HEARD,
            text=shorten(words),
            origin=origin,
            kind=kind,
            citations=_unpinned(cited),
            author=author,
            source_url=source_url,
            issue_number=plan.issue_number,
            plan_id=plan.id,
            revision=revision,
            diff_sha=diff_sha,
            pr_number=plan.pr_number,
        ),
    )


def plan_ended(session: Session, plan: Plan) -> None:
    """Propose what the ended plan taught; renew the lessons it used if it merged."""
    for lesson in session.scalars(
        select(Lesson).where(Lesson.plan_id == plan.id, Lesson.state == LessonState.HEARD)
    ):
        lesson.state = LessonState.PROPOSED
        lesson.pr_number = plan.pr_number
    for lesson in _check_lessons(session, plan):
        _add_once(session, lesson)
    if plan.state == PlanState.MERGED:
        renew(session, plan)


def _check_lessons(session: Session, plan: Plan) -> Iterable[Lesson]:
    """A check that failed on one head and passed on a later one taught the fix loop something.
    (Not on a best-of-N plan: one candidate's red and another's green teach nothing.)"""
    if session.scalar(select(Candidate.id).where(Candidate.plan_id == plan.id).limit(1)):
        return
    results = session.scalars(
        select(CheckResult).where(CheckResult.plan_id == plan.id).order_by(CheckResult.id)
    ).all()
    failed: dict[str, CheckResult] = {}
    for result in results:
        if result.conclusion == "failure":
            failed.setdefault(result.name, result)
        elif result.conclusion == "success" and result.name in failed:
            first = failed.pop(result.name)
            why = f": {first.title}" if first.title else ""
            yield Lesson(
                repository_id=plan.repository_id,
                state=LessonState.PROPOSED,
                text=shorten(
                    f"The `{result.name}` check failed on the first try{why}. "
                    "It passed after a fix round."
                ),
                origin=f"check:{plan.id}:{result.name}",
                kind="check",
                citations=[],
                author="gaffer",
                source_url=first.html_url,
                issue_number=plan.issue_number,
                plan_id=plan.id,
                revision=plan.approved_revision,
                diff_sha=result.head_sha,
                pr_number=plan.pr_number,
            )


def renew(session: Session, plan: Plan) -> None:
    """Confirm the lessons the merged plan's jobs used: they start a new 28 days."""
    used: set[int] = set()
    for inputs in session.scalars(select(Job.inputs).where(Job.plan_id == plan.id)):
        used.update((inputs or {}).get("lessons_used", []))
    for lesson in session.scalars(select(Lesson).where(Lesson.id.in_(used))):
        if lesson.state == LessonState.KEPT:
            lesson.confirmed_at = utcnow()


def _add_once(session: Session, lesson: Lesson) -> bool:
    known = session.scalar(
        select(Lesson.id).where(
            Lesson.repository_id == lesson.repository_id, Lesson.origin == lesson.origin
        )
    )
    if known is None:
        session.add(lesson)
    return known is None


def shorten(text: str) -> str:
    """Cut a lesson's text to MAX_CHARS."""
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"


def _unpinned(citations: Sequence[Citation]) -> list[dict[str, Any]]:
    return [{"path": c.path, "start": c.start, "end": c.end} for c in citations]


# -- what writers decide -------------------------------------------------------------------


def lesson_in(session: Session, repository_id: int, text: str) -> Lesson | None:
    """Return the repository's lesson an argument such as `L12` names."""
    match = LESSON_ID.fullmatch(text)
    if match is None:
        return None
    return session.scalar(
        select(Lesson).where(Lesson.id == int(match["id"]), Lesson.repository_id == repository_id)
    )


def pin(citations: Sequence[Citation], files: dict[str, str | None]) -> list[dict[str, Any]] | str:
    """Return the citations with the digests of their lines now, or why they cannot be kept."""
    pinned = []
    for citation in citations:
        text = files.get(citation.path)
        if text is None:
            return f"`{citation.path}` is not on the default branch."
        value = digest(text, citation)
        if value is None:
            lines = len(text.rstrip("\n").split("\n"))
            return f"`{citation.path}` has {lines} lines; the lesson cites {citation.label}."
        pinned.append({**_unpinned([citation])[0], "digest": value})
    return pinned


def keep(
    lesson: Lesson, actor: str, pinned: list[dict[str, Any]], scope: Sequence[str] = ()
) -> None:
    """A writer keeps the lesson as it cites the default branch now, scoped to more globs."""
    now = utcnow()
    lesson.state = LessonState.KEPT
    lesson.citations = pinned
    lesson.scope = list(dict.fromkeys([*(lesson.scope or []), *scope]))
    lesson.decided_by, lesson.decided_at, lesson.confirmed_at = actor, now, now


def forget(lesson: Lesson, actor: str) -> None:
    lesson.state = LessonState.FORGOTTEN
    lesson.decided_by, lesson.decided_at = actor, utcnow()


# -- using what was kept -------------------------------------------------------------------


@dataclass(frozen=True)
class Offered:
    """A kept lesson as a prompt and the plan comment show it."""

    id: int
    text: str
    author: str
    source_url: str | None
    issue_number: int
    citations: tuple[str, ...]
    # Why it was set aside instead of used: "lines changed since it was kept: app.py:10-20".
    needs_look: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "author": self.author,
            "source_url": self.source_url,
            "issue_number": self.issue_number,
            "citations": list(self.citations),
            "needs_look": self.needs_look,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Offered:
        return cls(
            data["id"],
            data["text"],
            data["author"],
            data.get("source_url"),
            data["issue_number"],
            tuple(data.get("citations", ())),
            data.get("needs_look"),
        )


def expire(session: Session, repository_id: int, now: datetime | None = None) -> None:
    """Expire the repository's kept lessons not confirmed for LIFETIME."""
    cutoff = (now or utcnow()) - LIFETIME
    for lesson in session.scalars(
        select(Lesson).where(
            Lesson.repository_id == repository_id, Lesson.state == LessonState.KEPT
        )
    ):
        if lesson.confirmed_at is None or aware(lesson.confirmed_at) < cutoff:
            lesson.state = LessonState.EXPIRED


def relevant(lessons: Iterable[Lesson], about: str) -> list[Lesson]:
    """Return the lessons that concern an issue, best first, at most MAX_USED.

    about: the issue's words. A lesson concerns it when the issue names a file the lesson
    cites or its scope matches, or they share SHARED_WORDS uncommon words.
    """
    named = {c.path for c in citations_in(about)}
    words = _words(about)
    scored = []
    for lesson in lessons:
        cited = {c.path for c in citations_of(lesson)}
        matched = {p for p in named if p in cited or _in_scope(p, lesson.scope or [])}
        shared = len(_words(lesson.text) & words)
        if matched or shared >= SHARED_WORDS:
            scored.append((10 * len(matched) + shared, lesson.id, lesson))
    scored.sort(key=lambda item: (-item[0], -item[1]))
    return [lesson for _, _, lesson in scored[:MAX_USED]]


def sort_out(lessons: Iterable[Lesson], read: Callable[[str], str | None]) -> list[Offered]:
    """Check each lesson's cited lines on the default branch (read(path) gives a file's text
    there): a lesson whose lines still read as when it was kept is used, any other is set
    aside as needing a look."""
    offered = []
    for lesson in lessons:
        changed = [
            Citation(each["path"], each.get("start"), each.get("end")).label
            for each in lesson.citations
            if _changed(each, read)
        ]
        offered.append(
            Offered(
                lesson.id,
                lesson.text,
                lesson.author,
                lesson.source_url,
                lesson.issue_number,
                tuple(c.label for c in citations_of(lesson)),
                "lines changed since it was kept: " + ", ".join(changed) if changed else None,
            )
        )
    return offered


def _changed(cited: dict[str, Any], read: Callable[[str], str | None]) -> bool:
    text = read(cited["path"])
    if text is None:
        return True
    citation = Citation(cited["path"], cited.get("start"), cited.get("end"))
    return digest(text, citation) != cited.get("digest")


def _in_scope(path: str, globs: Sequence[str]) -> bool:
    return any(fnmatchcase(path, glob) for glob in globs)


def _words(text: str) -> set[str]:
    return {word for word in _WORD.findall(text.lower()) if word not in _COMMON}


def still_holds(
    offered: Sequence[Offered], read: Callable[[str], str | None], session: Session
) -> list[Offered]:
    """Check again, at execution, the lessons an approved revision was planned with."""
    ids = [each.id for each in offered if each.needs_look is None]
    kept = session.scalars(
        select(Lesson).where(Lesson.id.in_(ids), Lesson.state == LessonState.KEPT)
    ).all()
    return sort_out(sorted(kept, key=lambda lesson: ids.index(lesson.id)), read)
