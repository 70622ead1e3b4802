"""Own gaffer's git mirrors, plan worktrees and plan branches under GAFFER_HOME.

Layout under home:
  mirrors/<owner>/<name>.git        bare mirror; origin's branches live in refs/remotes/origin/*
  mirrors/<owner>/<name>.git.lock   flock held while the mirror or its worktree list changes
  worktrees/<owner>/<name>/wt-*     warm worktrees; `wt-*.lease.json` says which plan holds one
  worktrees/.readonly/*             short-lived detached worktrees for planning; `*.owner` is
                                    flocked by the planner while it lives, so the reaper can
                                    tell an orphan from a worktree in use

Plan branches are local `refs/heads/*` of the mirror, so fetching origin (with --prune)
never moves or deletes a branch holding work that was not pushed yet.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import json
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tasks.gitcmd import GitError, git
from tasks.recovery.strays import kill_processes_in

ORIGIN = "refs/remotes/origin"
OWNER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
# A fetch this recent already brought origin's branches (ensure_mirror).
FETCHED_WITHIN_S = 2.0
# A pool's worktree being readied ahead of any plan (WorktreePool.warm); older than this,
# its warmer died and the reaper takes it.
WARMING = "warming-"
WARMING_FOR_S = 300.0


class WorktreeError(Exception):
    """A mirror, worktree or branch could not be prepared safely."""


class PushRefused(WorktreeError):
    """gaffer was asked to push to the default branch or a protected branch."""


@dataclass
class ReapReport:
    """What a reap removed and which unpushed branches it kept."""

    removed: list[str] = field(default_factory=list)
    kept_branches: list[str] = field(default_factory=list)


@contextmanager
def locked(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive flock on lock_path, shared by every worker process on the machine."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def plan_key(plan_id: int, candidate: int | None = None) -> str:
    """Return the key a plan's worktree (or one candidate's) is leased under in its
    repository's pool."""
    return f"plan-{plan_id}" if candidate is None else f"plan-{plan_id}-c{candidate}"


def split_full_name(full_name: str) -> tuple[str, str]:
    """Split 'owner/name', refusing anything that could escape the home directory."""
    owner, _, name = full_name.partition("/")
    if not OWNER.match(owner) or not NAME.match(name) or name in (".", ".."):
        raise WorktreeError(f"not a repository name: {full_name!r}")
    return owner, name


def mirror_path(home: Path, full_name: str) -> Path:
    """Return where the mirror of a repository lives."""
    owner, name = split_full_name(full_name)
    return home / "mirrors" / owner / f"{name}.git"


def mirrors(home: Path) -> Iterator[tuple[str, Path]]:
    """Yield (owner/name, path) of every repository mirror under home."""
    for mirror in sorted((home / "mirrors").glob("*/*.git")):
        full_name = f"{mirror.parent.name}/{mirror.name.removesuffix('.git')}"
        try:
            split_full_name(full_name)
        except WorktreeError:
            continue
        if (mirror / "HEAD").is_file():
            yield full_name, mirror


def _mirror_lock(mirror: Path) -> Path:
    return mirror.with_name(mirror.name + ".lock")


def _check_url(clone_url: str) -> None:
    """Refuse clone URLs with embedded credentials: they would be stored in git config."""
    if "@" in urlsplit(clone_url).netloc:
        raise WorktreeError("clone URL must not carry credentials; pass the token separately")


def ensure_mirror(
    home: Path, full_name: str, clone_url: str, token: str | None, *, having: str | None = None
) -> Path:
    """Create the repository's bare mirror on first use and fetch origin into it.

    With having (a commit the caller needs), a mirror that holds it and fetched within
    FETCHED_WITHIN_S is left as it is: jobs that start together share one fetch instead of
    taking turns at the lock for one each.
    """
    _check_url(clone_url)
    mirror = mirror_path(home, full_name)
    with locked(_mirror_lock(mirror)):
        if not (mirror / "HEAD").exists():
            mirror.mkdir(parents=True, exist_ok=True)
            git(["init", "--bare", "--quiet"], cwd=mirror)
        _write_mirror_config(mirror, clone_url)
        if having and _fetched_lately(mirror) and _holds(mirror, having):
            return mirror
        git(["fetch", "--prune", "--no-tags", "--quiet", "origin"], cwd=mirror, token=token)
    return mirror


def _fetched_lately(mirror: Path) -> bool:
    """Tell whether the mirror fetched within FETCHED_WITHIN_S (each fetch writes FETCH_HEAD)."""
    try:
        return time.time() - (mirror / "FETCH_HEAD").stat().st_mtime < FETCHED_WITHIN_S
    except FileNotFoundError:
        return False


def _holds(mirror: Path, sha: str) -> bool:
    """Tell whether the mirror has the commit named by a full sha (a branch name never)."""
    try:
        return bool(SHA.match(sha)) and resolve_ref(mirror, sha) == sha
    except WorktreeError:
        return False


def _write_mirror_config(mirror: Path, clone_url: str) -> None:
    """Write the mirror's whole config: nothing that was added to it survives a fetch."""
    if any(c in clone_url for c in '"\\\n'):
        raise WorktreeError(f"clone URL cannot be written to git config: {clone_url!r}")
    config = (
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n"
        f'[remote "origin"]\n\turl = {clone_url}\n'
        "\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
    )
    temp = mirror / "config.gaffer-tmp"
    temp.write_text(config)
    os.replace(temp, mirror / "config")


def resolve_ref(mirror: Path, ref: str) -> str:
    """Return the commit sha of a sha, a full ref, or a branch name on origin."""
    exact = SHA.match(ref) or ref.startswith("refs/")
    candidates = [ref] if exact else [f"{ORIGIN}/{ref}", ref]
    for candidate in candidates:
        try:
            return git(["rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}"], cwd=mirror)
        except GitError:
            continue
    raise WorktreeError(f"{ref!r} not found in {mirror.name}")


def _add_worktree(mirror: Path, path: Path, sha: str) -> None:
    """Check out a new detached worktree of the mirror at path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(_mirror_lock(mirror)):
        # A worktree whose folder vanished (crash, manual cleanup) is still registered.
        git(["worktree", "prune"], cwd=mirror)
        git(["worktree", "add", "--detach", "--quiet", str(path), sha], cwd=mirror)


def _remove_worktree(mirror: Path, path: Path) -> None:
    """Remove a worktree and its administrative files, even when it is damaged."""
    # A dead agent's grandchildren (a server, a watcher) may still run in it.
    kill_processes_in(path)
    with locked(_mirror_lock(mirror)):
        try:
            git(["worktree", "remove", "--force", "--force", str(path)], cwd=mirror)
        except GitError:
            shutil.rmtree(path, ignore_errors=True)
        git(["worktree", "prune"], cwd=mirror)


def _readonly_root(home: Path) -> Path:
    return home / "worktrees" / ".readonly"


@contextmanager
def readonly_worktree(mirror: Path, sha: str, home: Path) -> Iterator[Path]:
    """Yield a detached worktree at sha for planning, removed afterwards."""
    path = _readonly_root(home) / uuid.uuid4().hex
    with _owned(path):
        _add_worktree(mirror, path, sha)
        try:
            yield path
        finally:
            _remove_worktree(mirror, path)


@contextmanager
def _owned(path: Path) -> Iterator[None]:
    """Hold a flock on path's owner file while the block runs; the kernel drops it on death."""
    owner = _owner_file(path)
    area = path.parent / ".lock"
    # Under the area lock, the reaper never sees the owner file before it is locked.
    with locked(area):
        handle = open(owner, "a")  # noqa: SIM115 - held open for the whole block
        fcntl.flock(handle, fcntl.LOCK_EX)
    try:
        yield
    finally:
        with locked(area):
            owner.unlink(missing_ok=True)
            handle.close()


def _owner_file(path: Path) -> Path:
    return path.with_name(path.name + ".owner")


def _owner_alive(path: Path) -> bool:
    """Return True while a live process holds the read-only worktree's owner file."""
    try:
        handle = open(_owner_file(path), "r+")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


def reap_readonly(home: Path) -> list[str]:
    """Remove read-only worktrees whose planner died; return their names."""
    root = _readonly_root(home)
    if not root.is_dir():
        return []
    with locked(root / ".lock"):
        names = {p.name.removesuffix(".owner") for p in root.iterdir() if p.name != ".lock"}
        orphans = sorted(name for name in names if not _owner_alive(root / name))
        for name in orphans:
            _remove_orphan(root / name, home)
    return orphans


def _remove_orphan(path: Path, home: Path) -> None:
    """Remove a read-only worktree nobody owns, with its owner file and its processes."""
    mirror = _mirror_of(path, home)
    if mirror is not None:
        _remove_worktree(mirror, path)
    else:
        kill_processes_in(path)
        shutil.rmtree(path, ignore_errors=True)
    _owner_file(path).unlink(missing_ok=True)


def _mirror_of(worktree: Path, home: Path) -> Path | None:
    """Return the mirror under home a worktree belongs to, from its `.git` file, or None."""
    try:
        gitdir = (worktree / ".git").read_text().removeprefix("gitdir:").strip()
    except OSError:
        return None
    # The agent could have rewritten `.git`: git runs only in one of gaffer's own mirrors.
    mirror = Path(gitdir).resolve().parent.parent
    mirrors = (home / "mirrors").resolve()
    return mirror if mirror.parent.parent == mirrors and (mirror / "HEAD").is_file() else None


def git_dirs(worktree: Path, home: Path) -> list[Path]:
    """Return the git folders an agent needs to read its worktree's history: the mirror."""
    mirror = _mirror_of(worktree, home)
    return [mirror] if mirror is not None else []


def admin_dir(worktree: Path) -> Path:
    """Return a pool worktree's git folder in gaffer's mirror, never trusting its `.git`.

    The folder follows from the pool's layout (home/worktrees/<owner>/<name>/wt-*), and git
    wrote a pointer back to the worktree into it, which the sandbox cannot change.
    """
    if not _in_pool(worktree):
        raise WorktreeError(f"{worktree} is not a worktree of gaffer's pools")
    home, owner, name = worktree.parents[3], worktree.parents[1].name, worktree.parent.name
    gitdir = mirror_path(home, f"{owner}/{name}") / "worktrees" / worktree.name
    try:
        back = Path((gitdir / "gitdir").read_text().strip())
    except OSError as error:
        raise WorktreeError(f"worktree {worktree.name} has no git folder: {error}") from error
    if back.resolve() != (worktree / ".git").resolve():
        raise WorktreeError(f"git folder {gitdir} belongs to another worktree")
    return gitdir


def worktree_git(worktree: Path, args: list[str], **options: Any) -> str:
    """Run git in a pool worktree with its git folder named by gaffer, not by `.git`."""
    return git(args, cwd=worktree, git_dir=admin_dir(worktree), **options)


def repair_gitfile(worktree: Path) -> None:
    """Point the worktree's `.git` at its git folder again, whatever the agent left there."""
    gitfile = worktree / ".git"
    wanted = f"gitdir: {admin_dir(worktree)}\n"
    if gitfile.is_dir() and not gitfile.is_symlink():
        shutil.rmtree(gitfile)
    elif gitfile.is_symlink() or (gitfile.exists() and gitfile.read_text() != wanted):
        gitfile.unlink()
    if not gitfile.exists():
        gitfile.write_text(wanted)


def _in_pool(path: Path) -> bool:
    """Tell a pool worktree (home/worktrees/<owner>/<name>/wt-*) by its place, not its files."""
    return len(path.parents) > 3 and path.parents[2].name == "worktrees"


def _git_in(cwd: Path, args: list[str], **options: Any) -> str:
    """Run git in a mirror, or in a pool worktree through its git folder.

    Which one is told by the path: what a worktree holds is the agent's to change.
    """
    if _in_pool(cwd):
        return worktree_git(cwd, args, **options)
    return git(args, cwd=cwd, **options)


def _has_git_folder(worktree: Path) -> bool:
    try:
        admin_dir(worktree)
    except WorktreeError:
        return False
    return worktree.is_dir()


def _ref_exists(cwd: Path, ref: str) -> bool:
    try:
        _git_in(cwd, ["show-ref", "--verify", "--quiet", ref])
    except GitError:
        return False
    return True


def unpushed_commits(cwd: Path, branch: str, *also_known: str) -> int:
    """Count commits on a local branch that no origin ref (nor also_known) contains."""
    if not _ref_exists(cwd, f"refs/heads/{branch}"):
        return 0
    args = ["rev-list", "--count", f"refs/heads/{branch}", "--not", "--remotes=origin"]
    return int(_git_in(cwd, [*args, *also_known]))


def current_branch(worktree: Path) -> str | None:
    """Return the branch checked out in a worktree, or None when detached."""
    try:
        ref = worktree_git(worktree, ["symbolic-ref", "--quiet", "HEAD"])
    except (GitError, WorktreeError):
        return None
    return ref.removeprefix("refs/heads/")


def _drop_branch_if_pushed(mirror: Path, branch: str | None) -> str | None:
    """Delete a local branch that origin already has; return its name when it was kept."""
    if branch is None:
        return None
    if unpushed_commits(mirror, branch):
        return branch
    # Deleting fails while the branch is checked out elsewhere; its owner cleans it up.
    with contextlib.suppress(GitError):
        git(["branch", "--quiet", "-D", branch], cwd=mirror)
    return None


def create_branch(worktree: Path, branch: str, base_sha: str) -> None:
    """Check out branch at base_sha, refusing to discard commits that were never pushed."""
    worktree_git(worktree, ["check-ref-format", "--branch", branch])
    if unpushed_commits(worktree, branch, base_sha):
        raise WorktreeError(f"branch {branch!r} holds unpushed commits not in {base_sha[:12]}")
    worktree_git(worktree, ["checkout", "--quiet", "--force", "-B", branch, base_sha])


def is_protected(branch: str, protected: set[str], default_branch: str) -> bool:
    """Return True for the default branch and branches matching a protected name or pattern."""
    name = branch.removeprefix("refs/heads/")
    return name == default_branch or any(fnmatch.fnmatchcase(name, p) for p in protected)


def push_branch(
    mirror_or_worktree: Path,
    branch: str,
    clone_url: str,
    token: str | None,
    protected: set[str],
    default_branch: str,
    *,
    force: bool = False,
) -> str:
    """Push a plan branch to origin and return the pushed sha; never the default or protected."""
    if is_protected(branch, protected, default_branch):
        raise PushRefused(f"gaffer never pushes to {branch!r}: default or protected branch")
    _check_url(clone_url)
    cwd = mirror_or_worktree
    if (cwd / "HEAD").is_file():
        # Whatever was added to the mirror's config since the fetch (an insteadOf, a
        # pushurl) is gone before the token is sent.
        with locked(_mirror_lock(cwd)):
            _write_mirror_config(cwd, clone_url)
    sha = _git_in(cwd, ["rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}"])
    refspec = f"{'+' if force else ''}refs/heads/{branch}:refs/heads/{branch}"
    _git_in(cwd, ["push", "--quiet", "--no-verify", clone_url, refspec], token=token)
    _git_in(cwd, ["update-ref", f"{ORIGIN}/{branch}", sha])
    return sha


def _reset_clean(worktree: Path, sha: str) -> None:
    """Detach at sha, drop every change and untracked or ignored file, and verify it."""
    # A forced checkout resets every tracked file; clean removes the rest, ignored included.
    repair_gitfile(worktree)
    worktree_git(worktree, ["checkout", "--quiet", "--detach", "--force", sha])
    worktree_git(worktree, ["clean", "-ffdxq"])
    leftover = worktree_git(worktree, ["status", "--porcelain", "--ignored"])
    if leftover:
        raise WorktreeError(f"worktree {worktree.name} is not clean after reset: {leftover[:200]}")


class WorktreePool:
    """Keep a few warm worktrees of one repository and lease them to plans."""

    def __init__(self, home: Path, full_name: str, mirror: Path, size: int = 3) -> None:
        owner, name = split_full_name(full_name)
        self.root = home / "worktrees" / owner / name
        self.mirror = mirror
        self.size = size
        self._lock = self.root / ".pool.lock"

    def acquire(self, plan_key: str, base_sha: str) -> Path:
        """Lease a clean worktree at base_sha to plan_key (the same one if it holds one)."""
        with locked(self._lock):
            path = self._leased_to(plan_key) or self._claim(plan_key)
        return self._readied(plan_key, path, base_sha)

    def warm(self, sha: str) -> None:
        """Leave one more clean worktree free in the pool (up to its size), checked out at sha,
        so that the next plan to execute finds one ready instead of checking one out while
        its approver waits."""
        key = f"{WARMING}{uuid.uuid4().hex[:12]}"
        with locked(self._lock):
            if len(self._free_paths()) >= self.size:
                return
            path = self._claim(key, fresh=True)
        self._readied(key, path, sha)
        self.release(key)

    def _readied(self, key: str, path: Path, sha: str) -> Path:
        """Make the worktree leased to key clean at sha, or remove it when it cannot be."""
        try:
            self._prepare(path, sha)
        except (GitError, WorktreeError):
            self.discard(key)
            raise
        return path

    def release(self, plan_key: str) -> None:
        """Return a plan's worktree to the pool clean, or remove it when the pool is full."""
        with locked(self._lock):
            path = self._leased_to(plan_key)
            if path is None:
                return
            branch = current_branch(path)
            kill_processes_in(path)
            try:
                _reset_clean(path, "HEAD")
            except (GitError, WorktreeError):
                self._remove(path)
                return
            _drop_branch_if_pushed(self.mirror, branch)
            if len(self._free_paths()) >= self.size:
                self._remove(path)
            else:
                self._lease_file(path).unlink()

    def discard(self, plan_key: str) -> str | None:
        """Remove a plan's worktree; return its branch when kept for unpushed work."""
        with locked(self._lock):
            path = self._leased_to(plan_key)
            return self._remove(path) if path is not None else None

    def reap(self, active_keys: set[str]) -> ReapReport:
        """Remove worktrees leased to inactive plans; keep and report unpushed branches."""
        report = ReapReport()
        with locked(self._lock):
            for path, key in self._leases():
                if key not in active_keys and not self._warming(path, key):
                    self._remove(path)
                    report.removed.append(key)
            report.kept_branches = self._sweep_branches()
        return report

    def leases(self) -> dict[str, Path]:
        """Return the plan keys holding a worktree, with their paths."""
        return {key: path for path, key in self._leases()}

    def _claim(self, plan_key: str, *, fresh: bool = False) -> Path:
        free = [] if fresh else self._free_paths()
        path = free[0] if free else self.root / f"wt-{uuid.uuid4().hex[:12]}"
        self._write_lease(path, plan_key)
        return path

    def _prepare(self, path: Path, base_sha: str) -> None:
        # What an earlier job of the plan left running (its worker died) must not see this one.
        kill_processes_in(path)
        if not _has_git_folder(path):
            shutil.rmtree(path, ignore_errors=True)
            _add_worktree(self.mirror, path, base_sha)
        _reset_clean(path, base_sha)

    def _remove(self, path: Path) -> str | None:
        """Remove a worktree and its lease; return its branch when kept for unpushed work."""
        branch = current_branch(path) if _has_git_folder(path) else None
        _remove_worktree(self.mirror, path)
        self._lease_file(path).unlink(missing_ok=True)
        return _drop_branch_if_pushed(self.mirror, branch)

    def _sweep_branches(self) -> list[str]:
        """Delete local branches origin already has; return those holding unpushed work."""
        out = git(["for-each-ref", "--format=%(refname:short)", "refs/heads/"], cwd=self.mirror)
        kept = [_drop_branch_if_pushed(self.mirror, b) for b in out.splitlines() if b]
        return [b for b in kept if b is not None]

    def _lease_file(self, path: Path) -> Path:
        return path.with_name(path.name + ".lease.json")

    def _write_lease(self, path: Path, plan_key: str) -> None:
        record = {
            "plan_key": plan_key,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "leased_at": time.time(),
        }
        target = self._lease_file(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_suffix(".tmp")
        temp.write_text(json.dumps(record))
        os.replace(temp, target)

    def _warming(self, path: Path, key: str) -> bool:
        """Tell whether a live warm-up holds the worktree (its lease is young)."""
        if not key.startswith(WARMING):
            return False
        try:
            leased_at = float(json.loads(self._lease_file(path).read_text())["leased_at"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return time.time() - leased_at < WARMING_FOR_S

    def _leases(self) -> list[tuple[Path, str]]:
        found = []
        for lease in sorted(self.root.glob("wt-*.lease.json")):
            try:
                key = str(json.loads(lease.read_text())["plan_key"])
            except (OSError, ValueError, KeyError):
                key = ""
            found.append((lease.with_name(lease.name.removesuffix(".lease.json")), key))
        return found

    def _leased_to(self, plan_key: str) -> Path | None:
        return next((path for path, key in self._leases() if key == plan_key), None)

    def _free_paths(self) -> list[Path]:
        leased = {path for path, _ in self._leases()}
        slots = sorted(p for p in self.root.glob("wt-*") if p.is_dir())
        return [p for p in slots if p not in leased]
