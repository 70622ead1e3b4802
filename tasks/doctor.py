"""`gaffer doctor`: check what a running gaffer needs, each with a fix when it fails.

Run as `python -m tasks.doctor` (`gaffer doctor` runs it). It checks, in order: the
settings, the database and its schema, the broker, GitHub (signing in as the App), the
scheduler's and reconciler's heartbeats, the sandbox on this machine, and the CLI of the
default agent and of every agent the server settings define. Exit status 0 when all pass.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from github import Auth, GithubIntegration
from kombu import Connection

from bot.db import Database, without_password
from bot.heartbeats import last_heartbeats, punctuality
from bot.migrate import alembic_config
from bot.settings import Settings, SettingsError
from tasks.agents.definitions import AgentConfigError, AgentSpec, load_agents
from tasks.isolation.sandbox import Sandbox, SandboxUnavailable


@dataclass(frozen=True)
class Finding:
    """One check: what it found, and what to do when it failed."""

    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        fix = f"\n      fix: {self.fix}" if self.fix and not self.ok else ""
        return f"{mark} {self.name}: {self.detail}{fix}"


def examine(env: dict[str, str] | None = None) -> Iterator[Finding]:
    """Yield each check's finding; the settings come first, and nothing else runs without."""
    try:
        settings = Settings.from_env(env, calling_github=True)
    except SettingsError as error:
        yield Finding("settings", False, str(error), "set or correct the values named")
        return
    yield Finding("settings", True, "every value reads")
    for check in CHECKS:
        try:
            yield check(settings)
        except Exception as error:  # noqa: BLE001 - a check that breaks is a finding too
            yield Finding(check.__name__.strip("_"), False, f"{type(error).__name__}: {error}")


def _database(settings: Settings) -> Finding:
    shown = without_password(settings.database_url)
    database = Database(settings.database_url)
    try:
        with database.engine.connect() as connection:
            current = MigrationContext.configure(connection).get_current_revision()
    except Exception as error:  # noqa: BLE001 - drivers raise many kinds
        return Finding(
            "database", False, f"{shown} cannot be reached: {error}", "start it or fix DATABASE_URL"
        )
    finally:
        database.dispose()
    head = ScriptDirectory.from_config(alembic_config(settings.database_url)).get_current_head()
    if current != head:
        return Finding(
            "database",
            False,
            f"{shown} is at schema {current or 'none'}, gaffer needs {head}",
            "run `gaffer db upgrade` (`gaffer run` does it on start)",
        )
    return Finding("database", True, f"{shown}, schema {head}")


def _broker(settings: Settings) -> Finding:
    shown = without_password(settings.broker_url)
    try:
        with Connection(settings.broker_url, connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1, timeout=3)
    except Exception as error:  # noqa: BLE001 - transports raise many kinds
        return Finding(
            "broker", False, f"{shown} cannot be reached: {error}", "start Redis or fix BROKER_URL"
        )
    return Finding("broker", True, shown)


def _github(settings: Settings) -> Finding:
    assert settings.app_id is not None and settings.private_key is not None  # settings checked
    auth = Auth.AppAuth(int(settings.app_id), settings.private_key)
    try:
        app = GithubIntegration(auth=auth, base_url=settings.github_api_url).get_app()
    except Exception as error:  # noqa: BLE001 - network and API errors alike
        return Finding(
            "github",
            False,
            f"cannot sign in to {settings.github_api_url} as App {settings.app_id}: {error}",
            "check that APP_ID and the private key belong to the same App, and that "
            "GITHUB_API_URL is reachable from here",
        )
    return Finding("github", True, f"signed in as the App {app.slug!r} (id {app.id})")


def _scheduler(settings: Settings) -> Finding:
    database = Database(settings.database_url)
    try:
        shown = punctuality(last_heartbeats(database), settings.reconcile_every_s)
    finally:
        database.dispose()
    late = {name: said for name, said in shown.items() if said != "on time"}
    if late:
        told = ", ".join(f"{name} {said}" for name, said in late.items())
        return Finding(
            "scheduler",
            False,
            told,
            "run exactly one `github` worker with `--beat` (`gaffer run` starts one)",
        )
    return Finding("scheduler", True, "beat and the reconciler are on time")


def _sandbox(settings: Settings) -> Finding:
    sandbox = Sandbox.from_settings(settings, {})
    if not sandbox.enabled:
        return Finding("sandbox", True, "off (`sandbox: none`): agents run without isolation")
    try:
        sandbox.check()
    except SandboxUnavailable as missing:
        return Finding("sandbox", False, str(missing), "see deploy/README.md")
    return Finding("sandbox", True, "bubblewrap isolates agents and checks on this machine")


def _agents(settings: Settings) -> Finding:
    try:
        agents = load_agents(settings.server_config.get("agents"))
    except AgentConfigError as error:
        return Finding("agents", False, str(error), "correct `agents:` in GAFFER_CONFIG")
    wanted = [settings.default_agent] if settings.default_agent else []
    wanted += [name for name in settings.server_config.get("agents") or {} if name not in wanted]
    if not wanted:
        return Finding(
            "agents",
            False,
            "no agent is chosen: GAFFER_DEFAULT_AGENT is not set and GAFFER_CONFIG defines none",
            "set GAFFER_DEFAULT_AGENT (e.g. `claude`) or `agent:` in each repository's config",
        )
    missing = [name for name in wanted if name not in agents]
    if missing:
        return Finding("agents", False, f"unknown agent {missing[0]!r}", f"one of {sorted(agents)}")
    found = [_cli(agents[name]) for name in wanted]
    absent = [name for name, where in zip(wanted, found, strict=True) if where is None]
    if absent:
        return Finding(
            "agents",
            False,
            f"the CLI of {', '.join(absent)} is not on PATH",
            "install it where the agent workers run (README: Running it for real)",
        )
    shown = ", ".join(f"{name} ({where})" for name, where in zip(wanted, found, strict=True))
    return Finding("agents", True, shown)


def _cli(spec: AgentSpec) -> str | None:
    """Where an agent's program is and what it says its version is, or None if absent."""
    program = spec.command[0].replace("{python}", sys.executable)
    path = shutil.which(program)
    if path is None:
        return None
    try:
        said = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=20, check=False
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        said = ""
    first = said.splitlines()[0][:60] if said else ""
    return f"{path}{', ' + first if first else ''}"


CHECKS: tuple[Callable[[Settings], Finding], ...] = (
    _database,
    _broker,
    _github,
    _scheduler,
    _sandbox,
    _agents,
)


def main() -> int:
    failed = False
    for finding in examine():
        print(finding.line(), flush=True)
        failed = failed or not finding.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
