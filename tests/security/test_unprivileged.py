"""The sandbox as a worker that is not root makes it (the deploy's container image)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tasks.isolation import sandbox as sandbox_module
from tasks.isolation.sandbox import Box, Sandbox, SandboxConfig

WORKER_UID = 1500  # an unprivileged worker, as in deploy/Dockerfile
INSIDE = (
    "id -u; tr '\\0' ' ' < /proc/1/cmdline | cut -d' ' -f1; "
    "[ -e /proc/{worker} ] && echo seen || echo unseen; grep -c ':' /proc/net/dev; "
    "echo made > made.txt; ls {hidden} 2>&1; true"
)


@pytest.fixture
def worker_folder() -> Iterator[Path]:
    """A folder the unprivileged worker can reach (pytest's own is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="gaffer-unprivileged-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def test_a_worker_that_is_not_root_isolates_its_runs(worker_folder: Path, monkeypatch) -> None:
    tmp_path = worker_folder
    worktree, home, run_dir, hidden = (tmp_path / n for n in ("wt", "home", "run", "hidden"))
    for folder in (worktree, home, run_dir, hidden):
        folder.mkdir()
        os.chown(folder, WORKER_UID, WORKER_UID)
    (hidden / "key.pem").write_text("key")
    # The worker's own Python lives where this unprivileged uid cannot look: only /usr.
    monkeypatch.setattr(sandbox_module, "_toolchain", lambda *args: [])
    box = Box(worktree, home)
    command = ["sh", "-c", INSIDE.format(hidden=hidden, worker=os.getpid())]
    launch = Sandbox(SandboxConfig())._launch(
        command, {"PATH": "/usr/bin:/bin"}, box, run_dir, None, None, as_root=False
    )
    done = subprocess.run(
        [
            "setpriv",
            f"--reuid={WORKER_UID}",
            f"--regid={WORKER_UID}",
            "--clear-groups",
            "--",
            *launch.argv,
        ],
        env=launch.env,
        cwd=worktree,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    uid, first, worker, interfaces, listing = done.stdout.splitlines()[:5]
    assert uid == str(SandboxConfig().uid)  # its own identity inside
    assert first == "bwrap"  # PID 1 is the sandbox's own: a PID namespace
    assert worker == "unseen"  # the worker's process is not there to read
    assert interfaces == "1"  # loopback only: no way out
    assert "No such file or directory" in listing  # gaffer's files are not in its view
    assert (worktree / "made.txt").stat().st_uid == WORKER_UID  # owned by the worker outside
