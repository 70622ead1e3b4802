"""Mirrors, warm worktrees and plan branches, on real git repositories."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from double.origin import commit_to_origin, make_origin
from tasks import worktrees as worktrees_module
from tasks.gitcmd import GitError, basic_auth_header, git
from tasks.recovery import strays as strays_module
from tasks.recovery.strays import worktree_mark
from tasks.worktrees import (
    PushRefused,
    WorktreeError,
    WorktreePool,
    create_branch,
    ensure_mirror,
    push_branch,
    readonly_worktree,
    reap_readonly,
    resolve_ref,
)
from tests.detached import cleaned_up, gone, killed_planner, start_detached

TOKEN = "ghs_not_a_real_token_0123456789abcdef"
FILES = {"README.md": "hello\n", ".gitignore": "build/\n", "src/app.py": "print('hi')\n"}


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    return make_origin(tmp_path, FILES)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def mirror(home: Path, origin: Path) -> Path:
    return ensure_mirror(home, "octo/demo", str(origin), None)


@pytest.fixture
def pool(home: Path, mirror: Path) -> WorktreePool:
    return WorktreePool(home, "octo/demo", mirror, size=2)


def test_mirror_is_cloned_under_home_and_fetch_sees_new_commits(home, origin, mirror):
    assert mirror == home / "mirrors" / "octo" / "demo.git"
    first = resolve_ref(mirror, "main")
    second = commit_to_origin(origin, {"NEW.md": "new\n"}, "second")
    assert resolve_ref(mirror, "main") == first
    ensure_mirror(home, "octo/demo", f"file://{origin}", None)
    assert resolve_ref(mirror, "main") == second != first


def test_jobs_that_start_together_share_a_fetch_unless_it_lacks_their_commit(
    home, origin, mirror, monkeypatch
):
    first = resolve_ref(mirror, "main")
    second = commit_to_origin(origin, {"NEW.md": "new\n"}, "second")
    monkeypatch.setattr(worktrees_module, "FETCHED_WITHIN_S", 3600.0)
    # A start that needs a commit a recent fetch brought shares that fetch...
    ensure_mirror(home, "octo/demo", str(origin), None, having=first)
    assert resolve_ref(mirror, "main") == first
    # ...one whose commit the mirror lacks fetches it, and one that names none always does.
    ensure_mirror(home, "octo/demo", str(origin), None, having=second)
    assert resolve_ref(mirror, "main") == second
    third = commit_to_origin(origin, {"THIRD.md": "3\n"}, "third")
    ensure_mirror(home, "octo/demo", str(origin), None)
    assert resolve_ref(mirror, "main") == third


def test_a_fetch_older_than_the_window_is_not_shared(home, origin, mirror, monkeypatch):
    first = resolve_ref(mirror, "main")
    second = commit_to_origin(origin, {"NEW.md": "new\n"}, "second")
    monkeypatch.setattr(worktrees_module, "FETCHED_WITHIN_S", 0.0)
    ensure_mirror(home, "octo/demo", str(origin), None, having=first)
    assert resolve_ref(mirror, "main") == second


def test_token_reaches_git_as_a_header_but_no_file_under_home(home, origin, mirror):
    ensure_mirror(home, "octo/demo", str(origin), TOKEN)
    header = git(["config", "--get", "http.extraHeader"], cwd=mirror, token=TOKEN)
    assert header == basic_auth_header(TOKEN)
    for path in home.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
            assert basic_auth_header(TOKEN).encode() not in path.read_bytes(), path


def test_git_error_never_shows_the_token(tmp_path):
    with pytest.raises(GitError) as caught:
        git(["fetch", f"file://{tmp_path}/missing-{TOKEN}.git"], cwd=tmp_path, token=TOKEN)
    assert TOKEN not in str(caught.value)


@pytest.mark.parametrize("bad", ["../evil", "octo/..", "octo", "/abs/x", "octo/a/b"])
def test_repository_names_that_escape_home_are_refused(home, origin, bad):
    with pytest.raises(WorktreeError):
        ensure_mirror(home, bad, str(origin), None)


def test_clone_url_with_credentials_is_refused(home):
    with pytest.raises(WorktreeError, match="credentials"):
        ensure_mirror(home, "octo/demo", f"https://x-access-token:{TOKEN}@github.com/o/r", None)


def test_readonly_worktree_is_removed_afterwards(home, mirror):
    sha = resolve_ref(mirror, "main")
    with readonly_worktree(mirror, sha, home) as path:
        assert (path / "README.md").read_text() == "hello\n"
        assert home in path.parents
    assert not path.exists()
    assert git(["worktree", "list", "--porcelain"], cwd=mirror).count("worktree ") == 1


def test_fresh_worktree_when_pool_is_empty(home, pool, mirror):
    sha = resolve_ref(mirror, "main")
    path = pool.acquire("plan-1", sha)
    assert (path / "src" / "app.py").exists()
    assert git(["rev-parse", "HEAD"], cwd=path) == sha
    assert home / "worktrees" in path.parents
    assert pool.leases() == {"plan-1": path}


def test_a_warmed_pool_hands_out_its_ready_worktree_and_keeps_no_more_than_its_size(
    home, pool, mirror
):
    sha = resolve_ref(mirror, "main")
    for _ in range(3):
        pool.warm(sha)
    warmed = sorted((home / "worktrees" / "octo" / "demo").glob("wt-*"))
    assert len(warmed) == 2 and pool.leases() == {}
    assert pool.acquire("plan-1", sha) in warmed
    assert git(["status", "--porcelain", "--ignored"], cwd=warmed[0]) == ""


def test_the_reaper_leaves_a_worktree_being_warmed_and_takes_one_whose_warmer_died(
    pool, mirror, monkeypatch
):
    sha = resolve_ref(mirror, "main")
    with monkeypatch.context() as warming:
        warming.setattr(pool, "release", lambda key: None)  # the warm-up is still under way
        pool.warm(sha)
    [(key, path)] = pool.leases().items()
    assert key.startswith("warming-")
    pool.reap(active_keys=set())
    assert path.exists() and pool.leases() == {key: path}
    monkeypatch.setattr(worktrees_module, "WARMING_FOR_S", 0.0)  # its warmer is long gone
    pool.reap(active_keys=set())
    assert not path.exists() and pool.leases() == {}


def test_two_plans_get_different_worktrees(pool, mirror):
    sha = resolve_ref(mirror, "main")
    assert pool.acquire("plan-1", sha) != pool.acquire("plan-2", sha)


def test_same_plan_gets_its_worktree_back(pool, mirror):
    sha = resolve_ref(mirror, "main")
    assert pool.acquire("plan-1", sha) == pool.acquire("plan-1", sha)


def test_reused_worktree_is_clean(pool, mirror):
    sha = resolve_ref(mirror, "main")
    path = pool.acquire("plan-1", sha)
    (path / "src" / "app.py").write_text("changed\n")
    (path / "untracked.txt").write_text("x")
    (path / "build").mkdir()
    (path / "build" / "out.o").write_text("ignored")
    create_branch(path, "gaffer/1-demo", sha)
    pool.release("plan-1")

    again = pool.acquire("plan-2", sha)

    assert again == path
    assert (again / "src" / "app.py").read_text() == "print('hi')\n"
    assert not (again / "untracked.txt").exists()
    assert not (again / "build").exists()
    assert git(["status", "--porcelain", "--ignored"], cwd=again) == ""


def test_release_removes_worktree_when_pool_is_full(pool, mirror):
    sha = resolve_ref(mirror, "main")
    paths = [pool.acquire(f"plan-{i}", sha) for i in range(3)]
    for i in range(3):
        pool.release(f"plan-{i}")
    assert [p.exists() for p in paths] == [True, True, False]
    assert pool.leases() == {}


def _commit_in(path: Path, name: str) -> str:
    (path / name).write_text("work\n")
    git(["add", name], cwd=path)
    git(["commit", "--quiet", "-m", f"add {name}"], cwd=path)
    return git(["rev-parse", "HEAD"], cwd=path)


def test_reap_keeps_unpushed_work_and_drops_pushed_branches(pool, mirror, origin):
    sha = resolve_ref(mirror, "main")
    pushed = pool.acquire("plan-pushed", sha)
    create_branch(pushed, "gaffer/1-pushed", sha)
    _commit_in(pushed, "a.txt")
    push_branch(pushed, "gaffer/1-pushed", str(origin), None, set(), "main")
    unpushed = pool.acquire("plan-unpushed", sha)
    create_branch(unpushed, "gaffer/2-unpushed", sha)
    _commit_in(unpushed, "b.txt")
    active = pool.acquire("plan-active", sha)

    report = pool.reap({"plan-active"})

    assert sorted(report.removed) == ["plan-pushed", "plan-unpushed"]
    assert report.kept_branches == ["gaffer/2-unpushed"]
    assert not pushed.exists() and not unpushed.exists() and active.exists()
    branches = git(["branch", "--format=%(refname:short)"], cwd=mirror).split()
    assert branches == ["gaffer/2-unpushed"]


def test_fetch_does_not_remove_unpushed_branch(home, pool, mirror, origin):
    sha = resolve_ref(mirror, "main")
    path = pool.acquire("plan-1", sha)
    create_branch(path, "gaffer/3-local", sha)
    head = _commit_in(path, "c.txt")
    ensure_mirror(home, "octo/demo", str(origin), None)
    assert resolve_ref(mirror, "refs/heads/gaffer/3-local") == head


def test_create_branch_refuses_to_discard_unpushed_commits(pool, mirror):
    sha = resolve_ref(mirror, "main")
    path = pool.acquire("plan-1", sha)
    create_branch(path, "gaffer/4-x", sha)
    _commit_in(path, "d.txt")
    with pytest.raises(WorktreeError, match="unpushed"):
        create_branch(path, "gaffer/4-x", sha)


def test_push_updates_origin_and_tracking_ref(pool, mirror, origin):
    sha = resolve_ref(mirror, "main")
    path = pool.acquire("plan-1", sha)
    create_branch(path, "gaffer/5-push", sha)
    head = _commit_in(path, "e.txt")
    assert push_branch(path, "gaffer/5-push", str(origin), None, set(), "main") == head
    assert git(["rev-parse", "refs/heads/gaffer/5-push"], cwd=origin) == head
    assert resolve_ref(mirror, "gaffer/5-push") == head


@pytest.mark.parametrize(
    "branch, protected",
    [
        pytest.param("main", set(), id="default branch"),
        pytest.param("refs/heads/main", set(), id="default branch as a full ref"),
        pytest.param("release", {"release"}, id="protected branch"),
        pytest.param("release/1.2", {"release/*"}, id="protected pattern"),
    ],
)
def test_push_refuses_default_and_protected_branches(pool, mirror, origin, branch, protected):
    path = pool.acquire("plan-1", resolve_ref(mirror, "main"))
    with pytest.raises(PushRefused):
        push_branch(path, branch, str(origin), None, protected, "main")


def test_worktree_deleted_behind_gaffers_back_is_recreated(pool, mirror):
    sha = resolve_ref(mirror, "main")
    path = pool.acquire("plan-1", sha)
    shutil.rmtree(path)
    assert pool.acquire("plan-1", sha) == path
    assert (path / "README.md").exists()


# --------------------------------------------------------------------------- what jobs leave


@pytest.fixture
def strays() -> Iterator[list[int]]:
    """Pids the test left running on purpose; killed afterwards should the test fail."""
    with cleaned_up([]) as pids:
        yield pids


def discard(pool: WorktreePool, key: str) -> None:
    pool.discard(key)


def reap(pool: WorktreePool, key: str) -> None:
    pool.reap(active_keys=set())


def release(pool: WorktreePool, key: str) -> None:
    pool.release(key)


def acquire_again(pool: WorktreePool, key: str) -> None:
    pool.acquire(key, resolve_ref(pool.mirror, "main"))


@pytest.mark.parametrize(
    ("ending", "worktree_stays"),
    [
        pytest.param(discard, False, id="a discarded worktree"),
        pytest.param(reap, False, id="a reaped worktree"),
        pytest.param(release, True, id="a worktree released to the pool"),
        pytest.param(acquire_again, True, id="a worktree taken again after its worker died"),
    ],
)
def test_processes_a_job_left_in_its_worktree_are_killed(
    pool, mirror, strays, ending, worktree_stays
):
    path = pool.acquire("plan-1", resolve_ref(mirror, "main"))
    strays.append(start_detached(path / "src"))
    assert not gone(strays[0])

    ending(pool, "plan-1")

    assert gone(strays[0])
    assert path.exists() == worktree_stays


def test_a_readonly_worktree_ends_with_the_processes_started_in_it(home, mirror, strays):
    with readonly_worktree(mirror, resolve_ref(mirror, "main"), home) as path:
        strays.append(start_detached(path))
    assert gone(strays[0])
    assert not path.exists()


def test_processes_elsewhere_are_left_alone(pool, mirror, strays, tmp_path):
    path = pool.acquire("plan-1", resolve_ref(mirror, "main"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    strays.append(start_detached(elsewhere))
    pool.discard("plan-1")
    assert not path.exists()
    assert not gone(strays[0])


def test_a_process_that_left_the_worktree_is_found_by_its_mark(pool, mirror, strays, tmp_path):
    path = pool.acquire("plan-1", resolve_ref(mirror, "main"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    marked = {**os.environ, **worktree_mark(path)}
    strays.append(start_detached(elsewhere, env=marked))  # started for the job, then moved
    strays.append(start_detached(elsewhere))  # someone else's
    pool.discard("plan-1")
    assert (gone(strays[0]), gone(strays[1])) == (True, False)


def test_the_reaper_keeps_a_readonly_worktree_whose_planner_lives(home, mirror):
    with readonly_worktree(mirror, resolve_ref(mirror, "main"), home) as path:
        assert reap_readonly(home) == []
        assert (path / "README.md").exists()


def test_the_reaper_removes_a_readonly_worktree_whose_planner_was_killed(home, mirror, strays):
    path, stray = killed_planner(mirror, resolve_ref(mirror, "main"), home)
    strays.append(stray)
    assert path.exists() and not gone(stray)

    assert reap_readonly(home) == [path.name]

    assert not path.exists() and gone(stray)
    assert list(path.parent.glob("*.owner")) == []
    assert git(["worktree", "list", "--porcelain"], cwd=mirror).count("worktree ") == 1


def test_the_reaper_removes_a_readonly_worktree_nobody_claims(home, mirror):
    # As left by a gaffer that kept no owner file, or a crash mid-way.
    path = home / "worktrees" / ".readonly" / "left-behind"
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("old\n")
    assert reap_readonly(home) == ["left-behind"]
    assert not path.exists()


def test_without_proc_a_worktree_is_still_removed(pool, mirror, tmp_path, monkeypatch):
    monkeypatch.setattr(strays_module, "PROC", tmp_path / "no-proc")
    path = pool.acquire("plan-1", resolve_ref(mirror, "main"))
    pool.discard("plan-1")
    assert not path.exists()


def test_the_reaper_runs_git_only_in_gaffers_own_mirrors(home, mirror, tmp_path):
    # An agent rewrote the orphan's `.git` to point at a repository of its choosing.
    planted = tmp_path / "planted.git"
    git(["init", "--bare", "--quiet", str(planted)], cwd=tmp_path)
    (planted / "worktrees" / "orphan").mkdir(parents=True)
    path = home / "worktrees" / ".readonly" / "orphan"
    path.mkdir(parents=True)
    (path / ".git").write_text(f"gitdir: {planted / 'worktrees' / 'orphan'}\n")
    assert reap_readonly(home) == ["orphan"]
    assert not path.exists()
    assert (planted / "worktrees" / "orphan").is_dir()  # no `git worktree prune` ran there
