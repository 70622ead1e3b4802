"""The gaffer/diff check: reading the diff from git, the plan's scope, and the verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.checks.diffcheck import (
    Conflict,
    DiffReport,
    FileChange,
    analyse,
    changed_files,
    merge_conflicts,
    parse_numstat,
    path_matches,
    plan_scope,
)
from tasks.gitcmd import git

SRC = FileChange("src/app.py", added=10, removed=2)
TEST = FileChange("tests/test_app.py", added=5)


def report(*changes: FileChange, scope=(), protected=(), max_files=None) -> DiffReport:
    return analyse(changes, scope=list(scope), protected_paths=list(protected), max_files=max_files)


VERDICTS = [
    pytest.param([SRC, TEST], [], [], "success", id="a diff with nothing flagged succeeds"),
    pytest.param(
        [SRC, TEST], ["src/app.py", "tests/"], [], "success", id="a diff within scope succeeds"
    ),
    pytest.param(
        [SRC, FileChange("secrets/prod.key", added=1)],
        [],
        ["secrets/**"],
        "failure",
        id="a diff touching a protected path fails",
    ),
    pytest.param(
        [FileChange("deploy/new.yml", old_path="infra/old.yml")],
        [],
        ["infra"],
        "failure",
        id="renaming a file out of a protected directory fails",
    ),
    pytest.param(
        [SRC, FileChange(".github/workflows/ci.yml", added=3)],
        [],
        [],
        "neutral",
        id="a workflow change is flagged",
    ),
    pytest.param(
        [SRC, FileChange(".github/gaffer.yml", added=1)],
        [],
        [],
        "neutral",
        id="a change to gaffer's config is flagged",
    ),
    pytest.param(
        [SRC, FileChange("requirements-dev.txt", added=1)],
        [],
        [],
        "neutral",
        id="a dependency manifest change is flagged",
    ),
    pytest.param(
        [SRC, FileChange("tests/conftest.py", added=1)],
        [],
        [],
        "neutral",
        id="a test runner config change is flagged",
    ),
    pytest.param(
        [SRC, FileChange("docs/index.md", added=1)],
        ["src/app.py"],
        [],
        "neutral",
        id="files outside the plan's scope are a note, not a failure",
    ),
    pytest.param([], [], [], "failure", id="an empty diff fails"),
]


@pytest.mark.parametrize(("changes", "scope", "protected", "conclusion"), VERDICTS)
def test_conclusion(changes, scope, protected, conclusion):
    assert report(*changes, scope=scope, protected=protected).conclusion == conclusion


def test_an_empty_diff_says_the_agent_changed_nothing():
    empty = report()
    assert empty.title == "the agent changed nothing"
    assert "no changes" in empty.summary


def test_files_outside_the_plans_scope_are_listed():
    result = report(SRC, TEST, FileChange("README.md", added=1), scope=["src/*.py"])
    assert result.out_of_scope == ("tests/test_app.py", "README.md")
    assert "outside the plan's scope: `tests/test_app.py`, `README.md`" in result.summary
    assert result.title == "3 files changed, +16 -2: outside the plan's scope"


def test_a_plan_without_scope_flags_no_file_and_says_so():
    result = report(SRC, FileChange("anything/else.txt"))
    assert result.out_of_scope == ()
    assert "The plan states no scope" in result.summary


def test_protected_paths_come_first_and_say_they_fail():
    result = report(
        FileChange(".github/workflows/ci.yml"), FileChange("secrets/key"), protected=["secrets"]
    )
    assert [flag.label for flag in result.flags] == [
        "protected paths touched",
        "CI workflows changed",
    ]
    assert "- protected paths touched (fails the check): `secrets/key`" in result.summary


def test_the_summary_tables_files_with_lines_added_and_removed():
    result = report(
        SRC,
        FileChange("logo.png", binary=True),
        FileChange("new.py", old_path="old.py", added=1, removed=1),
    )
    assert "| `src/app.py` | 10 | 2 |" in result.summary
    assert "| `logo.png` | binary |  |" in result.summary
    assert "| `old.py` → `new.py` | 1 | 1 |" in result.summary
    assert (result.files, result.added, result.removed) == (3, 11, 3)


def test_changed_tests_are_reported():
    result = report(SRC, TEST, FileChange("web/button.spec.ts"), FileChange("pkg/x_test.go"))
    assert result.tests_changed == ("tests/test_app.py", "web/button.spec.ts", "pkg/x_test.go")
    assert report(SRC).tests_changed == ()
    assert "No test files changed." in report(SRC).summary


def test_more_files_than_the_limit_is_a_note():
    result = report(SRC, TEST, max_files=1)
    assert result.conclusion == "neutral"
    assert "more than 1 files changed" in result.title
    assert report(SRC, TEST, max_files=2).conclusion == "success"


def test_a_huge_diff_keeps_its_summary_within_githubs_limit():
    many = [FileChange(f"src/{'deep/' * 200}file{n}.py", added=1) for n in range(400)]
    summary = report(*many, scope=["lib/"]).summary
    assert len(summary.encode()) <= 65_535
    assert summary.startswith("**Flags**\n\n- outside the plan's scope: `src/deep/")
    assert summary.endswith("cut to fit GitHub's limit.")


def test_paths_with_pipes_and_backticks_stay_inside_their_table_cell():
    summary = report(FileChange("a|b`c.py", added=1)).summary
    assert "| `` a\\|b`c.py `` | 1 | 0 |" in summary


@pytest.mark.parametrize(
    ("path", "manifest"),
    [
        ("pyproject.toml", True),
        ("requirements.txt", True),
        ("requirements/base.txt", False),
        ("requirements-dev.txt", True),
        ("web/package-lock.json", True),
        ("app/build.gradle.kts", True),
        ("go.sum", True),
        ("Cargo.lock", True),
        ("src/setup.py.bak", False),
        ("notes.txt", False),
    ],
)
def test_dependency_manifests_are_recognised_at_any_depth(path, manifest):
    assert bool(report(FileChange(path)).manifests_changed) is manifest


GLOBS = [
    pytest.param("secrets/**", "secrets/a/b.key", True, id="** crosses directories"),
    pytest.param("secrets/*", "secrets/a/b.key", True, id="a matched directory covers its files"),
    pytest.param("src/*.py", "src/pkg/app.py", False, id="* stays within one directory"),
    pytest.param("**/*.pem", "a/b/c.pem", True, id="**/ matches at any depth"),
    pytest.param("**/*.pem", "c.pem", True, id="**/ matches zero directories"),
    pytest.param("*.lock", "web/yarn.lock", True, id="a pattern without a slash matches names"),
    pytest.param("docs/", "docs/index.md", True, id="a trailing slash means a directory"),
    pytest.param("./src/app.py", "src/app.py", True, id="a leading ./ is ignored"),
    pytest.param("src/app.py", "src/app.pyc", False, id="a plain path matches exactly"),
    pytest.param("v[0-9].txt", "v3.txt", True, id="character classes work"),
    pytest.param("v[!0-9].txt", "v3.txt", False, id="negated character classes work"),
    pytest.param("", "anything", False, id="an empty pattern matches nothing"),
]


@pytest.mark.parametrize(("pattern", "path", "expected"), GLOBS)
def test_path_matches(pattern, path, expected):
    assert path_matches(pattern, path) is expected


SCOPES = [
    pytest.param(
        "1. **Goal** — fix it.\n"
        "2. **Scope** — the files:\n"
        "   - `src/app.py`\n"
        "   - `tests/test_app.py` (new)\n"
        "3. **Steps**\n"
        "   1. edit `src/other.py`\n",
        ["src/app.py", "tests/test_app.py"],
        id="the scope of a numbered plan stops at the next section",
    ),
    pytest.param(
        "## Scope\n\n- src/app.py — the handler\n- docs/*.md\n\n## Steps\n\n- `README.md`\n",
        ["src/app.py", "docs/*.md"],
        id="bare paths and globs under a Scope heading count",
    ),
    pytest.param(
        "**Scope:** `bot/app.py`, `bot/db.py`\n**Steps:** none\n",
        ["bot/app.py", "bot/db.py"],
        id="paths on the Scope line itself count",
    ),
    pytest.param(
        "Scope:\n- ./Makefile.\n- `Makefile`\n- see https://example.com/x.py\n\nRisks:\n- `x.py`\n",
        ["Makefile"],
        id="urls are not paths and duplicates are dropped",
    ),
    pytest.param(
        "## Scope\n\n- `pytest -q` runs the tests\n- None yet.\n",
        [],
        id="commands and prose are not paths",
    ),
    pytest.param("## Goal\n\nFix `src/app.py`.\n", [], id="a plan without a Scope states none"),
]


@pytest.mark.parametrize(("plan", "expected"), SCOPES)
def test_plan_scope(plan, expected):
    assert plan_scope(plan) == expected


def test_numstat_parsing_handles_renames_binaries_and_odd_names():
    raw = "3\t1\tsrc/a.py\0-\t-\tlogo.png\0" + "0\t0\t\0old name.py\0new\tname.py\0"
    assert parse_numstat(raw) == [
        FileChange("src/a.py", added=3, removed=1),
        FileChange("logo.png", binary=True),
        FileChange("new\tname.py", old_path="old name.py"),
    ]


def test_changed_files_reads_a_real_repository(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(["init", "--quiet", "--initial-branch=main"], cwd=repo)
    body = "".join(f"line {n}\n" for n in range(20))
    _write(repo, {"src/old_name.py": body, "README.md": "hello\n", "gone.txt": "bye\n"})
    base = _commit(repo, "base")
    (repo / "src/old_name.py").rename(repo / "src/new_name.py")
    (repo / "gone.txt").unlink()
    (repo / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00binary")
    _write(repo, {"README.md": "hello\nworld\n", "src/new_name.py": body + "line 20\n"})
    head = _commit(repo, "head")

    assert changed_files(repo, base, head) == [
        FileChange("README.md", added=1),
        FileChange("gone.txt", removed=1),
        FileChange("logo.png", binary=True),
        FileChange("src/new_name.py", old_path="src/old_name.py", added=1),
    ]


def _write(repo: Path, files: dict[str, str]) -> None:
    for rel, content in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(content)


def _commit(repo: Path, message: str) -> str:
    git(["add", "--all"], cwd=repo)
    git(["commit", "--quiet", "-m", message], cwd=repo)
    return git(["rev-parse", "HEAD"], cwd=repo)


def test_a_predicted_merge_conflict_names_the_other_work_and_its_files(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(["init", "--quiet", "--initial-branch=main"], cwd=repo)
    _write(repo, {"widgets.py": "VALUE = 1\n", "docs.md": "docs\n", "other.py": "X = 1\n"})
    base = _commit(repo, "base")
    _write(repo, {"widgets.py": "VALUE = 'mine'\n", "docs.md": "my docs\n"})
    mine = _commit(repo, "mine")
    git(["checkout", "--quiet", "-b", "sibling", base], cwd=repo)
    _write(repo, {"widgets.py": "VALUE = 'theirs'\n", "other.py": "X = 2\n"})
    sibling = _commit(repo, "sibling")
    git(["checkout", "--quiet", "-b", "elsewhere", base], cwd=repo)
    _write(repo, {"other.py": "X = 3\n"})
    _commit(repo, "touches only other.py")

    tree = git(["rev-parse", f"{base}^{{tree}}"], cwd=repo)
    others = [
        ("plan #7 (octo/widgets#3)", sibling),
        ("`main`", "refs/heads/elsewhere"),  # at `apart`
        ("gone", "f" * 40),  # another machine's unpushed work
        ("not a commit", tree),
    ]
    conflicts = merge_conflicts(repo, mine, others)
    assert conflicts == [Conflict("plan #7 (octo/widgets#3)", ("widgets.py",))]
    verdict = analyse(
        changed_files(repo, base, mine), scope=(), protected_paths=(), conflicts=conflicts
    )
    assert verdict.conclusion == "neutral"  # a reviewer looks; it is not the agent's fault
    assert "conflicts with plan #7 (octo/widgets#3)" in verdict.title
    assert "`widgets.py`" in verdict.summary
