"""The operator's commands on the database: `gaffer plans`, `gaffer show`, `gaffer logs`
and `gaffer cost`. Each prints a table for people, or with `--json` what the REST API
(bot/api.py) answers, from the same shapes (bot/views.py)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import inspect
from sqlalchemy.orm import Session

from bot import views
from bot.cost_report import cost_report, cost_totals
from bot.db import Database, without_password
from bot.models import JobState
from bot.settings import Settings

ENDED = frozenset({JobState.DONE, JobState.FAILED, JobState.CANCELLED})


class NotReady(Exception):
    """The database cannot answer yet; the message says what to do."""


def add_parsers(commands: Any) -> None:
    """Add the operator's commands to `gaffer`'s subcommands."""
    plans = commands.add_parser("plans", help="list plans, newest first")
    plans.add_argument("--repo", help="owner/name")
    plans.add_argument("--state", help="e.g. draft, in_review")
    plans.add_argument("--json", action="store_true")
    show = commands.add_parser("show", help="one plan: revisions, approvals, jobs, timeline")
    show.add_argument("issue", help="owner/repo#N")
    show.add_argument("--json", action="store_true")
    logs = commands.add_parser("logs", help="a job's logs, kept where its worker ran")
    logs.add_argument("job", type=int)
    logs.add_argument("-f", "--follow", action="store_true", help="until the job ends")
    cost = commands.add_parser("cost", help="what agents cost: by repository, stage, day, PR")
    cost.add_argument("--since", help="a date, e.g. 2026-11-01 (UTC)")
    cost.add_argument("--repo", help="owner/name")
    cost.add_argument("--json", action="store_true")


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run one of the operator's commands; 1 with a one-line reason when it cannot."""
    try:
        with _session(settings) as session:
            return COMMANDS[args.command](settings, session, args)
    except (NotReady, views.Unknown, ValueError) as problem:
        print(f"gaffer: {problem}", file=sys.stderr)
        return 1


@contextmanager
def _session(settings: Settings) -> Iterator[Session]:
    database = Database(settings.database_url)
    try:
        if not inspect(database.engine).has_table("jobs"):
            raise NotReady(
                f"the database at {without_password(settings.database_url)} has no gaffer "
                "tables yet; run `gaffer db upgrade` (`gaffer run` does it on start)"
            )
        with database.session() as session:
            yield session
    finally:
        database.dispose()


def _plans(_settings: Settings, session: Session, args: argparse.Namespace) -> int:
    found = views.plans(session, repository=args.repo, state=args.state)
    if args.json:
        print(json.dumps({"plans": found}, indent=2))
        return 0
    print(f"{'plan':>6}  {'issue':<34} {'state':<10} {'rev':>3} {'cost':>10}  title")
    for plan in found:
        issue = f"{plan['repository']}#{plan['issue']}"
        print(
            f"{plan['id']:>6}  {issue:<34} {plan['state']:<10} {plan['revision']:>3} "
            f"${plan['cost_usd']:>9}  {plan['title'][:60]}"
        )
    return 0


def _show(_settings: Settings, session: Session, args: argparse.Namespace) -> int:
    detail = views.plan_detail(session, views.find_plan(session, args.issue).id)
    if args.json:
        print(json.dumps(detail, indent=2))
        return 0
    print(f"{detail['repository']}#{detail['issue']} {detail['title']}")
    print(
        f"plan {detail['id']}: {detail['state']}, revision r{detail['revision']}, "
        f"cost ${detail['cost_usd']}, branch {detail['branch'] or '—'}, PR "
        f"{'#' + str(detail['pr']) if detail['pr'] else '—'}"
    )
    print("\ntimeline")
    for event in detail["timeline"]:
        moved = f"{event['from_state']} → {event['to_state']}" if event["to_state"] else ""
        print(f"  {event['at'][:19]}  {event['actor']:<16} {event['action']:<14} {moved}")
    print("\njobs")
    for job in detail["jobs"]:
        print(
            f"  {job['id']:>6}  {job['stage']:<8} {job['state']:<9} {job['agent'] or '—':<10} "
            f"${job['cost_usd']}  {job['error'] or ''}"[:140]
        )
    return 0


def _logs(settings: Settings, session: Session, args: argparse.Namespace) -> int:
    job = views.job(session, args.job)
    shown: dict[Path, int] = {}
    while True:
        for path in views.job_logs(settings.home, job):
            text = path.read_text(errors="replace")
            if path not in shown:
                print(f"==> {path.name} <==")
            print(text[shown.get(path, 0) :], end="", flush=True)
            shown[path] = len(text)
        if not args.follow or job.state in ENDED:
            return 0
        time.sleep(0.5)
        session.refresh(job)


def _cost(_settings: Settings, session: Session, args: argparse.Namespace) -> int:
    since = datetime.fromisoformat(args.since).replace(tzinfo=UTC) if args.since else None
    totals = cost_totals(session, since=since, repository=args.repo)
    print(json.dumps(totals.to_json(), indent=2) if args.json else cost_report(totals))
    return 0


COMMANDS = {"plans": _plans, "show": _show, "logs": _logs, "cost": _cost}
