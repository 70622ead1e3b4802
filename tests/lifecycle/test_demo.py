"""`gaffer demo` runs the whole lifecycle with no account and prints the thread."""

from __future__ import annotations

import subprocess
import sys


def test_demo_prints_the_thread_from_label_to_pull_request() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "demo"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    steps = [
        "adds the label `gaffer`",
        "`draft`",
        "/approve",
        "gaffer/tests",
        "`in_review`",
        "/approve-diff",
        "── pull request",
        "`pr_open`",
    ]
    positions = [out.index(step) for step in steps]
    assert positions == sorted(positions)  # the thread reads in lifecycle order
    assert "gaffer/tests on" in out and ": failure" in out and ": success" in out
