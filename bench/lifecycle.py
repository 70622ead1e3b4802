"""Lifecycle costs, each printed as a ratio measured in this run.

    .venv/bin/python bench/lifecycle.py [--plans 6] [--slots 2] [--agent-seconds 5] [--files 10000]

(a) gaffer's own overhead from `/approve` to `in_review`, with an agent and a check that
    do nothing (goal: under 1 s);
(b) N plans on K agent slots, against the ideal ceil(N/K) × agent time (goal: within 15 %);
(c) a plan's worktree ready from the warm pool, against a fresh `git worktree add` and a
    full clone, on a generated repository of about 10,000 files (goal: under 0.2 s and at
    least 20× faster than a fresh checkout);
(d) what the sandbox adds: one process started through the runner in the sandbox against
    the same process with `sandbox: none` (goal: under 50 ms more), and (a) again with the
    sandbox off beside it.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.models import PlanState  # noqa: E402
from double.demo import local_gaffer  # noqa: E402
from double.driver import IssueFlow  # noqa: E402
from tasks.isolation.runner import run_process, sandbox_env  # noqa: E402
from tasks.isolation.sandbox import Sandbox, SandboxConfig  # noqa: E402
from tasks.worktrees import WorktreePool, ensure_mirror, resolve_ref  # noqa: E402

NOOP_CHECK = "checks:\n  - name: noop\n    run: 'true'\n    timeout: 60\n"


def main() -> None:
    args = _arguments()
    with tempfile.TemporaryDirectory(prefix="gaffer-bench-") as tmp:
        overhead = _overhead(Path(tmp) / "a")
        print(
            f"(a) /approve → in_review, no-op agent and check: {overhead:.2f} s "
            f"(goal 1 s: {overhead / 1.0:.2f}× the goal)"
        )
        elapsed, ideal = _slots(Path(tmp) / "b", args)
        print(
            f"(b) {args.plans} plans on {args.slots} slots: {elapsed:.1f} s against ideal "
            f"{ideal:.1f} s — ratio {elapsed / ideal:.2f} (goal ≤ 1.15)"
        )
        boxed, bare = _process_start(Path(tmp) / "d")
        print(
            f"(d) one process start: sandboxed {boxed * 1000:.1f} ms, `sandbox: none` "
            f"{bare * 1000:.1f} ms — the sandbox adds {(boxed - bare) * 1000:.1f} ms "
            f"({boxed / bare:.1f}×; goal: under 50 ms more)"
        )
        unboxed = _overhead(Path(tmp) / "d-none", {"sandbox": "none"})
        print(
            f"    /approve → in_review: sandboxed {overhead:.2f} s, `sandbox: none` "
            f"{unboxed:.2f} s — ratio {overhead / unboxed:.2f}"
        )
        warm, fresh, clone = _worktrees(Path(tmp) / "c", args.files)
        print(
            f"(c) worktree of {args.files} files: warm pool {warm:.3f} s, fresh worktree "
            f"{fresh:.2f} s, full clone {clone:.2f} s — fresh/warm {fresh / warm:.0f}×, "
            f"clone/warm {clone / warm:.0f}× (goal: warm < 0.2 s and ≥ 20× faster)"
        )


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plans", type=int, default=6)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--agent-seconds", type=float, default=5.0)
    parser.add_argument("--files", type=int, default=10_000)
    return parser.parse_args()


def _script(seconds: float) -> str:
    steps = f"  - sleep: {seconds}\n" if seconds else ""
    return f"```gaffer-script\nexecute:\n{steps}  - write: {{path: done.txt, content: x}}\n```\n"


def _approved_to_review(flows: list[IssueFlow]) -> float:
    for flow in flows:
        flow.label()
    for flow in flows:
        flow.wait_state(PlanState.DRAFT)
    started = time.perf_counter()
    for flow in flows:
        flow.comment("/approve")
    for flow in flows:
        flow.wait_state(PlanState.IN_REVIEW, timeout=600)
    return time.perf_counter() - started


def _overhead(home: Path, server: dict | None = None) -> float:
    home.mkdir(parents=True)
    files = {".github/gaffer.yml": NOOP_CHECK, "README.md": "x\n"}
    with local_gaffer(home, files, server=server) as gaffer:
        _approved_to_review([gaffer.issue(1, "Warm up", _script(0))])
        runs = [_approved_to_review([gaffer.issue(n, f"No-op {n}", _script(0))]) for n in (2, 3, 4)]
    return sorted(runs)[1]


def _slots(home: Path, args: argparse.Namespace) -> tuple[float, float]:
    home.mkdir(parents=True)
    files = {".github/gaffer.yml": NOOP_CHECK, "README.md": "x\n"}
    with local_gaffer(home, files, agent_slots=args.slots) as gaffer:
        flows = [
            gaffer.issue(n, f"Plan {n}", _script(args.agent_seconds))
            for n in range(1, args.plans + 1)
        ]
        elapsed = _approved_to_review(flows)
    return elapsed, math.ceil(args.plans / args.slots) * args.agent_seconds


def _process_start(home: Path, runs: int = 40) -> tuple[float, float]:
    """Return the median time to run `true` through the runner, sandboxed and not."""
    worktree, job = home / "wt", home / "job"
    worktree.mkdir(parents=True)
    env = sandbox_env(allow=(), source=os.environ, home=job / "home")
    timings = {}
    for name, config in (("boxed", SandboxConfig()), ("bare", SandboxConfig(enabled=False))):
        sandbox = Sandbox(config, hidden=(home / "secret",))
        box = sandbox.box(worktree, job / "home")
        samples = []
        for _ in range(runs):
            started = time.perf_counter()
            run = run_process(
                ["true"],
                cwd=worktree,
                env=env,
                log_path=job / "log",
                timeout_s=30,
                sandbox=sandbox,
                box=box,
            )
            samples.append(time.perf_counter() - started)
            assert run.ok, run.output
        timings[name] = statistics.median(samples)
    return timings["boxed"], timings["bare"]


def _worktrees(home: Path, count: int) -> tuple[float, float, float]:
    origin = _big_origin(home, count)
    mirror = ensure_mirror(home / "gaffer", "acme/big", str(origin), None)
    base = resolve_ref(mirror, "main")
    pool = WorktreePool(home / "gaffer", "acme/big", mirror, size=2)
    started = time.perf_counter()
    pool.acquire("plan-1", base)
    fresh = time.perf_counter() - started  # the pool was empty: a fresh worktree add
    pool.release("plan-1")
    started = time.perf_counter()
    pool.acquire("plan-2", base)
    warm = time.perf_counter() - started
    started = time.perf_counter()
    subprocess.run(["git", "clone", "--quiet", str(origin), str(home / "clone")], check=True)
    clone = time.perf_counter() - started
    return warm, fresh, clone


def _big_origin(home: Path, count: int) -> Path:
    work, origin = home / "seed", home / "origin.git"
    work.mkdir(parents=True)
    for n in range(count):
        folder = work / f"pkg{n % 100:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"module{n}.py").write_text(f"VALUE = {n}\n" + "# filler\n" * 20)
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run([*git, "init", "--quiet", "--initial-branch=main"], cwd=work, check=True)
    subprocess.run([*git, "add", "--all"], cwd=work, check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "many files"], cwd=work, check=True)
    subprocess.run(["git", "clone", "--quiet", "--bare", str(work), str(origin)], check=True)
    return origin


if __name__ == "__main__":
    main()
