"""Real git origins for the GitHub double to serve: made with files, and committed to."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from tasks.gitcmd import git


def commit_to_origin(origin: Path, files: dict[str, str], message: str) -> str:
    """Commit files (path -> content) on origin's main branch and return the new sha."""
    work = Path(tempfile.mkdtemp(prefix="seed-", dir=origin.parent))
    try:
        git(["clone", "--quiet", str(origin), str(work)], cwd=origin.parent)
        git(["checkout", "--quiet", "-B", "main"], cwd=work)
        for rel, content in files.items():
            target = work / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        git(["add", "--all"], cwd=work)
        git(["commit", "--quiet", "--allow-empty", "-m", message], cwd=work)
        git(["push", "--quiet", "origin", "main"], cwd=work)
        return git(["rev-parse", "HEAD"], cwd=work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def merge_on_origin(origin: Path, branch: str, message: str) -> str:
    """Merge branch into origin's main with a merge commit, as GitHub's merge button does."""
    work = Path(tempfile.mkdtemp(prefix="merge-", dir=origin.parent))
    try:
        git(["clone", "--quiet", str(origin), str(work)], cwd=origin.parent)
        git(["merge", "--quiet", "--no-ff", "-m", message, f"origin/{branch}"], cwd=work)
        git(["push", "--quiet", "origin", "main"], cwd=work)
        return git(["rev-parse", "HEAD"], cwd=work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def make_origin(tmp_path: Path, files: dict[str, str]) -> Path:
    """Create a bare origin repository with one commit of files on `main`."""
    origin = tmp_path / "origin.git"
    origin.mkdir(parents=True)
    git(["init", "--bare", "--quiet", "--initial-branch=main"], cwd=origin)
    commit_to_origin(origin, files, "initial commit")
    return origin
