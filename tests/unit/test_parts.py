"""The parts a plan proposes for `/split`, read from its Parts section."""

from __future__ import annotations

import pytest

from bot.parts import MAX_PARTS, Part, PartsError, proposed_parts


def test_parts_under_a_bold_heading_with_descriptions_and_order() -> None:
    text = """## Plan

**Parts**
1. Add the widget model
   The model and its table.
   Scope: `src/models.py`
2. **Serve widgets** (after 1)
   The API.

**Risks**
1. Not a part.
"""
    assert proposed_parts(text) == [
        Part(1, "Add the widget model", "The model and its table.\nScope: `src/models.py`"),
        Part(2, "Serve widgets", "The API.", (1,)),
    ]


def test_parts_inside_a_numbered_section_end_at_the_next_section() -> None:
    text = """1. **Goal** — widgets.
6. **Parts**
   1. Model
   2. API (after 1)
   3. Docs (after 1 and 2)
7. **Later** — nothing.
"""
    assert [(p.number, p.title, p.after) for p in proposed_parts(text)] == [
        (1, "Model", ()),
        (2, "API", (1,)),
        (3, "Docs", (1, 2)),
    ]


def test_a_plan_without_parts_proposes_none() -> None:
    assert proposed_parts("## Plan\n\n1. Do it.\n\n**Scope**\n- `a.py`\n") == []


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("**Parts**\n1. Only one\n", "at least two"),
        ("**Parts**\n1. A (after 2)\n2. B\n", "only come after earlier parts"),
        ("**Parts**\n1. A\n2. B (after 2)\n", "only come after earlier parts"),
        ("**Parts**\n1. A\n3. B\n", "numbered 1, 2, 3"),
        ("**Parts**\n1. A\n2. (after 1)\n", "has no title"),
        (
            "**Parts**\n" + "".join(f"{n}. P{n}\n" for n in range(1, MAX_PARTS + 2)),
            f"at most {MAX_PARTS}",
        ),
    ],
    ids=["one part", "after a later part", "after itself", "a gap", "no title", "too many"],
)
def test_parts_that_cannot_be_followed_say_why(text: str, why: str) -> None:
    with pytest.raises(PartsError, match=why):
        proposed_parts(text)


def test_hidden_comments_and_gaffers_markers_never_reach_a_parts_issue() -> None:
    text = (
        "**Parts**\n1. Model <!-- @everyone -->\n   Body <!-- gaffer:part 3.1 -->\n"
        "   gaffer:part 3.2\n2. API (after 1)\n"
    )
    first = proposed_parts(text)[0]
    assert first.title == "Model"
    assert "<!--" not in first.body and "gaffer:part" not in first.body
