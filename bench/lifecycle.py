"""Lifecycle costs, each printed as a ratio measured in this run.

    .venv/bin/python bench/lifecycle.py [--plans 6] [--slots 2] [--agent-seconds 5] [--files 10000]
                                        [--parts abcd] [--runs 1] [--services]
                                        [--agent shell|script]

(a) gaffer's own overhead from `/approve` to `in_review`, with an agent and a check that
    do nothing (goal: under 1 s);
(b) N plans on K agent slots, from their `/approve` to every issue labelled `in_review`,
    against the ideal ceil(N/K) × agent time (goal: within 10 %), run --runs times, each
    with a gaffer of its own (on its embedded default, or with --services on PostgreSQL and
    Redis, as bench/intake.py finds them); with the GitHub requests a plan costs from
    `/approve` to its job's end, by endpoint. The agent is a shell script that sleeps for
    the agent time, so the agent takes that long and no more; `--agent script` runs
    gaffer's Python script agent instead, whose own start (a Python interpreter and its
    imports) then counts against gaffer. In (a) and (b) the GitHub double does not check
    requests against GitHub's description (the tests do): its time stands for GitHub's,
    which is not spent on gaffer's cores;
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
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.intake import REDIS, drop_database, fresh_database  # noqa: E402
from bot.github import LABEL_PREFIX  # noqa: E402
from bot.models import Job, JobState, PlanState  # noqa: E402
from double.app import GitHubState, RecordedRequest  # noqa: E402
from double.demo import LocalGaffer, local_gaffer  # noqa: E402
from double.driver import IssueFlow  # noqa: E402
from tasks.isolation.runner import run_process, sandbox_env  # noqa: E402
from tasks.isolation.sandbox import Sandbox, SandboxConfig  # noqa: E402
from tasks.worktrees import WorktreePool, ensure_mirror, resolve_ref  # noqa: E402

NOOP_CHECK = "checks:\n  - name: noop\n    run: 'true'\n    timeout: 60\n"
# (b)'s agent: it plans at once, and its execution sleeps for the agent time, then writes.
SLEEPER = (
    'if [ "$GAFFER_STAGE" = execute ]; then sleep "$BENCH_AGENT_S"; echo x > done.txt; '
    "else printf '## Plan\\n\\nWrite done.txt.\\n'; fi"
)


def main() -> None:
    args = _arguments()
    with tempfile.TemporaryDirectory(prefix="gaffer-bench-") as tmp:
        overhead = None
        if "a" in args.parts:
            overhead = _overhead(Path(tmp) / "a")
            print(
                f"(a) /approve → in_review, no-op agent and check: {overhead:.2f} s "
                f"(goal 1 s: {overhead / 1.0:.2f}× the goal)"
            )
        if "b" in args.parts:
            _slot_runs(Path(tmp) / "b", args)
        if "d" in args.parts:
            _sandbox_cost(Path(tmp), overhead)
        if "c" in args.parts:
            _worktree_speed(Path(tmp) / "c", args.files)


def _sandbox_cost(tmp: Path, overhead: float | None) -> None:
    boxed, bare = _process_start(tmp / "d")
    print(
        f"(d) one process start: sandboxed {boxed * 1000:.1f} ms, `sandbox: none` "
        f"{bare * 1000:.1f} ms — the sandbox adds {(boxed - bare) * 1000:.1f} ms "
        f"({boxed / bare:.1f}×; goal: under 50 ms more)"
    )
    if overhead is None:
        overhead = _overhead(tmp / "d-boxed")
    unboxed = _overhead(tmp / "d-none", {"sandbox": "none"})
    print(
        f"    /approve → in_review: sandboxed {overhead:.2f} s, `sandbox: none` "
        f"{unboxed:.2f} s — ratio {overhead / unboxed:.2f}"
    )


def _worktree_speed(home: Path, files: int) -> None:
    warm, fresh, clone = _worktrees(home, files)
    print(
        f"(c) worktree of {files} files: warm pool {warm:.3f} s, fresh worktree "
        f"{fresh:.2f} s, full clone {clone:.2f} s — fresh/warm {fresh / warm:.0f}×, "
        f"clone/warm {clone / warm:.0f}× (goal: warm < 0.2 s and ≥ 20× faster)"
    )


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plans", type=int, default=6)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--agent-seconds", type=float, default=5.0)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--parts", default="abcd", help="which of (a) to (d) to run, e.g. b")
    parser.add_argument("--runs", type=int, default=1, help="how many times to run (b)")
    parser.add_argument("--services", action="store_true", help="(b) on PostgreSQL and Redis")
    parser.add_argument(
        "--agent", choices=("shell", "script"), default="shell", help="(b)'s agent (see above)"
    )
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
    with local_gaffer(home, files, server=server, validate=False) as gaffer:
        _approved_to_review([gaffer.issue(1, "Warm up", _script(0))])
        runs = [_approved_to_review([gaffer.issue(n, f"No-op {n}", _script(0))]) for n in (2, 3, 4)]
    return sorted(runs)[1]


@dataclass(frozen=True)
class SlotRun:
    """One run of (b): how long it took, and the GitHub requests it made by endpoint."""

    elapsed: float
    calls: Counter[str]


def _slot_runs(home: Path, args: argparse.Namespace) -> None:
    ideal = math.ceil(args.plans / args.slots) * args.agent_seconds
    runs = []
    for number in range(1, args.runs + 1):
        run = _slots(home / str(number), args)
        runs.append(run)
        calls = sum(run.calls.values()) / args.plans
        print(
            f"(b) {args.plans} plans on {args.slots} slots, {args.agent_seconds:g} s "
            f"{args.agent} agents: "
            f"{run.elapsed:.2f} s against ideal {ideal:.1f} s — ratio {run.elapsed / ideal:.2f} "
            f"(goal ≤ 1.10); {calls:.1f} GitHub requests a plan"
        )
    ratios = sorted(run.elapsed / ideal for run in runs)
    if len(runs) > 1:
        print(
            f"    ratio over {len(runs)} runs: median {statistics.median(ratios):.2f}, "
            f"best {ratios[0]:.2f}, worst {ratios[-1]:.2f}"
        )
    print("    GitHub requests a plan, by endpoint (mean over the runs):")
    total: Counter[str] = sum((run.calls for run in runs), Counter())
    for endpoint, count in total.most_common():
        print(f"      {count / len(runs) / args.plans:5.2f}  {endpoint}")


def _slots(home: Path, args: argparse.Namespace) -> SlotRun:
    home.mkdir(parents=True)
    if not args.services:
        return _slots_on(home, args, None)
    database = fresh_database()
    redis.Redis.from_url(REDIS).flushdb()
    try:
        return _slots_on(home, args, {"DATABASE_URL": database, "BROKER_URL": REDIS})
    finally:
        drop_database(database)


def _slots_on(home: Path, args: argparse.Namespace, services: dict[str, str] | None) -> SlotRun:
    files = {".github/gaffer.yml": NOOP_CHECK, "README.md": "x\n"}
    server: dict = {}
    if args.agent == "shell":
        files[".github/gaffer.yml"] += "agent: sleeper\n"
        sleeper = {
            "command": ["sh", "-c", SLEEPER],
            "output": "text",
            "env": [],
            "set_env": {"BENCH_AGENT_S": f"{args.agent_seconds:g}"},
        }
        server["agents"] = {"sleeper": sleeper}
    with local_gaffer(
        home, files, agent_slots=args.slots, server=server, services=services, validate=False
    ) as gaffer:
        flows = [
            gaffer.issue(n, f"Plan {n}", _script(args.agent_seconds))
            for n in range(1, args.plans + 1)
        ]
        for flow in flows:
            flow.label()
        for flow in flows:
            flow.wait_state(PlanState.DRAFT)
        before = len(gaffer.github.requests)
        started = time.perf_counter()
        for flow in flows:
            flow.comment("/approve")
        in_review = [LABEL_PREFIX + PlanState.IN_REVIEW.value]
        _until(lambda: all(flow.state_labels() == in_review for flow in flows))
        elapsed = time.perf_counter() - started
        for flow in flows:
            flow.wait_state(PlanState.IN_REVIEW)  # and the database says so too
        _until(lambda: _jobs_ended(gaffer))
        made = gaffer.github.requests[before:]
    return SlotRun(elapsed, _by_endpoint(gaffer.github, made))


def _until(condition: Callable[[], bool], timeout: float = 600) -> None:
    """Wait for condition, looking often: what a plan's label says is the measurement."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the plans never reached review")
        time.sleep(0.01)


def _jobs_ended(gaffer: LocalGaffer) -> bool:
    open_states = [JobState.QUEUED, JobState.RUNNING]
    with gaffer.app.extensions["gaffer_db"].session() as session:
        return not session.query(Job).filter(Job.state.in_(open_states)).count()


def _by_endpoint(github: GitHubState, requests: Sequence[RecordedRequest]) -> Counter[str]:
    """Count requests by the double's route they matched, e.g. `GET issues/{number}`."""
    assert github.flask_app is not None
    routes = github.flask_app.url_map.bind("localhost")
    counted: Counter[str] = Counter()
    for request in requests:
        rule, _ = routes.match(request.path, method=request.method, return_rule=True)
        shown = re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule)
        here = shown.removeprefix("/repos/{owner}/{repo}").lstrip("/") or "(the repository)"
        counted[f"{request.method} {here}"] += 1
    return counted


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
