"""`gaffer demo`: the whole lifecycle on this machine, no GitHub account, printed as a thread."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from flask import Flask

from bot.app import create_app
from bot.migrate import upgrade
from bot.models import PlanState
from bot.settings import Settings
from double.app import GitHubState, create_github_double
from double.driver import IssueFlow, wait_for
from double.loopback import serve_on_loopback
from double.origin import make_origin

REPO, INSTALLATION, APP_ID, SECRET = "acme/widgets", 1, 1, "demo-secret"
# The check runs the worker's own Python: the sandbox shows it, while a version manager's
# shim first on PATH (pyenv, asdf) would need its root listed in `sandbox.read_only`.
PY = sys.executable
CONFIG = f"""\
checks:
  - name: tests
    run: "{PY} -c 'import widgets; assert widgets.label(\\"x\\" * 50).endswith(\\"…\\")'"
    timeout: 60
"""
ISSUE_BODY = """\
Long widget names overflow the sidebar. Cut them at 20 characters with an ellipsis.

```gaffer-script
execute:
  - write: {path: widgets.py, content: "def label(name):\\n    return name[:20]\\n"}
fix:
  - write:
      path: widgets.py
      content: "def label(name):\\n    return name if len(name) <= 20 else name[:19] + '…'\\n"
```
"""


@dataclass
class LocalGaffer:
    """gaffer on its embedded default with workers, a GitHub double and a bare origin."""

    app: Flask
    github: GitHubState
    origin: Path

    def issue(self, number: int, title: str, body: str) -> IssueFlow:
        """Return a driver for a new issue on the double."""
        flow = IssueFlow(
            self.app,
            self.app.test_client(),
            self.github,
            self.origin,
            REPO,
            INSTALLATION,
            SECRET,
            number=number,
            title=title,
            body=body,
        )
        return flow.open()


@contextmanager
def local_gaffer(
    home: Path,
    files: dict[str, str],
    agent_slots: int = 2,
    server: Mapping[str, Any] | None = None,
    services: Mapping[str, str] | None = None,
    validate: bool = True,
) -> Iterator[LocalGaffer]:
    """Run gaffer locally under home, against an origin holding files (and server settings),
    on its embedded default or on the DATABASE_URL and BROKER_URL services name. The double
    checks each request against GitHub's description where it is installed, unless
    validate is False (a benchmark's double, whose time stands for GitHub's)."""
    with ExitStack() as stack:
        origin = make_origin(home, files)
        checked = validate and _spec_installed()
        double, github = create_github_double(app_id=APP_ID, validate=checked)
        github.add_repo(REPO, origin, installation_id=INSTALLATION)
        github.permissions[(REPO, "maintainer")] = "admin"
        api_url = stack.enter_context(serve_on_loopback(double))
        github.web_url = api_url  # links on the thread point at the double, not at github.com
        server = {"agent_slots": agent_slots, **(server or {})}
        settings = _settings(home, api_url, server, services or {})
        upgrade(settings.database_url)
        stack.enter_context(_workers(settings, home))
        app = create_app(settings)
        stack.callback(app.extensions["gaffer_db"].dispose)
        yield LocalGaffer(app, github, origin)


def run_demo() -> int:
    """Run the demo in a temporary folder and print the issue thread."""
    if not _spec_installed():
        print(
            "gaffer demo: GitHub's OpenAPI description is not installed, so requests to the "
            "double are not checked against it (set GAFFER_GITHUB_OPENAPI to "
            "@octokit/openapi's generated/api.github.com.json)"
        )
    files = {
        "widgets.py": "def label(name):\n    return name\n",
        ".github/gaffer.yml": CONFIG,
        "README.md": "# widgets\n",
    }
    with (
        tempfile.TemporaryDirectory(prefix="gaffer-demo-") as tmp,
        local_gaffer(Path(tmp), files) as gaffer,
    ):
        flow = gaffer.issue(1, "Long widget names overflow the sidebar", ISSUE_BODY)
        _play(flow, gaffer.github)
    return 0


def _play(flow: IssueFlow, github: GitHubState) -> None:
    _say(
        "reporter",
        f"opens issue #{flow.number} “{flow.title}”\n\n{_without_script(flow.body)}\n\n"
        "(the body's `gaffer-script` block tells the demo's scripted agent what to write)",
    )
    _say("triager", "adds the label `gaffer`")
    flow.label()
    flow.wait_state(PlanState.DRAFT)
    _show_status(flow)
    _comment(flow, "/approve")
    plan = flow.wait_state(PlanState.IN_REVIEW, PlanState.FAILED)
    runs = github.check_runs(REPO)
    for head in dict.fromkeys(run["head_sha"] for run in runs):
        on_head = [run for run in runs if run["head_sha"] == head]
        for run in on_head:
            _say(
                "check run",
                f"{run['name']} on {head[:12]}: {run['conclusion']} — {run['output']['title']}",
            )
        for run in on_head:
            if run["conclusion"] == "failure":
                _say(
                    "gaffer",
                    f"sends what {run['name']} printed back to the agent, which fixes it:\n\n"
                    + _tail(run),
                )
    _show_status(flow)
    if plan.state != PlanState.IN_REVIEW:
        return
    _comment(flow, f"/approve-diff {plan.head_sha}")
    flow.wait_state(PlanState.PR_OPEN)
    [pull] = github.pulls(REPO)
    _say(
        "pull request",
        f"#{pull['number']} “{pull['title']}” from {pull['head']['ref']} "
        f"at {pull['head']['sha'][:12]}\n\n{_shown(pull['body'] or '')}",
    )
    _show_status(flow)


def _comment(flow: IssueFlow, body: str) -> None:
    _say("maintainer", body)
    flow.comment(body)
    wait_for(lambda: any(c["content"] == "eyes" for c in _last_reactions(flow)), what="👀")
    _say("gaffer[bot]", "reacts 👀: the command is accepted")


def _last_reactions(flow: IssueFlow) -> list[dict]:
    human = [c for c in flow.comments() if not c["user"]["login"].endswith("[bot]")]
    return flow.github.reactions(human[-1]["id"]) if human else []


def _show_status(flow: IssueFlow) -> None:
    _say("gaffer[bot]", "(status comment, edited in place)\n" + _shown(flow.status()))


def _shown(markdown: str) -> str:
    """Return markdown as a reader sees it rendered: no hidden markers, no HTML tags."""
    visible = re.sub(r"<!--.*?-->\n*", "", markdown, flags=re.DOTALL)
    return re.sub(r"</?(?:sub|details|summary)>", "", visible).strip()


def _without_script(body: str) -> str:
    return re.sub(r"```gaffer-script\n.*?```\n?", "", body, flags=re.DOTALL).strip()


def _tail(run: dict[str, Any], lines: int = 8) -> str:
    """The last lines of a check run's output, as the fix prompt quotes it."""
    output = run["output"].get("text") or run["output"].get("summary") or ""
    return textwrap.indent("\n".join(output.strip().splitlines()[-lines:]), "    ")


def _say(who: str, text: str) -> None:
    print(f"\n── {who} " + "─" * max(0, 60 - len(who)))
    print(textwrap.indent(text.strip(), "  "), flush=True)


def _settings(
    home: Path, api_url: str, server: Mapping[str, Any], services: Mapping[str, str]
) -> Settings:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    config = home / "server.yml"
    quick = {"github_seconds_between_requests": 0, "github_seconds_between_writes": 0}
    config.write_text(yaml.safe_dump({**quick, **server}))
    env = {
        "WEBHOOK_SECRET": SECRET,
        "GAFFER_DEFAULT_AGENT": "script",
        "GAFFER_HOME": str(home / "gaffer"),
        "APP_ID": str(APP_ID),
        "PRIVATE_KEY": pem,
        "GITHUB_API_URL": api_url,
        "GAFFER_CONFIG": str(config),
    }
    return Settings.from_env({**env, **services})


@contextmanager
def _workers(settings: Settings, home: Path) -> Iterator[None]:
    env = {
        **os.environ,
        "WEBHOOK_SECRET": SECRET,
        "GAFFER_DEFAULT_AGENT": "script",
        "GAFFER_HOME": str(settings.home),
        "APP_ID": str(APP_ID),
        "PRIVATE_KEY": settings.private_key or "",
        "GITHUB_API_URL": settings.github_api_url,
        "GAFFER_CONFIG": str(home / "server.yml"),
    }
    env.pop("DATABASE_URL", None)
    env.pop("BROKER_URL", None)
    env.update(_services(settings))
    children = []
    for queues in ("github", "agent"):
        log = (home / f"worker-{queues}.log").open("wb")
        children.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tasks.worker",
                    queues,
                    "--name",
                    f"{queues}@demo",
                    # The agent worker's own: twice its agent slots (tasks/agent_slots.py).
                    *(["--concurrency", "4"] if queues == "github" else []),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        log.close()
    try:
        for queues in ("github", "agent"):
            log_path = home / f"worker-{queues}.log"
            wait_for(partial(_says_ready, log_path), timeout=60, what=log_path.name)
        yield
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait(timeout=30)


def _services(settings: Settings) -> dict[str, str]:
    """The servers the workers use, unless gaffer runs on its embedded default."""
    if settings.embedded:
        return {}
    return {"DATABASE_URL": settings.database_url, "BROKER_URL": settings.broker_url}


def _says_ready(log_path: Path) -> bool:
    return b"ready." in log_path.read_bytes()


def _spec_installed() -> bool:
    from double.contract import SPEC_PATH

    return SPEC_PATH.exists()


if __name__ == "__main__":
    raise SystemExit(run_demo())
