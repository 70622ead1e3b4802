"""The `gaffer` command: run everything, or one part, and manage the database."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from dotenv import load_dotenv

from bot import app_setup, operator_cli
from bot.db import without_password
from bot.settings import Settings, SettingsError


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run the chosen command."""
    # The settings `gaffer setup` wrote, read as written; the environment's own values win.
    load_dotenv(Path.cwd() / ".env", override=False, interpolate=False, encoding="utf-8")
    parser = argparse.ArgumentParser(prog="gaffer", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="migrate, then start web, workers and beat together")
    commands.add_parser("web", help="serve the webhook receiver with gunicorn")
    commands.add_parser("demo", help="the whole lifecycle locally, against a GitHub double")
    commands.add_parser("doctor", help="check settings, database, broker, GitHub, sandbox, agents")
    app_setup.add_parser(commands)
    worker = commands.add_parser("worker", help="run a Celery worker")
    worker.add_argument("queues", nargs="?", default="github,agent")
    worker.add_argument(
        "--concurrency", default=None, help="jobs at once (agent queue: twice `agent_slots`)"
    )
    worker.add_argument("--beat", action="store_true")
    operator_cli.add_parsers(commands)
    db = commands.add_parser("db", help="database commands")
    db.add_argument("action", choices=["upgrade"])
    args = parser.parse_args(argv)
    if args.command == "demo":
        # The demo belongs to the GitHub double's package, which the product never imports.
        os.execv(sys.executable, [sys.executable, "-m", "double.demo"])
    if args.command == "doctor":
        # The doctor looks at the workers' side too (sandbox, agents): it lives in tasks/.
        os.execv(sys.executable, [sys.executable, "-m", "tasks.doctor"])
    try:
        settings = Settings.from_env(
            receiving=args.command not in _OFFLINE,
            calling_github=args.command in _CALLING_GITHUB,
        )
    except SettingsError as error:
        print(f"gaffer: {error}", file=sys.stderr)
        return 2
    try:
        return _COMMANDS[args.command](settings, args)
    except KeyboardInterrupt:
        print(f"gaffer {args.command}: stopped", file=sys.stderr)
        return 128 + signal.SIGINT


def _db(settings: Settings, _args: argparse.Namespace) -> int:
    from bot.migrate import upgrade

    upgrade(settings.database_url)
    print(f"gaffer: database at {without_password(settings.database_url)} is up to date")
    return 0


def _web(settings: Settings, _args: argparse.Namespace) -> int:
    # gunicorn takes this process's place, so a supervisor's SIGTERM reaches it.
    argv = _web_argv(settings)
    os.execv(argv[0], argv)


def _worker(_settings: Settings, args: argparse.Namespace) -> int:
    argv = [sys.executable, "-m", "tasks.worker", args.queues]
    argv += ["--concurrency", args.concurrency] if args.concurrency else []
    argv += ["--beat"] if args.beat else []
    os.execv(argv[0], argv)


def _run(settings: Settings, args: argparse.Namespace) -> int:
    _db(settings, args)
    stop = _Stop()  # before any part starts, so none is left behind by an early Ctrl-C
    children = [
        _child(_web_argv(settings)),
        _child(
            [sys.executable, "-m", "tasks.worker", "github", "--concurrency", "4", "--beat"]
            + ["--name", "github@%h"]
        ),
        _child([sys.executable, "-m", "tasks.worker", "agent", "--name", "agent@%h"]),
    ]
    print(
        f"gaffer: listening on http://0.0.0.0:{settings.port} "
        f"({'embedded' if settings.embedded else 'servers'}); Ctrl-C stops everything"
    )
    return _supervise(children, stop)


def _child(argv: list[str]) -> subprocess.Popen[bytes]:
    # Each part in its own process group: a terminal's Ctrl-C reaches gaffer alone, which
    # stops the parts in order, rather than catching a part halfway through its start.
    return subprocess.Popen(argv, process_group=0)


# How long the parts may take to stop once asked (a worker's warm shutdown waits for its
# running tasks); then they are killed, and a killed job is taken up again later.
_STOP_GRACE_S = 30


class _Stop:
    """SIGINT, SIGTERM or SIGHUP noted, not raised: the supervisor stops the parts when it
    sees it."""

    def __init__(self) -> None:
        self.asked = False
        # The terminal closing (SIGHUP) too: the parts, in their own groups, would not hear it.
        for asked in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(asked, self._note)

    def _note(self, _signum: int, _frame: object) -> None:
        self.asked = True


def _supervise(children: list[subprocess.Popen[bytes]], stop: _Stop) -> int:
    # When one part dies or we are asked to stop, stop them all.
    while not stop.asked and all(child.poll() is None for child in children):
        time.sleep(0.2)
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + _STOP_GRACE_S
    for child in children:
        try:
            child.wait(timeout=max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            # Its own process group holds it and what it started: none is left running.
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    return 0 if stop.asked else 1


def _web_argv(settings: Settings) -> list[str]:
    workers = int(os.environ.get("GAFFER_WEB_WORKERS", "2"))
    return gunicorn_argv(f"0.0.0.0:{settings.port}", workers)


def gunicorn_argv(bind: str, workers: int, app: str = "bot.asgi:create_asgi_app()") -> list[str]:
    """Return the command that serves gaffer's web front: the one shape `web`, `run` and
    the deploy files use (an event loop per worker reads whole requests, bot/asgi.py)."""
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "--bind",
        bind,
        "--workers",
        str(workers),
        "--worker-class",
        "asgi",
        "--no-control-socket",
        app,
    ]


# Commands that neither take nor work on webhooks: they run without WEBHOOK_SECRET.
_OFFLINE = frozenset({"db", "setup", *operator_cli.COMMANDS})
# Commands whose processes sign in to GitHub as the App: its id and key are checked first.
_CALLING_GITHUB = frozenset({"run", "worker"})
_COMMANDS = {
    "run": _run,
    "web": _web,
    "worker": _worker,
    "db": _db,
    "setup": app_setup.run,
    **dict.fromkeys(operator_cli.COMMANDS, operator_cli.run),
}


if __name__ == "__main__":
    sys.exit(main())
