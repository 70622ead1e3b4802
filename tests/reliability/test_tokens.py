"""F. An installation token expiring during a long job is renewed."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from bot.github import TOKEN_MARGIN
from tests.conftest import INSTALLATION_ID, REPO
from tests.support import wait_for


def test_a_client_held_through_a_token_expiry_renews_it(wctx, github_http) -> None:
    github_http.token_lifetime = TOKEN_MARGIN + timedelta(seconds=3)
    github_http.add_issue(REPO, 1, title="t", body="b", author="reporter")
    client = wctx.client(INSTALLATION_ID, REPO)  # held like a long job holds it
    client.reply(1, "first")
    time.sleep(3.5)  # the first token is now inside the renewal margin
    client.reply(1, "second")
    issued = [t.token for t in github_http.issued_tokens]
    assert len(issued) >= 2
    used = [token for token in github_http.tokens_used() if token in issued]
    assert used[0] == issued[0] and used[-1] == issued[-1] != issued[0]
    assert [c["body"] for c in github_http.comments(REPO, 1)] == ["first", "second"]


def test_a_token_stuck_in_renewal_holds_up_only_its_own_installation(
    wctx, github_http, origin
) -> None:
    github_http.add_repo("octo/other", origin, installation_id=2)
    app = wctx.github_app
    app.token(2)  # cached, and fresh for an hour
    github_http.fail_next(
        "POST", rf"/app/installations/{INSTALLATION_ID}/access_tokens", 502, times=3
    )
    renewing = threading.Thread(target=app.token, args=(INSTALLATION_ID,))
    renewing.start()  # retries with backoff for seconds
    wait_for(lambda: github_http.faults[0].remaining < 3, what="the renewal to be under way")
    assert app.token(2)  # served from the cache while installation 1 is renewing
    assert renewing.is_alive(), "installation 2 waited for installation 1's renewal"
    renewing.join(timeout=60)
    assert not renewing.is_alive()
