"""A job as one file: its record, its plan, its prompt and every log, for a bug report or an
audit. The format is versioned; `read_bundle` reads every version gaffer ever wrote."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "gaffer-job-bundle"
VERSION = 1
MAX_FILE_BYTES = 5 * 1024 * 1024  # a log past this is cut, and the bundle says so


class BundleError(ValueError):
    """The file is not a job bundle gaffer can read; the message says why."""


@dataclass(frozen=True)
class JobBundle:
    version: int
    job: dict[str, Any]
    plan: dict[str, Any]
    files: dict[str, str]
    cut: tuple[str, ...]


def make_bundle(job: dict[str, Any], plan: dict[str, Any], folder: Path | None) -> bytes:
    """The bundle's bytes: JSON holding the job's row, its plan and the files in its folder."""
    files, cut = {}, []
    for path in sorted(folder.iterdir()) if folder and folder.is_dir() else []:
        if not path.is_file():
            continue
        raw = path.read_bytes()
        if len(raw) > MAX_FILE_BYTES:
            cut.append(path.name)
            raw = raw[-MAX_FILE_BYTES:]
        files[path.name] = raw.decode("utf-8", errors="replace")
    document = {
        "format": FORMAT,
        "version": VERSION,
        "job": job,
        "plan": plan,
        "files": files,
        "cut": cut,
    }
    return json.dumps(document, indent=1, sort_keys=True).encode()


def read_bundle(raw: bytes) -> JobBundle:
    """Read a bundle of any version up to this one."""
    try:
        document = json.loads(raw)
    except ValueError as error:
        raise BundleError(f"not JSON: {error}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise BundleError(f"not a {FORMAT} file")
    version = document.get("version")
    if not isinstance(version, int) or not 1 <= version <= VERSION:
        raise BundleError(
            f"version {version!r} is not one this gaffer reads (1 to {VERSION}): a newer "
            "gaffer wrote it"
        )
    return JobBundle(
        version,
        document["job"],
        document["plan"],
        dict(document.get("files", {})),
        tuple(document.get("cut", ())),
    )
