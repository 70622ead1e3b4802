"""Best-of-N's pure parts: which agents run, each one's budget, the ranking, and picking."""

from __future__ import annotations

from decimal import Decimal

import pytest

from bot.candidates import candidate_agents, candidate_with_head, ranked, shares
from bot.models import Candidate, CandidateState
from bot.repo_config import load_repo_config


@pytest.mark.parametrize(
    ("config", "asked", "agents"),
    [
        pytest.param("", None, [], id="no candidates by default"),
        pytest.param("candidates: 3", None, [None, None, None], id="a count runs the plan's agent"),
        pytest.param("candidates: [a, b]", None, ["a", "b"], id="a list runs one per agent"),
        pytest.param("", "3", [None, None, None], id="x3 without config"),
        pytest.param("candidates: [a, b]", "3", ["a", "b", "a"], id="x3 cycles the listed agents"),
        pytest.param("candidates: [a, b]", "1", [], id="x1 runs once whatever the config says"),
    ],
)
def test_the_candidates_agents(config: str, asked: str | None, agents: list) -> None:
    assert candidate_agents(load_repo_config(config), asked) == agents


def test_each_candidate_gets_an_equal_share_never_more_than_the_budget_left() -> None:
    assert shares(Decimal("1.00"), 3) == Decimal("0.3333")
    assert shares(Decimal("1.00"), 3) * 3 <= Decimal("1.00")
    assert shares(Decimal("-0.50"), 2) == Decimal("0")  # spent already: nothing to share
    assert shares(None, 3) is None


def candidate(number: int, **values) -> Candidate:
    base = {
        "state": CandidateState.VERIFIED,
        "head_sha": f"{number}" * 40,
        "checks_passed": 2,
        "checks_total": 2,
        "outside_scope": 0,
        "lines_changed": 10,
        "cost_usd": Decimal("0.10"),
        "seconds": 30.0,
    }
    return Candidate(number=number, **{**base, **values})


def test_green_beats_red_beats_no_head_then_scope_size_cost_and_time() -> None:
    given = [
        candidate(1, head_sha=None, checks_passed=0, checks_total=0, state=CandidateState.FAILED),
        candidate(2, checks_passed=1),
        candidate(3, lines_changed=50),
        candidate(4, outside_scope=1),
        candidate(5, cost_usd=Decimal("0.05")),
        candidate(6, seconds=10.0),
        candidate(7),
    ]
    assert [each.number for each in ranked(given)] == [5, 6, 7, 3, 4, 2, 1]


def test_a_candidate_is_picked_by_a_prefix_of_its_head_and_nothing_else() -> None:
    one, two = candidate(1, head_sha="ab" * 20), candidate(2, head_sha="cd" * 20)
    assert candidate_with_head([one, two], "abab") is one
    assert "approve one by its head" in str(candidate_with_head([one, two], None))
    assert "is not the head of one candidate" in str(candidate_with_head([one, two], "ef12"))
