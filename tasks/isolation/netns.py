"""Run a command with no network: in a fresh network namespace, where this worker can make one."""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess

PROBE_TIMEOUT_S = 10


@functools.cache
def offline_prefix() -> tuple[str, ...] | None:
    """Return the argv prefix that runs a command without network, or None if none works here.

    Probed once per worker process: `unshare --net` as root, otherwise in a user namespace
    of its own (`--map-root-user`), which needs unprivileged user namespaces enabled.
    """
    for prefix in _candidates():
        if _works(prefix):
            return prefix
    return None


def _candidates() -> list[tuple[str, ...]]:
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    as_user = (unshare, "--map-root-user", "--net", "--")
    if os.geteuid() == 0:
        return [(unshare, "--net", "--"), as_user]
    return [as_user]


def _works(prefix: tuple[str, ...]) -> bool:
    """Return True when prefix starts a command in a new namespace with loopback up."""
    try:
        probe = subprocess.run(
            [*prefix, *_loopback_up(), "true"],
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


@functools.cache
def _loopback_up() -> tuple[str, ...]:
    """Return argv that brings loopback up in the new namespace, then runs the command."""
    # A new namespace has only `lo`, and it is down; test suites that serve on 127.0.0.1
    # expect it. Nothing outside the namespace becomes reachable.
    ip, sh = shutil.which("ip"), shutil.which("sh")
    if ip is None or sh is None:
        return ()
    script = f'{shlex.quote(ip)} link set lo up 2>/dev/null; exec "$@"'
    return (sh, "-c", script, "gaffer-offline")


def offline_argv(argv: list[str]) -> list[str] | None:
    """Return argv run without network, or None when this worker cannot isolate it."""
    prefix = offline_prefix()
    if prefix is None:
        return None
    return [*prefix, *_loopback_up(), *argv]
