"""Fixtures for one real thing each: a backend, a GitHub double, a git origin, a worker."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import responses
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from flask import request
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine

from bot.app import create_app
from bot.github import STATUS_MARKER
from bot.migrate import upgrade
from bot.settings import Settings
from double.driver import IssueFlow
from double.origin import commit_to_origin, make_origin
from tests.in_process import BODY, CONFIG, InProcess
from tests.support import WEBHOOK_SECRET, Backend, commented, issue, repository

PG_ADMIN_URL = os.environ.get(
    "GAFFER_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("GAFFER_TEST_REDIS", "redis://127.0.0.1:6379")
# Machines without PostgreSQL and Redis may run only the embedded half; CI never does.
BACKENDS = os.environ.get("GAFFER_TEST_BACKENDS", "embedded,services").split(",")
# One run's broker keys never meet another's, even on a shared Redis.
BROKER_PREFIX = f"gaffer-test-{uuid.uuid4().hex[:8]}:"
API_URL = "https://api.github.test"
APP_ID = 4242
INSTALLATION_ID = 77
REPO = "octo/widgets"
TITLE = "Widgets overflow the sidebar"
LOG_TAIL = 6000


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """A failed test's report carries the tail of every process log it kept in tmp_path.

    Workers, `gaffer web` and the redis under test write there; a timeout on CI is then
    read from the report instead of guessed at.
    """
    outcome = yield
    report = outcome.get_result()
    tmp_path = getattr(item, "funcargs", {}).get("tmp_path")
    if report.when != "call" or not report.failed or tmp_path is None:
        return
    for log in sorted(Path(tmp_path).glob("**/*.log")):
        text = log.read_text(errors="replace")
        report.sections.append((f"log {log.relative_to(tmp_path)}", text[-LOG_TAIL:]))


@pytest.fixture(scope="session")
def private_key() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@pytest.fixture(scope="session")
def services_database() -> Iterator[str]:
    """Create one PostgreSQL database for the run, migrated, and drop it afterwards."""
    if "services" not in BACKENDS:
        yield ""
        return
    name = f"gaffer_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    upgrade(url)
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path, services_database: str) -> Backend:
    """A database and broker: SQLite and the SQL broker, or PostgreSQL and Redis."""
    if request.param == "embedded":
        database = f"sqlite:///{tmp_path / 'gaffer.sqlite'}"
        upgrade(database)
        return Backend("embedded", database, f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}")
    broker = f"{REDIS_URL}/7"
    Backend.reset_services(services_database, broker, BROKER_PREFIX)
    return Backend("services", services_database, broker)


@pytest.fixture
def settings(backend: Backend, tmp_path: Path, private_key: str) -> Settings:
    return Settings.from_env(
        {
            "WEBHOOK_SECRET": WEBHOOK_SECRET,
            "GAFFER_DEFAULT_AGENT": "script",
            "GAFFER_HOME": str(tmp_path / "home"),
            "DATABASE_URL": backend.database_url,
            "BROKER_URL": backend.broker_url,
            "GITHUB_API_URL": API_URL,
            "APP_ID": str(APP_ID),
            "PRIVATE_KEY": private_key,
            "GAFFER_BROKER_PREFIX": BROKER_PREFIX,
        }
    )


@pytest.fixture
def make_app():
    """Build web apps from settings, and close their connections afterwards."""
    made = []

    def make(settings: Settings):
        made.append(create_app(settings, TESTING=True))
        return made[-1]

    yield make
    for flask_app in made:
        flask_app.extensions["gaffer_db"].dispose()
        flask_app.extensions["gaffer_celery"].close()


@pytest.fixture
def app(make_app, settings: Settings):
    return make_app(settings)


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    """A bare git repository on disk, used as the repository's clone_url."""
    return make_origin(tmp_path, {"README.md": "# widgets\n", "widgets.py": "VALUE = 1\n"})


@pytest.fixture
def thread(github, origin: Path) -> tuple[dict, dict]:
    """Issue #1 on the double, and the payload pieces that describe it: (repository, issue)."""
    github.add_issue(REPO, 1, title=TITLE, body="The sidebar clips long names.", author="reporter")
    return repository(REPO, str(origin), repo_id=github.repo_id(REPO)), issue(1, title=TITLE)


def status_comments(github) -> list[dict]:
    """Return gaffer's status comments on issue #1 of the double (one, when all is well)."""
    return [c for c in github.comments(REPO, 1) if STATUS_MARKER in c["body"]]


def command_payload(github, thread, body: str, login: str = "maintainer", **extra) -> dict:
    """Post a person's comment on issue #1 of the double; return its webhook payload."""
    repo, issue_ = thread
    comment = github.add_human_comment(REPO, 1, login=login, body=body)
    return commented(
        repo,
        issue_,
        body,
        login=login,
        comment_id=comment["id"],
        installation_id=INSTALLATION_ID,
        **extra,
    )


@pytest.fixture
def github(origin: Path):
    """The GitHub double, holding one repository whose origin is a real bare repo."""
    from double.app import create_github_double

    flask_app, state = create_github_double(app_id=APP_ID)
    state.add_repo(REPO, origin, installation_id=INSTALLATION_ID)
    state.permissions[(REPO, "maintainer")] = "write"
    state.permissions[(REPO, "reader")] = "read"
    state.flask_app = flask_app
    return state


@pytest.fixture
def github_http(github):
    """Serve the double to code in this process through `responses`."""
    from tests.double_responses import mock_with_responses

    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        mock_with_responses(rsps, github.flask_app, API_URL)
        yield github
    assert github.contract_errors == [], github.contract_errors


@pytest.fixture
def github_server(github):
    """Serve the double on loopback, for worker processes."""
    from double.loopback import serve_on_loopback

    with serve_on_loopback(github.flask_app) as base_url:
        yield base_url
    assert github.contract_errors == [], github.contract_errors


@pytest.fixture
def server_config(tmp_path: Path) -> Path:
    """The GAFFER_CONFIG file; tests add agents or defaults by rewriting it."""
    path = tmp_path / "gaffer-server.yml"
    path.write_text(
        "agent_timeout_s: 60\nagent_idle_timeout_s: 30\n"
        "github_seconds_between_requests: 0\ngithub_seconds_between_writes: 0\n"
    )
    return path


@pytest.fixture
def start_worker(settings: Settings, github_server: str, server_config: Path, tmp_path: Path):
    """Start `python -m tasks.worker` processes on demand; stop the live ones afterwards."""
    from tests.support import WorkerProcess

    started: list[WorkerProcess] = []

    def start(
        queue: str,
        *,
        broker_url: str | None = None,
        concurrency: int = 2,
        lease_seconds: int = 60,
        beat: bool = False,
        wait: bool = True,
        home: Path | None = None,
    ) -> WorkerProcess:
        env = {
            **os.environ,
            "WEBHOOK_SECRET": WEBHOOK_SECRET,
            "GAFFER_DEFAULT_AGENT": "script",
            "GAFFER_HOME": str(home or settings.home),  # another home: another machine
            "DATABASE_URL": settings.database_url,
            "BROKER_URL": broker_url or settings.broker_url,
            "GITHUB_API_URL": github_server,
            "APP_ID": str(APP_ID),
            "PRIVATE_KEY": settings.private_key or "",
            "GAFFER_CONFIG": str(server_config),
            "GAFFER_BROKER_PREFIX": settings.broker_key_prefix,
            "GAFFER_LEASE_SECONDS": str(lease_seconds),
        }
        log = tmp_path / f"worker-{queue}-{len(started)}.log"
        started.append(WorkerProcess.start(env, log, queue, concurrency, beat=beat, wait=wait))
        return started[-1]

    yield start
    WorkerProcess.stop_all(started)


@pytest.fixture
def worker(start_worker):
    """Real Celery worker processes, one per queue as in production, talking to the double."""
    github = start_worker("github", concurrency=3, wait=False)
    agent = start_worker("agent", concurrency=2, wait=False)
    github.wait_ready()  # the two start side by side
    agent.wait_ready()
    return agent


@pytest.fixture
def wctx(settings: Settings, app, github_http, server_config: Path):
    """The worker's context, in this process, with GitHub served through `responses`."""
    import dataclasses

    import yaml

    from tasks.context import WorkerContext

    config = yaml.safe_load(server_config.read_text())
    worker_settings = dataclasses.replace(settings, server_config=config)
    context = WorkerContext.build(worker_settings, app.extensions["gaffer_celery"])
    yield context
    context.db.dispose()


@pytest.fixture
def here(app, client, github_http, origin: Path, wctx) -> InProcess:
    """An issue whose deliveries and jobs this process handles, as a worker would."""
    commit_to_origin(origin, {".github/gaffer.yml": CONFIG}, "configure gaffer")
    flow = IssueFlow(
        app, client, github_http, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET, body=BODY
    ).open()
    return InProcess(flow, wctx)


# Database transactions open in each thread, counted from SQLAlchemy's own events.
_open = threading.local()


def _began(_connection: object) -> None:
    _open.count = getattr(_open, "count", 0) + 1


def _ended(_connection: object) -> None:
    _open.count = max(getattr(_open, "count", 0) - 1, 0)


@pytest.fixture
def in_transactions(github) -> Iterator[list[str]]:
    """The GitHub requests made while this thread had a database transaction open."""
    found: list[str] = []
    hooks = [("begin", _began), ("commit", _ended), ("rollback", _ended)]
    for name, hook in hooks:
        event.listen(Engine, name, hook)

    @github.flask_app.before_request
    def note() -> None:
        if getattr(_open, "count", 0):
            found.append(f"{request.method} {request.path}")

    yield found
    for name, hook in hooks:
        event.remove(Engine, name, hook)
