"""What a stage's agent is told besides the issue: the stage program, the repository's
conventions files and the lessons it kept, all read from the default branch in the mirror.

A repository may write `.github/gaffer/programs/<stage>.md` on its default branch. It is
added after gaffer's shipped program for the stage, or replaces it when its first line is
`<!-- gaffer: replace -->`. Its `pr.md` is the pull request's text (tasks/stages/pulls.py).
What the job ran with (each file's path and blob SHA, the lessons used and set aside) is
recorded on the job.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from bot.memory import Offered, expire, relevant, sort_out, still_holds
from bot.models import Job, Lesson, LessonState, Plan
from tasks.context import WorkerContext
from tasks.gitcmd import GitError, git

PROGRAMS = Path(__file__).resolve().parents[2] / "config" / "programs"

PROGRAM_DIR = ".github/gaffer/programs"
# The pull request's text, used in place of the repository's pull request template.
PR_PROGRAM = f"{PROGRAM_DIR}/pr.md"
REPLACE_MARK = "<!-- gaffer: replace -->"
CONVENTIONS = ("AGENTS.md", "CLAUDE.md")
MAX_FILE_CHARS = 20_000


@dataclass(frozen=True)
class Guidance:
    """The program, conventions and lessons for one agent run, and the record of them."""

    program: str
    conventions: tuple[tuple[str, str], ...] = ()
    lessons: tuple[Offered, ...] = ()
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def used(self) -> list[Offered]:
        return [each for each in self.lessons if each.needs_look is None]


class CommitFiles:
    """Files of one commit of the repository's mirror, read once each."""

    def __init__(self, mirror: Path, sha: str) -> None:
        self.mirror, self.sha = mirror, sha
        self._seen: dict[str, tuple[str, str] | None] = {}

    def blob(self, path: str) -> tuple[str, str] | None:
        """Return (blob SHA, text) of a file at the commit, or None when it is not there."""
        if path not in self._seen:
            self._seen[path] = self._read(path)
        return self._seen[path]

    def text(self, path: str) -> str | None:
        found = self.blob(path)
        return None if found is None else found[1]

    def _read(self, path: str) -> tuple[str, str] | None:
        try:
            listed = git(["ls-tree", "-z", self.sha, "--", path], cwd=self.mirror)
        except GitError:
            return None
        # "<mode> blob <sha>\t<path>": only a regular file counts, never a link or a folder.
        meta = listed.split("\t", 1)[0].split()
        if len(meta) != 3 or meta[1] != "blob" or meta[0] not in {"100644", "100755"}:
            return None
        return meta[2], git(["cat-file", "blob", meta[2]], cwd=self.mirror)


def stage_program(tree: CommitFiles, names: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """Return the program for a stage and its record. names: the program asked for first,
    then what it falls back to (e.g. expand, plan); the last is always shipped."""
    shipped_name = names[-1]
    shipped = (PROGRAMS / f"{shipped_name}.md").read_text()
    record: dict[str, Any] = {
        "name": names[0],
        "shipped": f"config/programs/{shipped_name}.md",
        "shipped_blob": _blob_sha(shipped),
    }
    for name in names:
        path = f"{PROGRAM_DIR}/{name}.md"
        found = tree.blob(path)
        if found is None:
            continue
        blob, text = found
        text = text[:MAX_FILE_CHARS]
        record.update(path=path, blob=blob, commit=tree.sha)
        if text.lstrip().startswith(REPLACE_MARK):
            record["mode"] = "replaces"
            return text.lstrip()[len(REPLACE_MARK) :].strip() + "\n", record
        record["mode"] = "extends"
        own = f"## This repository's instructions for this stage ({path})\n\n{text.strip()}"
        return f"{shipped.rstrip()}\n\n{own}\n", record
    return shipped, record


def conventions(tree: CommitFiles) -> tuple[tuple[tuple[str, str], ...], list[dict[str, str]]]:
    """Return the conventions files the repository keeps, and their record."""
    found, record = [], []
    for path in CONVENTIONS:
        blob = tree.blob(path)
        if blob is not None:
            found.append((path, blob[1][:MAX_FILE_CHARS]))
            record.append({"path": path, "blob": blob[0]})
    return tuple(found), record


def for_planning(
    wctx: WorkerContext, plan: Plan, mirror: Path, head: str, names: Sequence[str], about: str
) -> Guidance:
    """Guidance for writing a plan: the lessons that concern the issue, checked at head."""
    tree = CommitFiles(mirror, head)
    with wctx.db.session() as session:
        expire(session, plan.repository_id)
        kept = session.scalars(
            select(Lesson).where(
                Lesson.repository_id == plan.repository_id, Lesson.state == LessonState.KEPT
            )
        ).all()
        lessons = sort_out(relevant(kept, about), tree.text)
    return _guidance(tree, names, lessons)


def for_execution(
    wctx: WorkerContext,
    mirror: Path,
    base: str,
    head: str,
    names: Sequence[str],
    planned_with: Sequence[Offered],
) -> Guidance:
    """Guidance for working on an approved plan: the program and conventions at its base,
    and the lessons it was planned with that still hold on the default branch's head."""
    with wctx.db.session() as session:
        lessons = still_holds(planned_with, CommitFiles(mirror, head).text, session)
    return _guidance(CommitFiles(mirror, base), names, lessons)


def _guidance(tree: CommitFiles, names: Sequence[str], lessons: Sequence[Offered]) -> Guidance:
    program, program_record = stage_program(tree, names)
    files, files_record = conventions(tree)
    record = {
        "program": program_record,
        "conventions": files_record,
        "lessons_used": [each.id for each in lessons if each.needs_look is None],
        "lessons_set_aside": [each.id for each in lessons if each.needs_look is not None],
    }
    return Guidance(program, files, tuple(lessons), record)


def record_inputs(wctx: WorkerContext, job_id: int, record: dict[str, Any]) -> None:
    """Keep on the job what one of its runs was given (a Guidance's record); a job of
    several runs (execute, then fix) keeps each one's."""
    with wctx.db.session() as session:
        job = session.get_one(Job, job_id)
        before = dict(job.inputs or {})
        runs = [*before.get("runs", []), record]
        used = sorted({*before.get("lessons_used", []), *record.get("lessons_used", [])})
        job.inputs = {"runs": runs, "lessons_used": used}


def _blob_sha(text: str) -> str:
    """Git's blob SHA of a text, so a shipped program is named the way a repository's is."""
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
