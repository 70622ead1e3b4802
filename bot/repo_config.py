"""A repository's gaffer settings: shipped defaults, server defaults, then .github/gaffer.yml."""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

DEFAULTS_FILE = Path(__file__).resolve().parent.parent / "config" / "gaffer.yml"
REPO_CONFIG_PATH = ".github/gaffer.yml"
# A real config is a few hundred bytes; parsing a megabyte of YAML takes seconds.
MAX_CONFIG_BYTES = 64 * 1024
# A check's name names its check run and its log and home folders: a short name, no path.
CHECK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
# gaffer's built-in checks, run after the repository's own (tasks/stages/verification.py
# holds what each does); a repository's check of one of these names would be taken for it.
# A built-in check may end `neutral` (a warning) and still count as green.
DIFF_CHECK = "diff"
BUILT_IN_CHECKS = (DIFF_CHECK,)
RESERVED_CHECK_NAMES = frozenset(BUILT_IN_CHECKS)


# A plan's priority, 0 the most urgent: the repository's `priority`, or an issue's label
# `gaffer: p0` .. `gaffer: p3`. Under a concurrency limit the more urgent job goes first.
DEFAULT_PRIORITY = 2
LOWEST_PRIORITY = 3
MAX_CONCURRENCY = 100
# Best-of-N: at most this many candidates of one plan.
MAX_CANDIDATES = 5
PRIORITY_LABEL = re.compile(r"gaffer:\s*p([0-3])", re.IGNORECASE)


def priority_in_labels(labels: list[dict[str, Any]]) -> int | None:
    """The most urgent `gaffer: pN` label among an issue's labels, or None."""
    found = [PRIORITY_LABEL.fullmatch((label.get("name") or "").strip()) for label in labels]
    return min((int(match[1]) for match in found if match), default=None)


class RepoConfigError(Exception):
    """The repository's config is invalid; the message says what to fix."""


@dataclass(frozen=True)
class Check:
    name: str
    run: str
    timeout: int = 600
    # None: the server's `check_memory_mb`; a number asks for less (the server's is the cap).
    memory_mb: int | None = None

    def __post_init__(self) -> None:
        # Folders are named after checks: no Check exists whose name could be a path.
        problem = check_name_problem(self.name)
        if problem:
            raise RepoConfigError(f"check {_shown(self.name)}: {problem}")


def _shown(name: str) -> str:
    """Quote a refused name as inline code, its hidden characters escaped."""
    escaped = json.dumps(name[:80]).replace("`", "\\u0060")
    return f"`{escaped}`"


def check_name_problem(name: str) -> str | None:
    """Say what is wrong with a check's name, or None when it is a short name."""
    if not CHECK_NAME.fullmatch(name):
        return (
            "a check's name is 1 to 64 letters, digits, `.`, `_` or `-`, starting with a "
            "letter or digit (no spaces, slashes or paths)"
        )
    if name.lower() in RESERVED_CHECK_NAMES:
        return f"`{name}` is the name of gaffer's own diff check"
    return None


@dataclass(frozen=True)
class Budget:
    plan_usd: Decimal | None = None
    daily_usd: Decimal | None = None


@dataclass(frozen=True)
class RepoConfig:
    label: str = "gaffer"
    agent: str | None = None
    model: str | None = None
    approvers: tuple[str, ...] = ()
    approver_teams: tuple[str, ...] = ()
    allow_self_approval: bool = False
    setup: str | None = None
    checks: tuple[Check, ...] = ()
    max_retries: int = 2
    protected_paths: tuple[str, ...] = ()
    require_green: bool = True
    checks_network: bool = True
    budget: Budget = field(default_factory=Budget)
    priority: int = DEFAULT_PRIORITY
    # Agent jobs of this repository at once; the server's own limit, if lower, wins.
    concurrency: int | None = None
    # Best-of-N: each candidate's agent, None for the plan's own; () runs one (no candidates).
    candidates: tuple[str | None, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)


def load_repo_config(
    text: str | None, server_defaults: Mapping[str, Any] | None = None
) -> RepoConfig:
    """Merge the layers and validate them into a RepoConfig."""
    return _merged(_parse(text), server_defaults)


def fetch_repo_config(client: Any, server_defaults: Mapping[str, Any] | None = None) -> RepoConfig:
    """Read the repository's config from its default branch, never from a plan branch."""
    found = client.small_file_on_default_branch(REPO_CONFIG_PATH, MAX_CONFIG_BYTES)
    return _config_in(found, server_defaults)


def fetch_recent_repo_config(
    client: Any, server_defaults: Mapping[str, Any] | None = None
) -> RepoConfig:
    """Read the config as of the default branch's head seen in the last minute or so.

    For commands, which come in floods: the file is fetched once per (repository, head).
    """
    found = client.recent_file_on_default_branch(REPO_CONFIG_PATH, MAX_CONFIG_BYTES)
    return _config_in(found, server_defaults)


def _config_in(found: Any, server_defaults: Mapping[str, Any] | None) -> RepoConfig:
    if found is None:
        return load_repo_config(None, server_defaults)
    if found.text is None:
        raise RepoConfigError(_too_big(found.size))
    return _merged(copy.deepcopy(_parsed_blob(_Blob(found.sha, found.text))), server_defaults)


@dataclass(frozen=True)
class _Blob:
    sha: str
    # The blob SHA names the text, so the SHA alone is the cache key.
    text: str = field(compare=False, repr=False)


@functools.lru_cache(maxsize=64)
def _parsed_blob(blob: _Blob) -> dict[str, Any]:
    """Parse a config file once per blob: every command reads the config again."""
    return _parse(blob.text)


def _merged(repo_layer: dict[str, Any], server_defaults: Mapping[str, Any] | None) -> RepoConfig:
    merged: dict[str, Any] = dict(_shipped_defaults())
    merged.update(server_defaults or {})
    merged.update(repo_layer)
    return _validate(merged)


@functools.cache
def _shipped_defaults() -> Mapping[str, Any]:
    return dict(yaml.safe_load(DEFAULTS_FILE.read_text()) or {})


def _too_big(size: int) -> str:
    return (
        f"{REPO_CONFIG_PATH} is {size:,} bytes; gaffer reads at most "
        f"{MAX_CONFIG_BYTES:,} bytes ({MAX_CONFIG_BYTES // 1024} KiB)"
    )


def _parse(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_CONFIG_BYTES:
        raise RepoConfigError(_too_big(size))
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise RepoConfigError(f"{REPO_CONFIG_PATH} is not valid YAML: {error}") from error
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise RepoConfigError(f"{REPO_CONFIG_PATH} must be a mapping of settings")
    return loaded


def _validate(raw: dict[str, Any]) -> RepoConfig:
    known = RepoConfig.__dataclass_fields__.keys() - {"extra"}
    extra = {key: value for key, value in raw.items() if key not in known}
    return RepoConfig(
        label=_text(raw, "label", required=True) or "gaffer",
        agent=_text(raw, "agent"),
        model=_text(raw, "model"),
        approvers=tuple(_list_of_text(raw, "approvers")),
        approver_teams=tuple(_teams(raw)),
        allow_self_approval=_bool(raw, "allow_self_approval"),
        setup=_text(raw, "setup"),
        checks=tuple(_checks(raw.get("checks") or [])),
        max_retries=_int(raw, "max_retries", low=0, high=10),
        protected_paths=tuple(_list_of_text(raw, "protected_paths")),
        require_green=_bool(raw, "require_green"),
        checks_network=_bool(raw, "checks_network"),
        budget=_budget(raw.get("budget") or {}),
        priority=_int(raw, "priority", low=0, high=LOWEST_PRIORITY),
        concurrency=None
        if raw.get("concurrency") is None
        else _int(raw, "concurrency", low=1, high=MAX_CONCURRENCY),
        candidates=_candidates(raw.get("candidates")),
        extra=extra,
    )


def _candidates(value: Any) -> tuple[str | None, ...]:
    """`candidates: 3` (the plan's agent three times) or a list of agent names."""
    if value is None or (value == 1 and not isinstance(value, bool)):
        return ()
    if isinstance(value, int) and not isinstance(value, bool) and 2 <= value <= MAX_CANDIDATES:
        return (None,) * value
    if (
        isinstance(value, list)
        and 2 <= len(value) <= MAX_CANDIDATES
        and all(isinstance(name, str) and name.strip() for name in value)
    ):
        return tuple(name.strip() for name in value)
    raise RepoConfigError(
        f"`candidates` must be a whole number from 1 to {MAX_CANDIDATES} or a list of 2 to "
        f"{MAX_CANDIDATES} agent names"
    )


def _text(raw: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
    value = raw.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise RepoConfigError(f"`{key}` must be a non-empty string")
    return value.strip()


def _list_of_text(raw: Mapping[str, Any], key: str) -> list[str]:
    value = raw.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RepoConfigError(f"`{key}` must be a list of strings")
    return value


def _teams(raw: Mapping[str, Any]) -> list[str]:
    teams = _list_of_text(raw, "approver_teams")
    for team in teams:
        if team.count("/") != 1 or not all(team.split("/")):
            raise RepoConfigError(f"`approver_teams` entries are `org/team-slug`; `{team}` is not")
    return teams


def _int(raw: Mapping[str, Any], key: str, *, low: int, high: int) -> int:
    value = raw.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise RepoConfigError(f"`{key}` must be a whole number from {low} to {high}")
    return value


def _bool(raw: Mapping[str, Any], key: str) -> bool:
    value = raw.get(key)
    if not isinstance(value, bool):
        raise RepoConfigError(f"`{key}` must be true or false")
    return value


def _budget(raw: Any) -> Budget:
    if not isinstance(raw, dict):
        raise RepoConfigError("`budget` must be a mapping with `plan_usd` and `daily_usd`")
    return Budget(_usd(raw, "plan_usd"), _usd(raw, "daily_usd"))


def _usd(raw: Mapping[str, Any], key: str) -> Decimal | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise RepoConfigError(f"`budget.{key}` must be a positive number of dollars")
    return Decimal(str(value))


def _checks(items: Any) -> list[Check]:
    if not isinstance(items, list):
        raise RepoConfigError("`checks` must be a list of {name, run, timeout}")
    checks = [_check(item, index) for index, item in enumerate(items, 1)]
    names = [check.name for check in checks]
    if len(names) != len(set(names)):
        raise RepoConfigError("`checks` names must be unique")
    return checks


def _check(item: Any, index: int) -> Check:
    if (
        not isinstance(item, dict)
        or not isinstance(item.get("name"), str)
        or not isinstance(item.get("run"), str)
    ):
        raise RepoConfigError(f"check {index} needs a `name` and a `run` command (strings)")
    problem = check_name_problem(item["name"])
    if problem:
        raise RepoConfigError(f"check {index} ({_shown(item['name'])}): {problem}")
    timeout = item.get("timeout", 600)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= 21600:
        raise RepoConfigError(f"check `{item['name']}`: `timeout` must be 1 to 21600 seconds")
    memory_mb = item.get("memory_mb")
    if memory_mb is not None and (
        not isinstance(memory_mb, int) or isinstance(memory_mb, bool) or memory_mb <= 0
    ):
        raise RepoConfigError(f"check `{item['name']}`: `memory_mb` must be a positive number")
    return Check(name=item["name"], run=item["run"], timeout=timeout, memory_mb=memory_mb)
