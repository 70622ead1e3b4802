"""The attacking agent and check against real worker processes, on both backends.

The workers hold gaffer's secrets in their environment, as in production; the agent and
the check try every way out they know, report what worked, and leave a process behind.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from bot.models import PlanState
from double.driver import IssueFlow
from double.origin import commit_to_origin
from tasks.gitcmd import git
from tests.conftest import INSTALLATION_ID, REPO
from tests.security.conftest import ATTACK, PG_SOCKET, REPORT_MARK, processes_marked
from tests.support import WEBHOOK_SECRET

BODY = "Please tidy the widgets module."


def attack_plan(settings, marker: str, server_port: str) -> dict:
    database = settings.database_url.partition(":///")[2] or "/nonexistent"
    return {
        "environ": True,
        "files": [str(settings.home), database],
        "connect": ["127.0.0.1:5432", "127.0.0.1:6379", PG_SOCKET, f"127.0.0.1:{server_port}"],
        "linger": marker,
        "edit": "tidy.txt",
    }


@pytest.fixture
def marker() -> str:
    return f"linger-{uuid.uuid4().hex}"


@pytest.fixture
def flow(app, client, github, origin: Path, server_config: Path, settings, github_server, marker):
    port = github_server.rsplit(":", 1)[1].split("/")[0]
    plan = json.dumps(attack_plan(settings, marker, port))
    argument = plan.replace("{", "{{").replace("}", "}}")
    config = yaml.safe_load(server_config.read_text())
    config["agents"] = {
        "attacker": {"command": ["{python}", str(ATTACK), argument], "output": "text"}
    }
    config["sandbox"] = {"read_only": [str(ATTACK.parent)]}
    server_config.write_text(yaml.safe_dump(config))
    check = f"{shlex.quote(sys.executable)} {shlex.quote(str(ATTACK))} {shlex.quote(plan)}"
    repo_config = yaml.safe_dump(
        {"agent": "attacker", "max_retries": 0, "checks": [{"name": "attack", "run": check}]}
    )
    commit_to_origin(origin, {".github/gaffer.yml": repo_config}, "an attacking agent and check")
    return IssueFlow(
        app, client, github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET, body=BODY
    ).open()


def reports(home: Path, pattern: str) -> list[dict]:
    found = []
    for log in home.glob(pattern):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith(REPORT_MARK):
                found.append(json.loads(line.removeprefix(REPORT_MARK)))
    return found


def shown(home: Path, path: str) -> bool:
    """Tell whether a run may read path: its worktree, home, prompt, or the mirror's history."""
    relative = Path(path).relative_to(home).parts if Path(path).is_relative_to(home) else ()
    match relative:
        case ("worktrees", *_) | ("mirrors", "octo", "widgets.git", *_):
            return not any(part.endswith((".lease.json", ".lock", ".owner")) for part in relative)
        case ("jobs", _, _, "home", *_) | ("jobs", _, _, "prompt.md"):
            return True
    return False


def test_every_attack_fails_against_a_real_worker(flow: IssueFlow, worker, settings, marker):
    try:
        flow.label()
        flow.wait_state(PlanState.DRAFT)
        flow.comment("/approve")
        plan = flow.wait_state(PlanState.IN_REVIEW, PlanState.FAILED)
        agent = reports(settings.home, "jobs/*/*/agent.log")
        check = reports(settings.home, "jobs/*/*/check-attack.log")
        assert len(agent) == 2 and len(check) == 1, (agent, check)  # plan, execute; the check
        for report in [*agent, *check]:
            assert report["environ"] == [], "a worker's environment was read"
            assert [p for p in report["files"] if not shown(settings.home, p)] == []
            assert report["connect"] == [], "gaffer's services were reached"
        # The agent did its work and the check ran: the attacks failed, the job did not.
        assert plan.state == PlanState.IN_REVIEW, plan.last_error
        files = git(["ls-tree", "--name-only", plan.branch or ""], cwd=flow.origin)
        assert "tidy.txt" in files.splitlines()
        # Nothing the agent or the check left behind outlives its run.
        assert processes_marked(marker) == []
        words = "\n".join(c["body"] for c in flow.comments())
        assert WEBHOOK_SECRET not in words
    finally:
        for pid in processes_marked(marker):
            os.kill(pid, signal.SIGKILL)
