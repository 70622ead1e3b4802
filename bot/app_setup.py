"""`gaffer setup`: create the GitHub App from app.yml in one step and save what GitHub hands
over (its id, private key, webhook secret, client id and secret) in `./.env`.

The person opens a one-time page on loopback (bot/setup_page.py), which posts the
manifest (bot/app_manifest.py) to GitHub; after "Create GitHub App", GitHub sends them
back with a code, traded once for the credentials (bot/github.py), saved by
bot/env_file.py.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path

import requests

from bot.app_manifest import APP_YML, ManifestError, build_manifest, new_app_url, read_app_yml
from bot.env_file import (
    AppCredentials,
    AppSettingsPresent,
    refuse_replacing,
    save_app_credentials,
)
from bot.github import create_app_from_manifest
from bot.settings import Settings
from bot.setup_page import CALLBACK_PATH, SetupFailed, SetupPage, serve_until_used

DEFAULT_PORT = 8001


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `gaffer setup` and its options to `gaffer`'s subcommands."""
    setup = commands.add_parser(
        "setup", help="create the GitHub App from app.yml in one step, saving it in ./.env"
    )
    setup.add_argument("--webhook-url", required=True, help="where GitHub will send webhooks")
    setup.add_argument("--name", help="the App's name on GitHub (app.yml's by default)")
    setup.add_argument("--org", help="create the App for this organization, not your account")
    setup.add_argument(
        "--callback-url",
        action="append",
        default=[],
        help="where GitHub may send people back after they sign in (repeatable)",
    )
    setup.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"the loopback page's port ({DEFAULT_PORT})",
    )
    setup.add_argument("--app-yml", type=Path, default=APP_YML, help="the App's description")
    setup.add_argument("--force", action="store_true", help="replace App settings in ./.env")


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Serve the one-time page until GitHub's answer is saved; 1 with the reason otherwise."""
    try:
        page = _setup_page(settings, args, Path.cwd() / ".env")
    except (AppSettingsPresent, ManifestError) as error:
        print(f"gaffer: {error}", file=sys.stderr)
        return 1
    print(f"gaffer: open {page.url} in a browser on this machine to create the App", flush=True)
    try:
        outcome = serve_until_used(page)
    except OSError as error:
        print(f"gaffer: cannot serve {page.url} ({error}): choose another --port", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gaffer: setup stopped; nothing was saved", file=sys.stderr)
        return 1
    print(f"gaffer: {outcome.message}", file=sys.stdout if outcome.saved else sys.stderr)
    return 0 if outcome.saved else 1


def _setup_page(settings: Settings, args: argparse.Namespace, env_path: Path) -> SetupPage:
    """Build the page: the manifest, and GitHub's new-App address with a fresh state."""
    if not args.force:
        refuse_replacing(env_path)
    manifest = build_manifest(
        read_app_yml(args.app_yml),
        webhook_url=args.webhook_url,
        redirect_url=f"http://127.0.0.1:{args.port}{CALLBACK_PATH}",
        name=args.name,
        callback_urls=tuple(args.callback_url),
    )
    state = secrets.token_urlsafe(32)
    return SetupPage(
        args.port,
        new_app_url(settings.github_web_url, state, args.org),
        manifest,
        state,
        finish=lambda code: _finish(settings, env_path, code, replace=args.force),
    )


def _port(raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise argparse.ArgumentTypeError(f"a port from 1 to 65535, not {raw!r}")
    return int(raw)


def _finish(settings: Settings, env_path: Path, code: str, *, replace: bool) -> str:
    """Trade the code for the App's credentials and save them; say what was done."""
    try:
        created = create_app_from_manifest(settings.github_api_url, code)
    except requests.HTTPError as error:
        status = error.response.status_code if error.response is not None else "no"
        raise SetupFailed(
            f"GitHub refused the code ({status} answer): it works once, within an hour. "
            "Nothing was saved; run gaffer setup again."
        ) from error
    except requests.RequestException as error:
        raise SetupFailed(f"GitHub could not be reached: {error}. Nothing was saved.") from error
    app = AppCredentials(
        app_id=created["id"],
        slug=created["slug"],
        pem=created["pem"],
        webhook_secret=created["webhook_secret"],
        client_id=created["client_id"],
        client_secret=created["client_secret"],
    )
    try:
        key_path = save_app_credentials(env_path, app, replace=replace)
    except AppSettingsPresent as error:
        raise SetupFailed(
            f"{error}. The App {app.slug} was created but nothing was saved: generate a "
            "private key and a webhook secret on its settings page"
        ) from error
    return (
        f"the GitHub App {app.slug} (id {app.app_id}) is created; its settings are in "
        f"{env_path} and its private key in {key_path}. Install it on your repositories: "
        f"{created['html_url']}/installations/new"
    )
