"""The `gaffer/diff` check: what the agent changed, judged against the plan and the config."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from bot.repo_config import REPO_CONFIG_PATH
from tasks.checks.checkruns import Conclusion, fit_head, fit_title
from tasks.gitcmd import git

WORKFLOWS_DIR = ".github/workflows/"
MANIFEST_NAMES = frozenset(
    {
        "pyproject.toml",
        "setup.py",
        "setup.cfg",
        "Pipfile",
        "Pipfile.lock",
        "poetry.lock",
        "uv.lock",
        "package.json",
        "package-lock.json",
        "yarn.lock",
        "pnpm-lock.yaml",
        "go.mod",
        "go.sum",
        "Cargo.toml",
        "Cargo.lock",
        "Gemfile",
        "Gemfile.lock",
        "composer.json",
        "composer.lock",
        "pom.xml",
    }
)
MANIFEST_GLOBS = ("requirements*.txt", "build.gradle*")
# Files that decide how the tests run: an agent could make a red suite look green here.
TEST_RUNNER_NAMES = frozenset({"conftest.py", "pytest.ini", "tox.ini", "noxfile.py", "Makefile"})
TEST_RUNNER_GLOBS = ("jest.config.*", "vitest.config.*", "karma.conf.*")
TEST_DIRS = frozenset({"tests", "test", "__tests__"})
TEST_NAME_GLOBS = ("test_*.py", "*_test.*", "*.spec.*", "*.test.*")
MAX_TABLE_ROWS = 300
MAX_LISTED_PATHS = 50

_SCOPE_HEADING = re.compile(
    r"^\s*(?:#{1,6}\s*|\d+[.)]\s*|[-*+]\s*)?(?:\*\*|__)?scope\b(?:\*\*|__)?"
    r"\s*[:\u2014\u2013-]*\s*(?P<rest>.*)$",
    re.IGNORECASE,
)
_NEXT_SECTION = re.compile(
    r"^\s*(?:#{1,6}\s"
    r"|(?:\d+[.)]\s*|[-*+]\s*)?(?:\*\*|__)[A-Za-z][A-Za-z ]*(?:\*\*|__)"
    r"|[A-Za-z][A-Za-z ]*:\s*$)"
)
_BACKTICKED = re.compile(r"`([^`\n]+)`")
_LIST_MARKER = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_PATH_CHARS = re.compile(r"^[\w.\-/*?\[\]{}@+~]+$")


@dataclass(frozen=True)
class FileChange:
    """One file in the diff; `old_path` is set for a rename, `binary` when git counts no lines."""

    path: str
    old_path: str | None = None
    added: int = 0
    removed: int = 0
    binary: bool = False

    @property
    def paths(self) -> tuple[str, ...]:
        """Return every path the change touches (both sides of a rename)."""
        return (self.path,) if self.old_path is None else (self.old_path, self.path)


@dataclass(frozen=True)
class Flag:
    """Something in the diff a reviewer should see; `blocking` ones fail the check."""

    label: str
    paths: tuple[str, ...]
    blocking: bool = False
    list_paths: bool = True


@dataclass(frozen=True)
class Conflict:
    """A merge of the diff with another line of work would conflict in these files."""

    other: str  # what it was merged with, as people read it: `main`, plan #12 (octo/w#5)
    files: tuple[str, ...]


@dataclass(frozen=True)
class DiffReport:
    """What the agent changed, and what of it needs a reviewer's eye.

    The conclusion follows the rules a reviewer would apply:

    - `failure` when the agent changed nothing, or touched a path the repository's config
      protects: that is never acceptable, whatever else the diff does;
    - `neutral` when the diff only carries notes (files outside the plan's scope, CI
      workflows, gaffer's own config, dependency manifests, the test runner's config, more
      files than `max_files`, a predicted merge conflict with the default branch or another
      plan in flight): these can be right, but a human should look before merging;
    - `success` when nothing is flagged.
    """

    changes: tuple[FileChange, ...]
    scope: tuple[str, ...] = ()
    out_of_scope: tuple[str, ...] = ()
    tests_changed: tuple[str, ...] = ()
    manifests_changed: tuple[str, ...] = ()
    workflows_changed: tuple[str, ...] = ()
    config_changed: tuple[str, ...] = ()
    test_runner_changed: tuple[str, ...] = ()
    protected_touched: tuple[str, ...] = ()
    max_files: int | None = None
    conflicts: tuple[Conflict, ...] = ()

    @property
    def files(self) -> int:
        return len(self.changes)

    @property
    def added(self) -> int:
        return sum(change.added for change in self.changes)

    @property
    def removed(self) -> int:
        return sum(change.removed for change in self.changes)

    @property
    def flags(self) -> tuple[Flag, ...]:
        """Return the flags raised, blocking ones first."""
        candidates = (
            Flag("protected paths touched", self.protected_touched, blocking=True),
            Flag("outside the plan's scope", self.out_of_scope),
            Flag("CI workflows changed", self.workflows_changed),
            Flag(f"gaffer config ({REPO_CONFIG_PATH}) changed", self.config_changed),
            Flag("dependency manifests changed", self.manifests_changed),
            Flag("test runner config changed", self.test_runner_changed),
            Flag(f"more than {self.max_files} files changed", self._over_limit(), list_paths=False),
            *(Flag(f"conflicts with {each.other}", each.files) for each in self.conflicts),
        )
        return tuple(flag for flag in candidates if flag.paths)

    @property
    def conclusion(self) -> Conclusion:
        if not self.changes or any(flag.blocking for flag in self.flags):
            return "failure"
        return "neutral" if self.flags else "success"

    @property
    def title(self) -> str:
        if not self.changes:
            return "the agent changed nothing"
        files = f"{self.files} {_plural(self.files, 'file')}"
        totals = f"{files} changed, +{self.added} -{self.removed}"
        labels = ", ".join(flag.label for flag in self.flags)
        return fit_title(f"{totals}: {labels}" if labels else totals)

    @property
    def summary(self) -> str:
        if not self.changes:
            return "The agent's branch has no changes against the base commit."
        # Flags first: when a huge diff must be cut to fit, the table's tail goes, not them.
        sections = (
            _flags_list(self.flags),
            _scope_line(self.scope),
            _tests_line(self.tests_changed),
            _files_table(self.changes),
        )
        return fit_head("\n\n".join(sections))

    def _over_limit(self) -> tuple[str, ...]:
        if self.max_files is None or self.files <= self.max_files:
            return ()
        return tuple(change.path for change in self.changes)


def merge_conflicts(repo: Path, head_sha: str, others: Sequence[tuple[str, str]]) -> list[Conflict]:
    """The files a merge of head with each other commit (name, commit-ish) would conflict in;
    a commit the repository does not have (another machine's unpushed work) is skipped."""
    found = []
    held = commits_held(repo, [commit for _, commit in others])
    for name, commit in others:
        if commit not in held:
            continue
        merged = git(
            ["merge-tree", "--write-tree", "--name-only", "--no-messages", head_sha, commit],
            cwd=repo,
            answers=(0, 1),
        )
        files = tuple(dict.fromkeys(line for line in merged.splitlines()[1:] if line))
        if files:
            found.append(Conflict(name, files))
    return found


def commits_held(repo: Path, commits: Sequence[str]) -> set[str]:
    """Return which of these commit-ishes the repository holds as commits (one git run)."""
    if not commits:
        return set()
    asked = "".join(f"{commit}^{{commit}}\n" for commit in commits)
    found = git(["cat-file", "--batch-check=%(objecttype)"], cwd=repo, stdin=asked)
    return {
        commit for commit, line in zip(commits, found.split("\n"), strict=True) if line == "commit"
    }


def changed_files(repo: Path, base_sha: str, head_sha: str) -> list[FileChange]:
    """Return the files changed between two commits of repo, renames detected."""
    raw = git(
        ["diff", "--numstat", "-z", "--find-renames", "--no-ext-diff", base_sha, head_sha, "--"],
        cwd=repo,
    )
    return parse_numstat(raw)


def parse_numstat(raw: str) -> list[FileChange]:
    """Parse `git diff --numstat -z`: `added TAB removed TAB path NUL`, or for a rename
    `added TAB removed TAB NUL old NUL new NUL`; binary files count `-` lines."""
    changes = []
    fields = iter(raw.split("\0"))
    for head in fields:
        if not head:
            continue
        added, removed, path = head.split("\t", 2)
        old_path = None
        if not path:
            old_path, path = next(fields), next(fields)
        binary = added == "-" and removed == "-"
        counts = (0, 0) if binary else (int(added), int(removed))
        changes.append(FileChange(path, old_path, *counts, binary=binary))
    return changes


def plan_scope(plan_text: str) -> list[str]:
    """Return the paths (or globs) listed in the plan's Scope section; [] when it has none."""
    found: list[str] = []
    for line in _scope_lines(plan_text.splitlines()):
        for path in _paths_in_line(line):
            if path not in found:
                found.append(path)
    return found


def analyse(
    changes: Sequence[FileChange],
    *,
    scope: Sequence[str],
    protected_paths: Sequence[str],
    max_files: int | None = None,
    conflicts: Sequence[Conflict] = (),
) -> DiffReport:
    """Judge the changes against the plan's scope and the repository's protected paths."""
    return DiffReport(
        changes=tuple(changes),
        scope=tuple(scope),
        out_of_scope=_out_of_scope(changes, scope),
        tests_changed=_touching(changes, is_test_path),
        manifests_changed=_touching(changes, is_manifest),
        workflows_changed=_touching(changes, lambda path: path.startswith(WORKFLOWS_DIR)),
        config_changed=_touching(changes, lambda path: path == REPO_CONFIG_PATH),
        test_runner_changed=_touching(changes, is_test_runner_config),
        protected_touched=_touching(changes, lambda path: matches_any(protected_paths, path)),
        max_files=max_files,
        conflicts=tuple(conflicts),
    )


def matches_any(patterns: Iterable[str], path: str) -> bool:
    return any(path_matches(pattern, path) for pattern in patterns)


def path_matches(pattern: str, path: str) -> bool:
    """Match a repository path against a glob, the way .gitignore patterns read.

    `*` and `?` stay within one directory and `**` crosses directories; a pattern that
    matches a directory covers everything under it (`docs`, `docs/` and `docs/**` alike);
    a pattern without a slash matches a file or directory name at any depth (`*.lock`).
    """
    pattern = pattern.strip().removeprefix("./").lstrip("/").rstrip("/")
    if not pattern:
        return False
    regex = _glob_regex(pattern)
    parts = PurePosixPath(path).parts
    if "/" not in pattern:
        return any(regex.match(part) for part in parts)
    return any(regex.match("/".join(parts[:end])) for end in range(1, len(parts) + 1))


def is_test_path(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return bool(TEST_DIRS.intersection(parts[:-1])) or matches_any(TEST_NAME_GLOBS, parts[-1])


def is_manifest(path: str) -> bool:
    name = PurePosixPath(path).name
    return name in MANIFEST_NAMES or matches_any(MANIFEST_GLOBS, name)


def is_test_runner_config(path: str) -> bool:
    name = PurePosixPath(path).name
    return name in TEST_RUNNER_NAMES or matches_any(TEST_RUNNER_GLOBS, name)


@functools.lru_cache(maxsize=512)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    pieces, index = [], 0
    while index < len(pattern):
        piece, index = _glob_piece(pattern, index)
        pieces.append(piece)
    return re.compile("".join(pieces) + r"\Z")


def _glob_piece(pattern: str, index: int) -> tuple[str, int]:
    """Translate the glob token at index into a regex; return it and the next index."""
    if pattern.startswith("**/", index):
        return "(?:.*/)?", index + 3
    if pattern.startswith("**", index):
        return ".*", index + 2
    char = pattern[index]
    if char == "*":
        return "[^/]*", index + 1
    if char == "?":
        return "[^/]", index + 1
    close = pattern.find("]", index + 2)
    if char == "[" and close != -1:
        body = pattern[index + 1 : close]
        negate = body[:1] in ("!", "^")
        body = re.escape(body[1:] if negate else body).replace(r"\-", "-")
        return f"[{'^' if negate else ''}{body}]", close + 1
    return re.escape(char), index + 1


def _scope_lines(lines: Sequence[str]) -> Iterable[str]:
    """Yield the Scope heading's own text and the lines under it, up to the next section."""
    inside = False
    for line in lines:
        heading = _SCOPE_HEADING.match(line)
        if heading:
            inside = True
            yield heading["rest"]
        elif inside and _NEXT_SECTION.match(line):
            inside = False
        elif inside:
            yield line


def _paths_in_line(line: str) -> list[str]:
    """Return the paths in one line: every backticked one, else a bare leading path."""
    quoted = _BACKTICKED.findall(line)
    if quoted:
        return [_normal(item) for item in quoted if _PATH_CHARS.match(item.strip())]
    words = _LIST_MARKER.sub("", line).split()
    first = words[0].rstrip(",;:.") if words else ""
    looks_like_path = any(mark in first for mark in "/.*") and "://" not in first
    return [_normal(first)] if looks_like_path and _PATH_CHARS.match(first) else []


def _normal(path: str) -> str:
    return path.strip().removeprefix("./")


def _out_of_scope(changes: Sequence[FileChange], scope: Sequence[str]) -> tuple[str, ...]:
    if not scope:
        return ()
    outside = [c.path for c in changes if not any(matches_any(scope, p) for p in c.paths)]
    return tuple(outside)


def _touching(changes: Sequence[FileChange], test: Callable[[str], bool]) -> tuple[str, ...]:
    return tuple(path for change in changes for path in change.paths if test(path))


def _files_table(changes: Sequence[FileChange]) -> str:
    rows = ["| File | + | - |", "| --- | --: | --: |"]
    for change in changes[:MAX_TABLE_ROWS]:
        counts = ("binary", "") if change.binary else (str(change.added), str(change.removed))
        rows.append(f"| {_file_cell(change)} | {counts[0]} | {counts[1]} |")
    if len(changes) > MAX_TABLE_ROWS:
        rows.append(f"| … and {len(changes) - MAX_TABLE_ROWS:,} more files | | |")
    return "\n".join(rows)


def _flags_list(flags: Sequence[Flag]) -> str:
    if not flags:
        return "Nothing flagged."
    lines = ["**Flags**", ""]
    for flag in flags:
        verdict = " (fails the check)" if flag.blocking else ""
        paths = f": {_path_list(flag.paths)}" if flag.list_paths else ""
        lines.append(f"- {flag.label}{verdict}{paths}")
    return "\n".join(lines)


def _scope_line(scope: Sequence[str]) -> str:
    if not scope:
        return "The plan states no scope, so no file is checked against it."
    return f"Scope stated by the plan: {_path_list(scope)}"


def _tests_line(tests_changed: Sequence[str]) -> str:
    if not tests_changed:
        return "No test files changed."
    return f"Tests changed: {_path_list(tests_changed)}"


def _path_list(paths: Sequence[str]) -> str:
    shown = ", ".join(_code(path) for path in paths[:MAX_LISTED_PATHS])
    more = len(paths) - MAX_LISTED_PATHS
    return f"{shown} and {more:,} more" if more > 0 else shown


def _file_cell(change: FileChange) -> str:
    cell = _code(change.path)
    if change.old_path is not None:
        cell = f"{_code(change.old_path)} → {cell}"
    return cell.replace("|", "\\|")


def _code(path: str) -> str:
    """Render a path as inline code, whatever characters git allowed in it."""
    printable = "".join(char if char.isprintable() else "?" for char in path)
    return f"`` {printable} ``" if "`" in printable else f"`{printable}`"


def _plural(count: int, noun: str) -> str:
    return noun if count == 1 else f"{noun}s"
