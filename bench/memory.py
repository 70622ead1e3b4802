"""Memory, measured: how similar plans do on their checks with and without a kept lesson.

    .venv/bin/python bench/memory.py [--issues 5]

Two runs of the same replay (double/replay.py), each on a fresh gaffer and repository. In
both, a reviewer's `/revise` on issue 1 teaches that sidebar labels are shortened with
clip(), and issue 1's plan merges. In one run a writer keeps the lesson (`/keep`); in the
other nobody does. Issues 2..N are similar and never mention clip(); their scripted agent
passes the `labels` check on the first try only when its prompt says so. Printed per run:
first-pass check success and fix rounds over issues 2..N, side by side.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from double import replay  # noqa: E402
from double.demo import local_gaffer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--issues", type=int, default=5)
    issues = parser.parse_args().issues
    results = {}
    with tempfile.TemporaryDirectory(prefix="gaffer-bench-") as tmp:
        for kept in (True, False):
            results[kept] = _run(Path(tmp) / ("kept" if kept else "not-kept"), issues, kept)
    similar = issues - 1
    print(f"Similar plans after the lesson was taught: {similar} (issues 2..{issues})")
    print(f"{'':22} {'first-pass checks':>18} {'fix rounds':>11} {'lessons used':>13}")
    for kept, outcomes in results.items():
        passed = sum(o.first_pass for o in outcomes)
        rounds = sum(o.fix_rounds for o in outcomes)
        used = sum(o.lessons_used for o in outcomes)
        name = "lesson kept" if kept else "lesson not kept"
        share = f"{passed}/{similar} ({passed / similar:.0%})"
        print(f"{name:22} {share:>18} {rounds:>11} {used:>13}")
    saved = sum(o.fix_rounds for o in results[False]) - sum(o.fix_rounds for o in results[True])
    print(f"Fix rounds saved by the kept lesson: {saved} of {similar} plans")


def _run(home: Path, issues: int, kept: bool) -> list[replay.Outcome]:
    home.mkdir(parents=True)
    with local_gaffer(home, replay.FILES) as gaffer:
        first = gaffer.issue(1, *replay.similar_issue(1))
        lesson = replay.teach(first)
        if kept:
            replay.keep(first, lesson)
        return replay.run_similar(
            lambda n: gaffer.issue(n, *replay.similar_issue(n)), range(2, issues + 1)
        )


if __name__ == "__main__":
    main()
