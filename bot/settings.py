"""Read gaffer's settings from the environment, once, when the app is built."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from github import Auth
from standardwebhooks import Webhook

from bot.jam.report import JamConfigError, parse_routes

T = TypeVar("T")


class SettingsError(Exception):
    """A setting is missing or malformed; gaffer refuses to start."""


@dataclass(frozen=True)
class Settings:
    webhook_secrets: tuple[str, ...]
    home: Path
    database_url: str
    broker_url: str
    github_api_url: str = "https://api.github.com"
    # Where people sign in and Apps are created: github.com, or a GitHub Enterprise host.
    github_web_url: str = "https://github.com"
    app_id: str | None = None
    private_key: str | None = None
    port: int = 8000
    # None: each repository must name its agent; the `script` agent only when chosen.
    default_agent: str | None = None
    server_config: Mapping[str, Any] = field(default_factory=dict)
    max_body_bytes: int = 25 * 1024 * 1024
    # Prepended to every broker key, so deployments (or test runs) can share one Redis.
    broker_key_prefix: str = ""
    # The Jam receiver exists only with a secret; the token only adds enrichment.
    jam_webhook_secret: str | None = None
    jam_token: str | None = None
    # How long a job stays a worker's without a heartbeat (one beat every third of it).
    lease_seconds: int = 60
    # `json`: one JSON object per log line, with the delivery, plan and job ids (bot/logs.py).
    log_format: str = "text"
    # Bearer tokens the REST API (bot/api.py) accepts; none: the API is off.
    api_tokens: tuple[str, ...] = ()
    # How long the web front waits for a request's whole body (bot/asgi.py). GitHub gives
    # up on a delivery after 10 s, so a body slower than that is never one of GitHub's.
    body_seconds: int = 10
    # The App's OAuth client: people sign in to the dashboard with it (bot/dashboard).
    # Without both, the dashboard says how to turn it on.
    github_client_id: str | None = None
    github_client_secret: str | None = None
    # Signs the dashboard's session cookie; derived from the client secret when unset.
    session_secret: str | None = None

    @property
    def embedded(self) -> bool:
        """Tell whether gaffer runs on its server-less default (SQLite and the SQL broker)."""
        return self.broker_url.startswith("sqla+")

    @property
    def unsandboxed(self) -> bool:
        """Tell whether the operator chose to run agents and checks without the sandbox."""
        return self.server_config.get("sandbox") == "none"

    @property
    def reconcile_every_s(self) -> float:
        """How often the scheduler runs the reconciler (`reconcile_every_s`, 60 by default)."""
        every = self.server_config.get("reconcile_every_s", 60)
        if isinstance(every, bool) or not isinstance(every, int | float) or every < 1:
            raise SettingsError(
                "reconcile_every_s in GAFFER_CONFIG must be a number of seconds ≥ 1"
            )
        return float(every)

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        receiving: bool = True,
        calling_github: bool = False,
    ) -> Settings:
        """Build settings from an environment mapping (os.environ by default).

        receiving: the process takes webhooks or works on them, so WEBHOOK_SECRET must be
        set; the offline commands (`gaffer cost`, `gaffer db upgrade`) pass False.
        calling_github: the process talks to GitHub as the App (the workers, `gaffer run`),
        so APP_ID and a private key that reads as one must be set.

        Every missing or malformed value is named in one SettingsError, before anything
        starts.
        """
        env = os.environ if env is None else env
        problems: list[str] = []

        def read(parse: Callable[[], T], fallback: T) -> T:
            try:
                return parse()
            except SettingsError as error:
                problems.append(str(error))
                return fallback

        home = Path(env.get("GAFFER_HOME", "./.gaffer")).resolve()
        raw_secret = env.get("WEBHOOK_SECRET", "")
        settings = cls(
            webhook_secrets=read(lambda: _secrets(raw_secret), ())
            if receiving or raw_secret.strip()
            else (),
            home=home,
            database_url=env.get("DATABASE_URL") or f"sqlite:///{home / 'gaffer.sqlite'}",
            broker_url=env.get("BROKER_URL") or f"sqla+sqlite:///{home / 'broker.sqlite'}",
            github_api_url=env.get("GITHUB_API_URL", "https://api.github.com").rstrip("/"),
            github_web_url=env.get("GITHUB_WEB_URL", "https://github.com").rstrip("/"),
            app_id=env.get("APP_ID", "").strip() or None,
            private_key=read(lambda: _private_key(env), None),
            # Platforms and container runtimes that choose the port name it PORT.
            port=read(lambda: _whole_number(env, _port_variable(env), 8000, 1, 65535), 8000),
            default_agent=env.get("GAFFER_DEFAULT_AGENT") or None,
            server_config=read(
                lambda: _limits_checked(
                    _jam_routes_checked(_server_config(env.get("GAFFER_CONFIG")))
                ),
                {},
            ),
            jam_webhook_secret=read(
                lambda: _jam_secret(env.get("JAM_WEBHOOK_SECRET", "").strip()), None
            ),
            jam_token=env.get("JAM_TOKEN", "").strip() or None,
            broker_key_prefix=env.get("GAFFER_BROKER_PREFIX", ""),
            # A heartbeat every third of the lease; under 3 s the beats would crowd the database.
            lease_seconds=read(lambda: _whole_number(env, "GAFFER_LEASE_SECONDS", 60, 3, 3600), 60),
            body_seconds=read(lambda: _whole_number(env, "GAFFER_BODY_SECONDS", 10, 1, 60), 10),
            api_tokens=read(lambda: _api_tokens(env.get("GAFFER_API_TOKENS", "")), ()),
            log_format=read(lambda: _log_format(env.get("GAFFER_LOG_FORMAT", "text")), "text"),
            github_client_id=env.get("GITHUB_CLIENT_ID", "").strip() or None,
            github_client_secret=env.get("GITHUB_CLIENT_SECRET", "").strip() or None,
            session_secret=env.get("GAFFER_SESSION_SECRET", "").strip() or None,
        )
        if calling_github:
            problems += _app_identity_problems(settings, env)
        if len(problems) == 1:
            raise SettingsError(problems[0])
        if problems:
            listed = "\n".join(f"  - {problem}" for problem in problems)
            raise SettingsError(f"{len(problems)} settings need fixing:\n{listed}")
        return settings


def _app_identity_problems(settings: Settings, env: Mapping[str, str]) -> list[str]:
    """What keeps the process from signing in to GitHub as the App."""
    problems = []
    if settings.app_id is None:
        problems.append("APP_ID is not set: the App's numeric id, from its settings page")
    elif not settings.app_id.isdigit():
        problems.append(f"APP_ID must be the App's numeric id, not {settings.app_id!r}")
    if settings.private_key is None:
        if not env.get("PRIVATE_KEY_PATH"):  # an unreadable path is named already
            problems.append(
                "PRIVATE_KEY_PATH (or PRIVATE_KEY) is not set: the App's private key, "
                "the .pem file GitHub made for it"
            )
    elif not _signs(settings.private_key):
        problems.append(
            "the private key (PRIVATE_KEY or PRIVATE_KEY_PATH) is not a PEM RSA private key: "
            "use the .pem file GitHub made for the App"
        )
    return problems


def _signs(key: str) -> bool:
    """Tell whether a key can sign the App's tokens."""
    try:
        Auth.AppAuth(1, key).create_jwt()
    except Exception:  # noqa: BLE001 - the libraries raise several kinds for a bad key
        return False
    return True


def _log_format(raw: str) -> str:
    if raw.strip().lower() not in ("text", "json"):
        raise SettingsError(f"GAFFER_LOG_FORMAT must be text or json, not {raw!r}")
    return raw.strip().lower()


def _api_tokens(raw: str) -> tuple[str, ...]:
    tokens = tuple(token.strip() for token in raw.split(",") if token.strip())
    if any(len(token) < 20 for token in tokens):
        raise SettingsError("GAFFER_API_TOKENS must hold tokens of at least 20 characters")
    return tokens


def _secrets(raw: str) -> tuple[str, ...]:
    secrets = tuple(s.strip() for s in raw.split(",") if s.strip())
    if not secrets:
        raise SettingsError(
            "WEBHOOK_SECRET is not set: gaffer refuses to accept unsigned webhooks. "
            "Set it to the App's webhook secret (a comma-separated list while rotating)."
        )
    return secrets


def _port_variable(env: Mapping[str, str]) -> str:
    return "GAFFER_PORT" if "GAFFER_PORT" in env or "PORT" not in env else "PORT"


def _whole_number(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name, str(default))
    if not raw.strip().isdigit() or not low <= int(raw) <= high:
        raise SettingsError(f"{name} must be a whole number from {low} to {high}")
    return int(raw)


def _jam_secret(raw: str) -> str | None:
    if not raw:
        return None
    # The library decodes leniently, so a mistyped key would only fail every delivery.
    key = raw.removeprefix("whsec_")
    try:
        if len(base64.b64decode(key + "=" * (-len(key) % 4), validate=True)) < 16:
            raise ValueError("too short")
        Webhook(raw)
    except Exception as error:  # binascii and the library raise several kinds
        raise SettingsError(
            "JAM_WEBHOOK_SECRET must be the whsec_… signing secret Jam shows for the webhook"
        ) from error
    return raw


def _jam_routes_checked(config: Mapping[str, Any]) -> Mapping[str, Any]:
    try:
        parse_routes(config)
    except JamConfigError as error:
        raise SettingsError(f"GAFFER_CONFIG: {error}") from error
    return config


# What `limits:` may set: one number for every repository or account, or one per name.
LIMIT_KEYS = {"repository": False, "account": False, "repositories": True, "accounts": True}


def _limits_checked(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """`limits:` (tasks/slots.py): whole numbers ≥ 1, alone or by repository and key name."""
    limits = config.get("limits") or {}
    if not isinstance(limits, dict) or set(limits) - set(LIMIT_KEYS):
        raise SettingsError(f"GAFFER_CONFIG: limits may set only {', '.join(LIMIT_KEYS)}")
    for key, value in limits.items():
        by_name = LIMIT_KEYS[key]
        numbers = value.values() if isinstance(value, dict) else [value]
        if by_name != isinstance(value, dict) or not all(_whole(each) for each in numbers):
            shape = "a mapping of names to whole numbers ≥ 1" if by_name else "a whole number ≥ 1"
            raise SettingsError(f"GAFFER_CONFIG: limits.{key} must be {shape}")
    return config


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _private_key(env: Mapping[str, str]) -> str | None:
    if env.get("PRIVATE_KEY"):
        return env["PRIVATE_KEY"].replace("\\n", "\n")
    path = env.get("PRIVATE_KEY_PATH")
    if not path:
        return None
    try:
        return Path(path).read_text()
    except OSError as error:
        raise SettingsError(f"PRIVATE_KEY_PATH {path!r} cannot be read: {error}") from error


def _server_config(path: str | None) -> Mapping[str, Any]:
    if not path:
        return {}
    try:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise SettingsError(f"GAFFER_CONFIG {path!r} cannot be read: {error}") from error
    if not isinstance(loaded, dict):
        raise SettingsError(f"GAFFER_CONFIG {path!r} must hold a mapping at the top level")
    return loaded
