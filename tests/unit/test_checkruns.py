"""A check command's result as a GitHub check run: conclusion, title, output and annotations."""

from __future__ import annotations

import pytest

from tasks.checks.checkruns import (
    MAX_OUTPUT_BYTES,
    annotations_from_output,
    batches,
    check_output,
    check_run_name,
    clean_output,
    external_id,
)

SHA = "0123456789abcdef0123456789abcdef01234567"


def result(
    returncode=0, timed_out=False, output="ok\n", duration_s=3.21, cost_line=None, flooded=False
):
    return check_output(
        "tests",
        returncode=returncode,
        timed_out=timed_out,
        output=output,
        duration_s=duration_s,
        cost_line=cost_line,
        output_limited=flooded,
    )


OUTCOMES = [
    pytest.param({}, "success", "tests passed in 3.2 s", id="exit 0 passes"),
    pytest.param({"returncode": 1}, "failure", "tests failed (exit 1)", id="exit 1 fails"),
    pytest.param(
        {"returncode": None, "timed_out": True, "duration_s": 600.4},
        "timed_out",
        "tests timed out after 600 s",
        id="a timed-out check says timed_out",
    ),
    pytest.param(
        {"returncode": -9}, "failure", "tests failed (killed by SIGKILL)", id="a killed check fails"
    ),
    pytest.param(
        {"returncode": None}, "failure", "tests did not finish", id="a check with no exit fails"
    ),
    pytest.param(
        {"returncode": -15, "flooded": True},
        "failure",
        "tests was stopped: it printed more output than allowed",
        id="a check stopped for flooding says so, not which signal",
    ),
]


@pytest.mark.parametrize(("kwargs", "conclusion", "title"), OUTCOMES)
def test_conclusion_and_title(kwargs, conclusion, title):
    run = result(**kwargs)
    assert (run.conclusion, run.title) == (conclusion, title)


def test_output_over_65535_characters_keeps_its_tail():
    lines = [f"line {n:06d}" for n in range(20_000)]
    run = result(returncode=1, output="\n".join(lines) + "\n")
    assert len(run.text.encode()) <= MAX_OUTPUT_BYTES
    assert run.text.startswith("Output cut: the last ")
    assert run.text.endswith("line 019999\n```")
    shown = run.text.split("```text\n", 1)[1].removesuffix("\n```").splitlines()
    assert shown == lines[-len(shown) :]
    assert f"The output has {len(lines):,} lines; the last {len(shown):,} are shown" in run.summary


def test_multibyte_output_is_cut_by_bytes_on_a_whole_character():
    run = result(returncode=1, output="é" * 100_000)
    assert len(run.text.encode()) <= MAX_OUTPUT_BYTES
    assert "\ufffd" not in run.text


def test_short_output_is_shown_whole_in_a_fence():
    run = result(output="1 passed\n")
    assert run.text == "```text\n1 passed\n```"
    assert "The output (1 line) is shown below." in run.summary


def test_backtick_fences_inside_the_output_cannot_close_ours():
    run = result(returncode=1, output="before\n```\nmarkdown\n````\nafter\n")
    assert run.text.startswith("`````text\n")
    assert run.text.endswith("after\n`````")


def test_endless_backtick_runs_are_shortened_so_the_fence_stays_short():
    run = result(returncode=1, output="`" * 70_000)
    assert len(run.text.encode()) <= MAX_OUTPUT_BYTES
    assert run.text.startswith("`" * 17 + "text\n")


def test_no_output_says_so():
    run = result(output="")
    assert run.text == "The command printed nothing."
    assert "The command printed nothing." in run.summary


def test_the_cost_line_is_in_the_summary():
    assert "Cost so far: $0.42" in result(cost_line="Cost so far: $0.42").summary


CLEANING = [
    pytest.param("\x1b[31mFAILED\x1b[0m x", "FAILED x", id="colour codes are stripped"),
    pytest.param("\x1b]8;;http://x\x07link\x1b]8;;\x07", "link", id="hyperlinks are stripped"),
    pytest.param("10%\r50%\r100%\ndone", "100%\ndone", id="carriage returns keep the last frame"),
    pytest.param("a\r\nb", "a\nb", id="windows newlines become newlines"),
    pytest.param("nul\x00bell\x07", "nulbell", id="control characters are dropped"),
    pytest.param(b"bad \xff byte", "bad \ufffd byte", id="invalid utf-8 bytes are replaced"),
    pytest.param("lone \udcff", "lone \ufffd\ufffd\ufffd", id="lone surrogates are replaced"),
    pytest.param("tab\tkept", "tab\tkept", id="tabs are kept"),
]


@pytest.mark.parametrize(("raw", "clean"), CLEANING)
def test_clean_output(raw, clean):
    assert clean_output(raw) == clean


def test_ansi_codes_never_reach_the_check_run():
    run = result(returncode=1, output="\x1b[1;31mE   assert 1 == 2\x1b[0m\n")
    assert "\x1b" not in run.text
    assert "E   assert 1 == 2" in run.text


def test_check_run_names_are_prefixed_one_line_and_short():
    assert check_run_name("tests") == "gaffer/tests"
    assert check_run_name("  unit\n tests ") == "gaffer/unit tests"
    long_a, long_b = check_run_name("x" * 300 + "a"), check_run_name("x" * 300 + "b")
    assert len(long_a) == 100 and long_a.startswith("gaffer/xxx")
    assert long_a != long_b
    with pytest.raises(ValueError):
        check_run_name(" \n ")


def test_external_id_is_stable_short_and_distinct():
    assert external_id(7, "tests", SHA) == external_id(7, "tests", SHA)
    assert external_id(7, "tests", SHA) == "gaffer-7-tests-0123456789ab"
    others = {external_id(8, "tests", SHA), external_id(7, "lint", SHA)}
    assert external_id(7, "tests", "f" * 40) not in others | {external_id(7, "tests", SHA)}
    assert external_id(7, "unit tests", SHA) != external_id(7, "unit-tests", SHA)
    assert len(external_id(2**62, "n" * 1000, SHA)) <= 80


PREFIX = "/work/trees/plan-7"
ANNOTATIONS = [
    pytest.param(
        "tasks/app.py:12:5: F401 [*] `os` imported but unused",
        {
            "path": "tasks/app.py",
            "start_line": 12,
            "end_line": 12,
            "start_column": 5,
            "end_column": 5,
            "annotation_level": "failure",
            "title": "ruff F401",
            "message": "`os` imported but unused",
        },
        id="a ruff line",
    ),
    pytest.param(
        f"{PREFIX}/bot/db.py:40: error: Incompatible return value  [return-value]",
        {
            "path": "bot/db.py",
            "start_line": 40,
            "end_line": 40,
            "annotation_level": "failure",
            "title": "mypy error [return-value]",
            "message": "Incompatible return value",
        },
        id="a mypy error under the worktree",
    ),
    pytest.param(
        "./bot/db.py:41: note: See the docs",
        {
            "path": "bot/db.py",
            "start_line": 41,
            "end_line": 41,
            "annotation_level": "notice",
            "title": "mypy note",
            "message": "See the docs",
        },
        id="a mypy note",
    ),
    pytest.param(
        "tests/test_app.py:9: AssertionError",
        {
            "path": "tests/test_app.py",
            "start_line": 9,
            "end_line": 9,
            "annotation_level": "failure",
            "title": "AssertionError",
            "message": "AssertionError",
        },
        id="a pytest failure",
    ),
    pytest.param(
        "tests/test_app.py:3: DeprecationWarning: old API",
        {
            "path": "tests/test_app.py",
            "start_line": 3,
            "end_line": 3,
            "annotation_level": "warning",
            "title": "DeprecationWarning",
            "message": "old API",
        },
        id="a pytest warning",
    ),
    pytest.param("tests/test_app.py:9: in test_app", None, id="a traceback frame is skipped"),
    pytest.param("/usr/lib/python3/x.py:1: error: boom", None, id="paths outside are skipped"),
    pytest.param("../escape.py:1: error: boom", None, id="paths climbing out are skipped"),
    pytest.param("12 passed in 0.3s", None, id="other lines are skipped"),
]


@pytest.mark.parametrize(("line", "expected"), ANNOTATIONS)
def test_annotations_from_output(line, expected):
    found = annotations_from_output(f"\x1b[1m{line}\x1b[0m\n", PREFIX)
    assert found == ([expected] if expected else [])


def test_annotations_are_deduplicated_and_limited():
    output = "a.py:1: error: x\n" * 3 + "".join(f"b.py:{n}: error: y\n" for n in range(1, 500))
    found = annotations_from_output(output, PREFIX, limit=100)
    assert len(found) == 100
    assert [a["start_line"] for a in found[:2]] == [1, 1]
    assert [a["path"] for a in found[:2]] == ["a.py", "b.py"]


def test_annotation_messages_and_titles_fit_githubs_limits():
    (found,) = annotations_from_output(f"a.py:1: error: {'m' * 70_000}  [{'c' * 300}]", PREFIX)
    assert len(found["message"].encode()) < 64 * 1024
    assert len(found["title"]) <= 255


@pytest.mark.parametrize(
    ("count", "sizes"),
    [(0, []), (1, [1]), (50, [50]), (51, [50, 1]), (120, [50, 50, 20])],
    ids=["none", "one", "exactly fifty", "fifty-one", "a hundred and twenty"],
)
def test_annotations_go_in_batches_of_fifty(count, sizes):
    annotations = [{"start_line": n} for n in range(count)]
    groups = list(batches(annotations))
    assert [len(group) for group in groups] == sizes
    assert [a for group in groups for a in group] == annotations


def test_batches_larger_than_githubs_limit_are_refused():
    with pytest.raises(ValueError):
        list(batches([], size=51))


def test_every_built_in_check_is_reserved_and_has_its_runner() -> None:
    from bot.repo_config import BUILT_IN_CHECKS, RESERVED_CHECK_NAMES
    from tasks.stages.verification import BUILT_IN

    assert tuple(BUILT_IN) == BUILT_IN_CHECKS
    assert set(BUILT_IN_CHECKS) == RESERVED_CHECK_NAMES
