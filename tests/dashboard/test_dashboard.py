"""The dashboard in a real headless Chromium, signed in through the GitHub double, through
a plan's whole life; screenshots of each page are kept under test-artifacts/dashboard."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from bot.dashboard.bundle import read_bundle
from bot.models import PlanState
from double.driver import IssueFlow
from double.loopback import serve_on_loopback
from double.oauth import CLIENT_ID, CLIENT_SECRET
from double.origin import commit_to_origin
from tests.conftest import INSTALLATION_ID, REPO
from tests.support import WEBHOOK_SECRET, wait_for, write_server_config

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("GAFFER_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "dashboard"
FAKES = ROOT / "tests" / "fixtures" / "fake_agents"
REPO_CONFIG = """\
agent: paid
checks:
  - name: tests
    run: "grep -q good widgets.py"
    timeout: 30
"""


@pytest.fixture
def server_config(tmp_path: Path) -> Path:
    """An agent that does the work and says what it cost, as Claude Code does."""
    agent = {
        "command": ["{python}", str(FAKES / "paid_writer.py"), "{prompt_file}"],
        "output": "claude-json",
    }
    return write_server_config(tmp_path / "gaffer-server.yml", {"paid": agent}, [FAKES])


@pytest.fixture
def dashboard(make_app, settings, github, github_server: str) -> Iterator[tuple[object, str]]:
    """gaffer's web app, signing people in with the double's OAuth, served on loopback."""
    signing_in = dataclasses.replace(
        settings,
        github_api_url=github_server,
        github_web_url=github_server,
        github_client_id=CLIENT_ID,
        github_client_secret=CLIENT_SECRET,
    )
    app = make_app(signing_in)
    with serve_on_loopback(app) as url:
        yield app, url


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    """Debian's Chromium, headless, driven through its chromedriver; nothing is downloaded."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "install Debian's chromium and chromium-driver (make test does)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,1400",
    ):
        options.add_argument(flag)
    chrome = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    chrome.set_page_load_timeout(30)
    yield chrome
    chrome.quit()


def shot(browser: webdriver.Chrome, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def sign_in(browser: webdriver.Chrome, url: str, github, login: str) -> None:
    """Open the dashboard, go through GitHub's Authorize page as `login`, and come back."""
    github.user_grants.browser_login = login
    browser.get(f"{url}/dashboard/")
    browser.find_element(By.ID, "authorize").click()
    wait_for(lambda: browser.find_elements(By.ID, "login"), what="the signed-in dashboard")
    assert browser.find_element(By.ID, "login").text == login


def text(browser: webdriver.Chrome, element_id: str) -> str:
    return browser.find_element(By.ID, element_id).text


def heading(browser: webdriver.Chrome) -> str:
    """The page's heading, or nothing while a new page replaces the old one."""
    try:
        return browser.find_element(By.TAG_NAME, "h1").text
    except StaleElementReferenceException:
        return ""


def test_a_plans_whole_life_on_the_dashboard(
    dashboard, browser: webdriver.Chrome, github, origin: Path, worker, settings
) -> None:
    app, url = dashboard
    commit_to_origin(origin, {".github/gaffer.yml": REPO_CONFIG}, "configure gaffer")
    flow = IssueFlow(app, app.test_client(), github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET)
    flow.open().label()
    draft = flow.wait_state(PlanState.DRAFT)

    # A reader of the repository signs in and is shown none of it.
    sign_in(browser, url, github, "reader")
    assert "No plan is in flight" in browser.page_source
    browser.get(f"{url}/dashboard/plans/{draft.id}")
    assert "Not Found" in browser.page_source
    browser.get(f"{url}/dashboard/")
    browser.find_element(By.XPATH, "//button[text()='Sign out']").click()
    wait_for(lambda: "Signed out" in heading(browser), what="the signed-out page")

    # A writer sees the draft in the queue and opens it.
    sign_in(browser, url, github, "maintainer")
    shot(browser, "1-queue-draft")
    row = browser.find_element(By.LINK_TEXT, f"{REPO}#{flow.number}")
    assert "draft" in browser.find_element(By.ID, "plans").text
    row.click()
    wait_for(lambda: browser.find_elements(By.ID, "plan-state"), what="the plan's page")
    assert text(browser, "plan-state") == "draft"

    flow.comment("/approve")
    review = flow.wait_state(PlanState.IN_REVIEW)
    flow.comment(f"/approve-diff {review.head_sha}")
    flow.wait_state(PlanState.PR_OPEN)
    flow.merge()
    merged = flow.wait_state(PlanState.MERGED)

    # The plan's timeline: who approved what, its jobs with their dollars, checks, the PR.
    browser.get(f"{url}/dashboard/plans/{merged.id}")
    shot(browser, "2-plan-merged")
    assert text(browser, "plan-state") == "merged"
    assert f"/pull/{merged.pr_number}" in browser.find_element(By.ID, "pull").get_attribute("href")
    approvals = text(browser, "approvals")
    assert "plan" in approvals and "diff" in approvals and "maintainer" in approvals
    assert review.head_sha in approvals
    checks = text(browser, "checks")
    assert "tests" in checks and "success" in checks
    jobs = text(browser, "jobs")
    assert "plan" in jobs and "execute" in jobs and "$0.250000" in jobs
    timeline = text(browser, "timeline")
    assert "→ merged" in timeline

    # The execute job's flight recorder: prompt, transcript, check logs, ledger, bundle.
    browser.find_element(By.XPATH, "//table[@id='jobs']//tr[td[2]='execute']//a").click()
    shot(browser, "3-job-execute")
    assert text(browser, "job-state") == "done"
    assert "Make `widgets.py` good." in text(browser, "prompt")  # the approved plan
    logs = {
        each.get_attribute("data-name"): each
        for each in browser.find_elements(By.CSS_SELECTOR, "pre.log")
    }
    assert '"total_cost_usd": 0.25' in logs["agent.log"].text
    assert "[gaffer] exit code 0" in logs["check-tests.log"].text
    assert "[gaffer] exit code 0" in logs["agent.log"].text
    assert text(browser, "job-cost") == "$0.250000"
    cookies = {each["name"]: each["value"] for each in browser.get_cookies()}
    bundle_url = browser.find_element(By.ID, "bundle").get_attribute("href")
    bundle = read_bundle(requests.get(bundle_url, cookies=cookies, timeout=10).content)
    assert bundle.job["stage"] == "execute" and bundle.plan["state"] == "merged"
    assert "Make `widgets.py` good." in bundle.files["prompt.md"]

    # The costs page shows the dollars `gaffer cost --json` counts.
    browser.find_element(By.LINK_TEXT, "Costs").click()
    shot(browser, "4-costs")
    cli = subprocess.run(
        [sys.executable, "-m", "bot.cli", "cost", "--json"],
        env={
            **os.environ,
            "DATABASE_URL": settings.database_url,
            "GAFFER_HOME": str(settings.home),
        },
        capture_output=True,
        text=True,
        check=True,
    )
    counted = json.loads(cli.stdout)
    assert counted["merged_prs"] == 1 and counted["total_usd"] == "0.5000"
    assert text(browser, "total") == f"${counted['total_usd']}"
    assert text(browser, "per-merged-pr") == f"${counted['per_merged_pr_usd']}"
    assert text(browser, "merged-prs") == "1"
    charts = browser.find_elements(By.CSS_SELECTOR, "svg.chart")
    assert len(charts) == 5  # repository, agent, day, lead time, first pass
    lead = text(browser, "lead-times")
    assert f"{REPO}#{flow.number}" in lead
    assert "paid" in text(browser, "first-pass")


def test_a_running_jobs_transcript_shows_while_it_runs(
    dashboard, browser: webdriver.Chrome, github, origin: Path, worker
) -> None:
    app, url = dashboard
    flow = IssueFlow(app, app.test_client(), github, origin, REPO, INSTALLATION_ID, WEBHOOK_SECRET)
    flow.body = "```gaffer-script\nplan:\n  - print: reading widgets.py\n  - sleep: 30\n```\n"
    flow.open().label()
    sign_in(browser, url, github, "maintainer")

    def running_job_link() -> str | None:
        browser.get(f"{url}/dashboard/")
        links = browser.find_elements(By.CSS_SELECTOR, "#running a")
        return links[0].get_attribute("href") if links else None

    browser.get(wait_for(running_job_link, what="the plan job in the queue's running list"))

    def transcript() -> str:
        browser.refresh()  # what the page's own reload does every few seconds
        try:
            state = text(browser, "job-state")
            logs = browser.find_elements(By.CSS_SELECTOR, "pre.log[data-name='agent.log']")
            return f"{state}: {logs[0].text}" if logs and logs[0].text else ""
        except StaleElementReferenceException:  # the page reloaded itself meanwhile
            return ""

    shown = wait_for(transcript, what="the agent's first line")
    assert shown.startswith("running: ") and "reading widgets.py" in shown
    assert browser.find_elements(By.CSS_SELECTOR, "meta[http-equiv='refresh']")
    shot(browser, "5-job-running")
    flow.comment("/cancel")
    flow.wait_state(PlanState.CANCELLED)
