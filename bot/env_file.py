"""Save a new App's credentials in `.env` (mode 0600), never replacing an App's unasked.

`gaffer` reads `.env` from the directory it starts in (bot/cli.py). The private key goes
in a file of its own beside it, named by PRIVATE_KEY_PATH; every other line of an existing
`.env` is kept as it was.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass
from pathlib import Path

from dotenv.parser import parse_stream

# What identifies an App to gaffer: one App's values never mix with another's.
APP_SETTINGS = (
    "APP_ID",
    "PRIVATE_KEY",
    "PRIVATE_KEY_PATH",
    "WEBHOOK_SECRET",
    "GITHUB_CLIENT_ID",
    "GITHUB_CLIENT_SECRET",
)
_PLAIN = re.compile(r"[A-Za-z0-9_./:@+-]*")


class AppSettingsPresent(Exception):
    """The `.env` already holds an App's settings, and replacing them was not asked for."""


@dataclass(frozen=True)
class AppCredentials:
    """What GitHub hands over once, when it creates an App from a manifest."""

    app_id: int
    slug: str
    pem: str
    webhook_secret: str
    client_id: str
    client_secret: str


def app_settings_in(env_path: Path) -> list[str]:
    """Return the App settings an existing `.env` defines, in file order."""
    if not env_path.exists():
        return []
    return [key for key in _keys(env_path.read_text(encoding="utf-8")) if key in APP_SETTINGS]


def refuse_replacing(env_path: Path) -> None:
    """Raise AppSettingsPresent when `.env` already holds an App's settings."""
    present = app_settings_in(env_path)
    if present:
        raise AppSettingsPresent(
            f"{env_path} already holds {', '.join(present)}: move it aside, "
            "or pass --force to replace them"
        )


def save_app_credentials(env_path: Path, app: AppCredentials, *, replace: bool) -> Path:
    """Write the key file and `.env`, both 0600; return the key file's path."""
    if not replace:
        refuse_replacing(env_path)
    key_path = env_path.with_name(f"{app.slug}.private-key.pem")
    _write_private(key_path, app.pem)
    kept = _without_app_settings(env_path.read_text(encoding="utf-8")) if env_path.exists() else ""
    values = {
        "APP_ID": str(app.app_id),
        # Relative to `.env`'s folder, where gaffer starts and reads it.
        "PRIVATE_KEY_PATH": key_path.name,
        "WEBHOOK_SECRET": app.webhook_secret,
        "GITHUB_CLIENT_ID": app.client_id,
        "GITHUB_CLIENT_SECRET": app.client_secret,
    }
    block = f"# The GitHub App {app.slug}, created by `gaffer setup`.\n" + "".join(
        f"{name}={_quoted(value)}\n" for name, value in values.items()
    )
    if kept and not kept.endswith("\n"):
        kept += "\n"
    _write_private(env_path, kept + block)
    return key_path


def _keys(text: str) -> list[str]:
    return [binding.key for binding in parse_stream(io.StringIO(text)) if binding.key]


def _without_app_settings(text: str) -> str:
    """Return the file's text without its App settings, every other line as written."""
    bindings = parse_stream(io.StringIO(text))
    return "".join(b.original.string for b in bindings if b.key not in APP_SETTINGS)


def _quoted(value: str) -> str:
    """Write a value python-dotenv reads back unchanged."""
    if _PLAIN.fullmatch(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _write_private(path: Path, text: str) -> None:
    """Replace a file in one step, readable by its owner only from its first byte."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
