"""Drive one issue through gaffer as people would: label it, comment, watch the thread."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from bot.github import STATE_LABELS, STATUS_MARKER
from bot.models import Plan, PlanState, Repository
from double.webhooks import (
    commented,
    deliver,
    issue,
    labeled,
    pull_request_event,
    repository,
)
from tasks.gitcmd import git

_deliveries = itertools.count(1)


@dataclass
class IssueFlow:
    """One issue on the GitHub double, the web app that receives its events, and the origin."""

    app: Flask
    client: FlaskClient
    github: Any
    origin: Path
    full_name: str
    installation_id: int
    secret: str
    number: int = 1
    title: str = "Widgets overflow the sidebar"
    body: str = "The sidebar clips long names."
    author: str = "reporter"

    def open(self) -> IssueFlow:
        self.github.add_issue(
            self.full_name, self.number, title=self.title, body=self.body, author=self.author
        )
        return self

    @property
    def repo(self) -> dict[str, Any]:
        return repository(
            self.full_name, str(self.origin), repo_id=self.github.repo_id(self.full_name)
        )

    @property
    def issue(self) -> dict[str, Any]:
        """The issue as a payload carries it, with its labels as they are now."""
        shown = issue(self.number, title=self.title, body=self.body, author=self.author)
        with contextlib.suppress(KeyError):  # an issue not opened on the double has none
            labels = self.github.issue_labels(self.full_name, self.number)
            shown["labels"] = [{"name": name} for name in labels]
        return shown

    def label(self, name: str = "gaffer") -> None:
        """Label the issue on the double, then deliver `issues.labeled`, as GitHub does."""
        self.github.add_label(self.full_name, self.number, name)
        self._label_event(name, "labeled")

    def unlabel(self, name: str) -> None:
        """Take the label off on the double, then deliver `issues.unlabeled`."""
        self.github.take_label(self.full_name, self.number, name)
        self._label_event(name, "unlabeled")

    def _label_event(self, name: str, action: str) -> None:
        payload = labeled(
            self.repo, self.issue, label=name, installation_id=self.installation_id, action=action
        )
        delivery_id = f"flow-{next(_deliveries)}"
        response = deliver(
            self.client, "issues", payload, secret=self.secret, delivery_id=delivery_id
        )
        assert response.status_code == 202, response.get_json()

    def comment(self, body: str, login: str = "maintainer") -> dict[str, Any]:
        """Post a person's comment and deliver its webhook; return the payload."""
        made = self.github.add_human_comment(self.full_name, self.number, login=login, body=body)
        payload = commented(
            self.repo,
            self.issue,
            body,
            login=login,
            comment_id=made["id"],
            installation_id=self.installation_id,
        )
        assert deliver(self.client, "issue_comment", payload, secret=self.secret).status_code == 202
        return payload

    def merge(self, login: str = "maintainer") -> None:
        """Merge the plan's pull request on the double and deliver `pull_request.closed`."""
        plan = self.plan()
        assert plan is not None and plan.pr_number is not None, "the plan has no pull request"
        pull = self.github.merge_pull(self.full_name, plan.pr_number)
        payload = pull_request_event(
            self.repo, pull, action="closed", installation_id=self.installation_id, sender=login
        )
        assert deliver(self.client, "pull_request", payload, secret=self.secret).status_code == 202

    def plan(self) -> Plan | None:
        """Return this issue's latest plan."""
        mine = (
            select(Plan)
            .join(Repository)
            .where(Repository.full_name == self.full_name, Plan.issue_number == self.number)
        )
        with self.app.extensions["gaffer_db"].session() as session:
            return session.scalars(mine.order_by(Plan.id.desc())).first()

    def wait_state(self, *states: PlanState, timeout: float = 90) -> Plan:
        """Wait until the plan reaches one of states, and its label shows it."""
        plan = wait_for(
            lambda: (p := self.plan()) is not None and p.state in states and p,
            timeout=timeout,
            what=f"the plan to be {'/'.join(states)}",
        )
        wait_for(
            lambda: self.state_labels() == [f"gaffer: {self.plan().state.value}"],  # type: ignore[union-attr]
            timeout=timeout,
            what="the state label",
        )
        return plan

    def labels(self) -> list[str]:
        return self.github.issue_labels(self.full_name, self.number)

    def state_labels(self) -> list[str]:
        """Return gaffer's state labels on the issue (the trigger label stays beside them)."""
        return [name for name in self.labels() if name in STATE_LABELS]

    def comments(self) -> list[dict[str, Any]]:
        return self.github.comments(self.full_name, self.number)

    def status(self) -> str:
        [comment] = [c for c in self.comments() if STATUS_MARKER in c["body"]]
        return comment["body"]

    def replies(self) -> list[str]:
        return [c["body"] for c in self.comments() if c["body"].startswith("> ")]

    def origin_sha(self, ref: str) -> str:
        return git(["rev-parse", ref], cwd=self.origin)

    def check_runs(self) -> list[dict[str, Any]]:
        return self.github.check_runs(self.full_name)


def wait_for(condition: Callable[[], Any], *, timeout: float = 60, what: str = "condition") -> Any:
    """Poll until condition() is truthy and return its value; fail after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
