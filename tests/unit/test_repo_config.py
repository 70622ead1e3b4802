"""A repository's .github/gaffer.yml: layered over the defaults, refused with a reason."""

from __future__ import annotations

from decimal import Decimal

import pytest

from bot.repo_config import Check, RepoConfigError, load_repo_config
from tasks.verification import check_memory_mb


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
