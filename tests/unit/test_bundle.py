"""A job's bundle: written once, read by this and every later gaffer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.dashboard.bundle import BundleError, make_bundle, read_bundle

# What gaffer's first bundle format looks like: a later gaffer must still read this file.
VERSION_1 = {
    "format": "gaffer-job-bundle",
    "version": 1,
    "job": {"id": 3, "stage": "execute", "state": "done", "cost_usd": "0.250000"},
    "plan": {"id": 1, "repository": "octo/widgets", "issue": 1, "state": "merged"},
    "files": {"prompt.md": "Make it good.", "agent.log": "done\n"},
    "cut": [],
}


def test_a_bundle_carries_the_jobs_record_and_every_file_of_its_folder(tmp_path: Path) -> None:
    (tmp_path / "prompt.md").write_text("Make it good.")
    (tmp_path / "agent.log").write_text("done\n")
    (tmp_path / "home").mkdir()  # the agent's home folder is not a log
    bundle = read_bundle(make_bundle(VERSION_1["job"], VERSION_1["plan"], tmp_path))
    assert bundle.files == VERSION_1["files"] and bundle.job["stage"] == "execute"


def test_a_log_past_the_limit_keeps_its_end_and_says_it_was_cut(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr("bot.dashboard.bundle.MAX_FILE_BYTES", 10)
    (tmp_path / "agent.log").write_text("0123456789the end")
    bundle = read_bundle(make_bundle({}, {}, tmp_path))
    assert bundle.files["agent.log"] == "456789the end"[-10:] and bundle.cut == ("agent.log",)


def test_the_first_format_is_still_read() -> None:
    bundle = read_bundle(json.dumps(VERSION_1).encode())
    assert (bundle.version, bundle.plan["state"], bundle.cut) == (1, "merged", ())


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        pytest.param(b"{", "not JSON", id="not JSON"),
        pytest.param(b'{"format": "other"}', "not a gaffer-job-bundle", id="another format"),
        pytest.param(
            json.dumps({**VERSION_1, "version": 99}).encode(),
            "a newer gaffer wrote it",
            id="a newer version",
        ),
    ],
)
def test_what_is_not_a_readable_bundle_is_refused_saying_why(raw: bytes, why: str) -> None:
    with pytest.raises(BundleError, match=why):
        read_bundle(raw)
