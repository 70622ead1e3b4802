"""Which pull request is gaffer's own: the plan's PR, and no other on its branch."""

from __future__ import annotations

from typing import Any

import pytest

from bot.github import is_gaffers_pull

BOT, REPO_ID, BRANCH = "gaffer[bot]", 7, "gaffer/1-widgets"


def pull(
    login: str = BOT,
    kind: str = "Bot",
    head_repo: dict[str, Any] | None = None,
    head: str = BRANCH,
    base: str = "main",
) -> dict[str, Any]:
    return {
        "user": {"login": login, "type": kind},
        "head": {"ref": head, "repo": {"id": REPO_ID} if head_repo is None else head_repo},
        "base": {"ref": base},
    }


CASES = [
    pytest.param(pull(), True, id="the App's bot, from the plan's branch into the default branch"),
    pytest.param(pull(login="mallory", kind="User"), False, id="a person's PR from the branch"),
    pytest.param(pull(login="other-app[bot]"), False, id="another App's bot"),
    pytest.param(pull(kind="User"), False, id="a user whose login looks like the bot's"),
    pytest.param(pull(head_repo={"id": 99}), False, id="a fork's branch of the same name"),
    pytest.param({**pull(), "head": {"ref": BRANCH, "repo": None}}, False, id="a deleted fork"),
    pytest.param(pull(base="release"), False, id="into another base"),
    pytest.param(pull(head="gaffer/2-other"), False, id="from another branch"),
]


@pytest.mark.parametrize(("rendered", "ours"), CASES)
def test_only_the_apps_own_pr_from_the_branch_into_the_default_branch_is_gaffers(
    rendered: dict[str, Any], ours: bool
) -> None:
    found = is_gaffers_pull(rendered, bot_login=BOT, repo_id=REPO_ID, branch=BRANCH, base="main")
    assert found is ours
