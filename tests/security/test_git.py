"""An agent that rewrites the mirror's git config to send gaffer's push (and token) elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.models import PlanState
from tasks import worktrees
from tasks.gitcmd import git
from tests.in_process import InProcess
from tests.security.conftest import ATTACK


@pytest.fixture
def attacker_repo(tmp_path: Path) -> Path:
    """A bare repository standing in for the attacker's server."""
    repo = tmp_path / "attacker.git"
    repo.mkdir()
    git(["init", "--bare", "--quiet"], cwd=repo)
    return repo


def steering_agent(origin: Path, attacker: Path) -> dict:
    plan = {"git_url": str(attacker), "git_origin": str(origin), "edit": "notes.txt"}
    # Braces are placeholders in agent commands; doubled, they reach the agent as they are.
    argument = json.dumps(plan).replace("{", "{{").replace("}", "}}")
    return {"command": ["{python}", str(ATTACK), argument], "output": "text"}


@pytest.mark.parametrize(
    ("sandboxed", "config_rewritten", "stolen"),
    [
        pytest.param(True, True, False, id="the sandbox shows the mirror's config read-only"),
        pytest.param(False, True, False, id="without it gaffer rewrites the config before pushing"),
        pytest.param(False, False, True, id="with neither the push goes to the attacker"),
    ],
)
def test_an_agent_cannot_steer_where_gaffer_pushes(
    here: InProcess,
    attacker_repo: Path,
    monkeypatch,
    sandboxed: bool,
    config_rewritten: bool,
    stolen: bool,
) -> None:
    server = here.wctx.settings.server_config
    agent = steering_agent(here.flow.origin, attacker_repo)
    monkeypatch.setitem(server, "agents", {"script": agent})
    sandbox = {"read_only": [str(ATTACK.parent)]} if sandboxed else "none"
    monkeypatch.setitem(server, "sandbox", sandbox)
    here.wctx.__dict__.pop("sandbox", None)
    if not config_rewritten:
        monkeypatch.setattr(worktrees, "_write_mirror_config", _only_first_write())

    here.flow.label()
    here.settle()
    plan = here.comment("/approve")

    pushed_to_attacker = git(["for-each-ref", "refs/heads/"], cwd=attacker_repo)
    assert bool(pushed_to_attacker) == stolen
    if not stolen:
        assert plan.state == PlanState.IN_REVIEW, plan.last_error
        assert here.flow.origin_sha(plan.branch) == plan.head_sha


def _only_first_write():
    """Write the mirror's config when it is made, never again (the defence switched off)."""
    real = worktrees._write_mirror_config

    def write(mirror: Path, clone_url: str) -> None:
        if not (mirror / "config").read_text().count("[remote"):
            real(mirror, clone_url)

    return write
