"""Run one command through gaffer's runner from a process holding a worker's secrets.

The tests start this module with gaffer's secrets in its environment, as a worker has them,
so an attacker that reads its ancestors' `/proc/<pid>/environ` finds them there.
Input: one JSON object on stdin; output: the run's result as one JSON object.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from tasks.isolation.runner import run_process, sandbox_env
from tasks.isolation.sandbox import Sandbox, SandboxConfig


def main() -> None:
    spec = json.load(sys.stdin)
    config = SandboxConfig.from_setting(spec["sandbox"])
    services = tuple((host, port) for host, port in spec["services"])
    sandbox = Sandbox(config, tuple(Path(p) for p in spec["hidden"]), services)
    worktree, home = Path(spec["worktree"]), Path(spec["home"])
    box = sandbox.box(
        worktree,
        home,
        read_only=[Path(p) for p in spec.get("read_only", [])],
        egress=spec.get("egress", ()),
        egress_log=Path(spec["log"]).with_suffix(".egress"),
    )
    env = sandbox_env(allow=(), source=os.environ, home=home, extra=spec.get("env", {}))
    result = run_process(
        spec["argv"],
        cwd=worktree,
        env=env,
        log_path=Path(spec["log"]),
        timeout_s=spec.get("timeout_s", 30),
        memory_mb=spec.get("memory_mb"),
        sandbox=sandbox,
        box=box,
    )
    json.dump(dataclasses.asdict(result), sys.stdout)


if __name__ == "__main__":
    main()
