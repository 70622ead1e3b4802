"""Run git with no hooks, no user config, a fixed identity and the token only in the environment."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

BOT_NAME = "gaffer[bot]"
BOT_EMAIL = "gaffer[bot]@users.noreply.github.com"
PASSED_ENV_NAMES = (
    "PATH",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "GIT_SSL_CAINFO",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)
# What a repository's own config could add to make gaffer's git run a program or send its
# token elsewhere is switched off on the command line, which wins over every config file.
SAFE_OPTIONS = (
    *("-c", "core.hooksPath=/dev/null"),
    *("-c", "credential.helper="),
    *("-c", "core.fsmonitor=false"),
    *("-c", "protocol.ext.allow=never"),
    # Worktrees belong to the sandbox's uid; gaffer names the git folder itself (git_dir).
    *("-c", "safe.directory=*"),
)


class GitError(Exception):
    """A git command failed; the message holds its (redacted) stderr."""


def basic_auth_header(token: str) -> str:
    """Return the HTTP Authorization header GitHub accepts for an installation token."""
    pair = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return f"Authorization: Basic {pair}"


def redact(text: str, token: str | None) -> str:
    """Replace the token, and its Basic-auth form, with asterisks."""
    if not token:
        return text
    encoded = basic_auth_header(token).removeprefix("Authorization: Basic ")
    return text.replace(token, "***").replace(encoded, "***")


def git_env(token: str | None) -> dict[str, str]:
    """Build git's environment: isolated config, bot identity, and the token as a header."""
    env = {name: os.environ[name] for name in PASSED_ENV_NAMES if name in os.environ}
    env.update(
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL="/dev/null",
        LC_ALL="C",
        GIT_AUTHOR_NAME=BOT_NAME,
        GIT_AUTHOR_EMAIL=BOT_EMAIL,
        GIT_COMMITTER_NAME=BOT_NAME,
        GIT_COMMITTER_EMAIL=BOT_EMAIL,
    )
    if token:
        env.update(
            GIT_CONFIG_COUNT="1",
            GIT_CONFIG_KEY_0="http.extraHeader",
            GIT_CONFIG_VALUE_0=basic_auth_header(token),
        )
    return env


def git(
    args: Sequence[str],
    *,
    cwd: Path,
    token: str | None = None,
    timeout: float = 600,
    git_dir: Path | None = None,
    answers: tuple[int, ...] = (0,),
    stdin: str | None = None,
) -> str:
    """Run one git command, with stdin as its input, and return its stdout without the
    trailing newline.

    With git_dir, cwd is the work tree and its `.git` (which an agent could rewrite) is
    never read. answers: the exit codes that are answers, not failures (`merge-tree` says
    "conflicts" with 1).
    """
    place = [] if git_dir is None else [f"--git-dir={git_dir}", f"--work-tree={cwd}"]
    argv = ["git", *SAFE_OPTIONS, *place, *args]
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=git_env(token),
        stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    given = None if stdin is None else stdin.encode()
    try:
        out, err = proc.communicate(given, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise GitError(f"git {_name(args)} timed out after {timeout:g} s") from None
    if proc.returncode not in answers:
        message = err.decode("utf-8", errors="replace").strip()
        raise GitError(redact(f"git {_name(args)} failed ({proc.returncode}): {message}", token))
    return out.decode("utf-8", errors="replace").rstrip("\n")


def _name(args: Sequence[str]) -> str:
    """Return the subcommand for messages (first argument that is not an option)."""
    return next((a for a in args if not a.startswith("-")), "")
