"""A repository's .github/gaffer.yml: layered over the defaults, refused with a reason."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal

import pytest

import bot.repo_config
from bot.github import RepoFile
from bot.repo_config import (
    MAX_CONFIG_BYTES,
    REPO_CONFIG_PATH,
    Check,
    RepoConfigError,
    fetch_repo_config,
    load_repo_config,
)
from tasks.stages.verification import check_memory_mb


def test_an_absent_file_gives_the_shipped_defaults() -> None:
    config = load_repo_config(None)
    assert config.label == "gaffer"
    assert config.approver_teams == ()
    assert config.allow_self_approval is False
    assert config.checks_network is True
    assert config.require_green is True


def test_the_repository_overrides_the_server_which_overrides_the_defaults() -> None:
    server = {"max_retries": 5, "label": "agent", "checks_network": False}
    text = (
        "label: ai\napprover_teams: [acme/reviewers]\nallow_self_approval: true\n"
        "checks: [{name: tests, run: pytest -q, timeout: 60}]\nbudget: {plan_usd: 2.5}\n"
    )
    config = load_repo_config(text, server)
    assert config.label == "ai"
    assert config.max_retries == 5
    assert config.checks_network is False
    assert config.approver_teams == ("acme/reviewers",)
    assert config.allow_self_approval is True
    assert config.checks == (Check("tests", "pytest -q", 60),)
    assert config.budget.plan_usd == Decimal("2.5")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("label: [", "not valid YAML", id="broken yaml is refused"),
        pytest.param("- a list", "must be a mapping", id="a list at the top is refused"),
        pytest.param(
            "approver_teams: [reviewers]", "org/team-slug", id="a team without its org is refused"
        ),
        pytest.param(
            "approver_teams: [acme/]", "org/team-slug", id="a team without a slug is refused"
        ),
        pytest.param(
            "allow_self_approval: maybe", "true or false", id="a self-approval policy not a bool"
        ),
        pytest.param("checks_network: 0", "true or false", id="checks_network not a bool"),
        pytest.param("max_retries: 11", "0 to 10", id="too many retries are refused"),
        pytest.param(
            "checks: [{name: a, run: x}, {name: a, run: y}]", "unique", id="duplicate check names"
        ),
        pytest.param("budget: {plan_usd: -1}", "positive", id="a negative budget is refused"),
        pytest.param(
            "checks: [{name: a, run: x, memory_mb: 0}]", "memory_mb", id="a check's zero memory"
        ),
        pytest.param("candidates: 6", "candidates", id="more than five candidates"),
        pytest.param("candidates: [claude]", "candidates", id="a list of one agent"),
        pytest.param("candidates: [claude, 3]", "candidates", id="a list with a non-name"),
    ],
)
def test_an_invalid_setting_is_refused_with_what_to_fix(text: str, reason: str) -> None:
    with pytest.raises(RepoConfigError, match=reason):
        load_repo_config(text)


@pytest.mark.parametrize(
    ("asked", "server", "limit"),
    [
        pytest.param(None, 4096, 4096, id="a check asking nothing gets the server's limit"),
        pytest.param(512, 4096, 512, id="a check may ask for less"),
        pytest.param(8192, 4096, 4096, id="a check asking for more gets the server's cap"),
        pytest.param(8192, None, 8192, id="with no server limit the check's own holds"),
        pytest.param(None, None, None, id="with neither there is no limit"),
    ],
)
def test_a_checks_memory_limit_never_exceeds_the_servers(asked, server, limit) -> None:
    check = Check("tests", "pytest", memory_mb=asked)
    assert check_memory_mb(check, server) == limit


NAMES = [
    pytest.param("../../x", "check 1", id="a name climbing out of the job folder is refused"),
    pytest.param("/etc/passwd", "check 1", id="an absolute path is refused"),
    pytest.param("a/b", "check 1", id="a name with a slash is refused"),
    pytest.param("..", "check 1", id="a name of two dots is refused"),
    pytest.param(".hidden", "check 1", id="a name starting with a dot is refused"),
    pytest.param("", "check 1", id="an empty name is refused"),
    pytest.param("unit tests", "check 1", id="a name with a space is refused"),
    pytest.param("bell\x07", "check 1", id="a name with a control character is refused"),
    pytest.param("tab\there", "check 1", id="a name with a tab is refused"),
    pytest.param("x" * 65, "check 1", id="a name over 64 characters is refused"),
    pytest.param("diff", "gaffer's own diff check", id="gaffer's own diff check name is refused"),
]


@pytest.mark.parametrize(("name", "reason"), NAMES)
def test_a_check_name_that_is_not_a_short_name_is_refused_naming_the_check(
    name: str, reason: str
) -> None:
    with pytest.raises(RepoConfigError, match=reason):
        load_repo_config(f"checks:\n  - name: {json.dumps(name)}\n    run: 'true'\n")
    with pytest.raises(RepoConfigError):
        Check(name, "true")  # no Check, and so no folder, is made from such a name


@pytest.mark.parametrize(
    "name", ["tests", "lint-py3.12", "unit_tests", "E2E", "a" * 64], ids=lambda name: name[:12]
)
def test_short_names_are_accepted(name: str) -> None:
    [check] = load_repo_config(f"checks: [{{name: {name}, run: 'true'}}]").checks
    assert check.name == name


def test_a_config_over_the_size_limit_is_refused_saying_the_limit() -> None:
    text = "# " + "x" * MAX_CONFIG_BYTES + "\nlabel: ai\n"
    with pytest.raises(RepoConfigError, match="gaffer reads at most 65,536 bytes"):
        load_repo_config(text)


class ConfigOnDefaultBranch:
    """A repository whose default branch holds one .github/gaffer.yml."""

    def __init__(self, text: str, sha: str) -> None:
        self.file = RepoFile(sha, len(text.encode()), text)

    def small_file_on_default_branch(self, path: str, max_bytes: int) -> RepoFile | None:
        assert path == REPO_CONFIG_PATH
        if self.file.size > max_bytes:
            return RepoFile(self.file.sha, self.file.size, None)
        return self.file


def test_a_big_config_is_parsed_once_per_blob_not_once_per_command(monkeypatch) -> None:
    text = "approvers: [" + ", ".join(f"u{n}" for n in range(6000)) + "]\n"
    assert len(text) > 40_000
    parsed: list[str] = []
    real = bot.repo_config.yaml.safe_load
    monkeypatch.setattr(bot.repo_config.yaml, "safe_load", lambda t: parsed.append(t) or real(t))
    first = ConfigOnDefaultBranch(text, uuid.uuid4().hex)  # a blob this process never saw
    configs = [fetch_repo_config(first) for _command in range(50)]
    assert parsed.count(text) == 1
    assert {len(config.approvers) for config in configs} == {6000}
    edited = ConfigOnDefaultBranch(text.replace("u0,", "u0b,"), uuid.uuid4().hex)
    assert fetch_repo_config(edited).approvers[0] == "u0b"  # a new blob is parsed afresh


def test_a_file_github_would_not_send_whole_is_refused_before_reading() -> None:
    huge = ConfigOnDefaultBranch("# " + "x" * (2 << 20), "c3" * 20)
    with pytest.raises(RepoConfigError, match="2,097,154 bytes"):
        fetch_repo_config(huge)
