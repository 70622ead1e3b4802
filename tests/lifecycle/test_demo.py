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
        "opens issue #1 “Long widget names overflow the sidebar”",
        "Cut them at 20 characters with an ellipsis.",
        "adds the label `gaffer`",
        "`draft`",
        "/approve",
        "reacts 👀",
        "gaffer/tests on",
        ": failure",
        "sends what gaffer/tests printed back to the agent",
        "AssertionError",
        "success — tests passed",
        "`in_review`",
        "/approve-diff",
        "── pull request",
        "Closes #1",
        "`pr_open`",
    ]
    positions = [out.index(step) for step in steps]
    assert positions == sorted(positions)  # the thread reads in lifecycle order
    # As a reader sees it: no hidden markers, links to the double that served it.
    assert "<!--" not in out and "<sub>" not in out
    assert "github.com" not in out and "http://127.0.0.1:" in out
