"""Secrets never leave in gaffer's words: every form a secret travels in becomes `***`."""

from __future__ import annotations

import base64
import io
import logging
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pytest

from bot.masking import SecretMask, mask_logs, pem_body_lines
from bot.settings import Settings

SECRET = "It's a Secret to Everybody"
# Its base64 holds `+` and `/`, so the URL-safe alphabet writes it differently.
BINARY_LOOKING = "s3cr3t>>>???~~~"
TOKEN = "ghs_16C7e42F292c6912E7710c838347Ae178B4a"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def urlsafe_b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("values", "text", "expected"),
    [
        pytest.param(
            [SECRET], f"WEBHOOK_SECRET={SECRET}\n", "WEBHOOK_SECRET=***\n", id="the value as it is"
        ),
        pytest.param(
            [SECRET],
            f"GET /hook?secret={quote(SECRET, safe='')} 200",
            "GET /hook?secret=*** 200",
            id="the value URL-encoded",
        ),
        pytest.param([SECRET], f"echo {b64(SECRET)}", "echo ***", id="the value in base64"),
        pytest.param(
            [BINARY_LOOKING],
            f"{b64(BINARY_LOOKING)} {urlsafe_b64(BINARY_LOOKING)}",
            "*** ***",
            id="the value in standard and URL-safe base64",
        ),
        pytest.param(
            [TOKEN],
            f"http.extraHeader=Authorization: Basic {b64('x-access-token:' + TOKEN)}",
            "http.extraHeader=Authorization: Basic ***",
            id="a token in the basic auth header git sends",
        ),
        pytest.param(
            [SECRET, TOKEN],
            f"{TOKEN} then {SECRET}",
            "*** then ***",
            id="several secrets in one text",
        ),
        pytest.param(
            ["hunter2", "", "a"],
            "hunter2 says a word",
            "hunter2 says a word",
            id="a value under eight characters is left alone",
        ),
        pytest.param(
            [SECRET],
            "nothing secret here, 42 times",
            "nothing secret here, 42 times",
            id="text without a secret is unchanged",
        ),
    ],
)
def test_each_form_of_a_secret_is_masked(values: list[str], text: str, expected: str) -> None:
    assert SecretMask(values)(text) == expected


@pytest.mark.parametrize(
    "lead",
    [
        pytest.param(b"", id="the secret at a multiple of three bytes in a base64 text"),
        pytest.param(b"x", id="one byte further along"),
        pytest.param(b"xy", id="two bytes further along"),
    ],
)
def test_a_secret_inside_a_longer_base64_text_is_masked(lead: bytes) -> None:
    def dump(secret: bytes) -> str:
        return base64.b64encode(lead + b"env output\nWEBHOOK_SECRET=" + secret + b"\nmore").decode()

    masked = SecretMask([SECRET])(dump(SECRET.encode()))
    assert masked.count("***") == 1
    # What is left is the same whatever the secret, but for the one character at each end
    # that mixes its first or last bits (four at most) with its neighbours'. With every bit
    # of the secret flipped, each other character holding any of them would differ.
    flipped = dump(bytes(byte ^ 0xFF for byte in SECRET.encode()))
    before, after = masked.split("***")
    assert flipped.startswith(before[:-1]) and flipped.endswith(after[1:])


def test_a_private_key_is_masked_line_by_line(private_key: str) -> None:
    mask = SecretMask(pem_body_lines(private_key))
    lines = mask(private_key).splitlines()
    assert lines[0] == "-----BEGIN PRIVATE KEY-----"
    assert lines[-1] == "-----END PRIVATE KEY-----"
    # The last line of the body may be shorter than eight characters: a few bytes of a key.
    assert set(lines[1:-2]) == {"***"}


JAM_SECRET = "whsec_" + base64.b64encode(b"sixteen bytes at least").decode()


@pytest.fixture
def mask_from_settings(tmp_path: Path, private_key: str) -> SecretMask:
    config = tmp_path / "server.yml"
    config.write_text("agents:\n  local:\n    command: [run-it]\n    env: [LOCAL_MODEL_KEY]\n")
    settings = Settings.from_env(
        {
            "WEBHOOK_SECRET": f"old-webhook-secret,{SECRET}",
            "GAFFER_HOME": str(tmp_path),
            "PRIVATE_KEY": private_key,
            "DATABASE_URL": "postgresql://gaffer:db%40password@db.internal/gaffer",
            "BROKER_URL": "redis://:broker-password@redis.internal:6379/0",
            "JAM_WEBHOOK_SECRET": JAM_SECRET,
            "JAM_TOKEN": "jam-token-value",
            "GAFFER_CONFIG": str(config),
        }
    )
    environ = {
        "ANTHROPIC_API_KEY": "sk-ant-shipped-agent-key",
        "LOCAL_MODEL_KEY": "server-agent-key",
        "HOME": "/home/gaffer-worker",
    }
    return SecretMask.from_settings(settings, environ)


@pytest.mark.parametrize(
    "secret",
    [
        pytest.param("old-webhook-secret", id="every webhook secret while rotating"),
        pytest.param(SECRET, id="the current webhook secret"),
        pytest.param("db@password", id="the database password, decoded"),
        pytest.param("db%40password", id="the database password as the URL writes it"),
        pytest.param("broker-password", id="the broker password"),
        pytest.param(JAM_SECRET, id="the Jam signing secret"),
        pytest.param(JAM_SECRET.removeprefix("whsec_"), id="the Jam signing key on its own"),
        pytest.param("jam-token-value", id="the Jam token"),
        pytest.param("sk-ant-shipped-agent-key", id="a key a shipped agent may read"),
        pytest.param("server-agent-key", id="a key an agent of the server's may read"),
    ],
)
def test_the_settings_mask_knows_gaffers_secrets(
    mask_from_settings: SecretMask, secret: str
) -> None:
    assert mask_from_settings(f"value: {secret}.") == "value: ***."


def test_the_settings_mask_leaves_what_no_agent_may_read(mask_from_settings: SecretMask) -> None:
    assert mask_from_settings("HOME=/home/gaffer-worker") == "HOME=/home/gaffer-worker"


def test_the_settings_mask_knows_the_private_key(
    mask_from_settings: SecretMask, private_key: str
) -> None:
    body = pem_body_lines(private_key)[0]
    assert mask_from_settings(body) == "***"


def test_tokens_added_from_many_threads_are_all_masked() -> None:
    mask = SecretMask()
    tokens = [f"ghs_token_number_{n:04d}" for n in range(40)]
    threads = [threading.Thread(target=mask.add, args=(token,)) for token in tokens]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert mask(" ".join(tokens)) == " ".join(["***"] * len(tokens))


def test_an_expired_token_is_forgotten_and_a_live_one_kept() -> None:
    now = datetime.now(UTC)
    mask = SecretMask([SECRET])
    mask.add("ghs_expired_token", until=now - timedelta(seconds=1))
    mask.add("ghs_live_token_1", until=now + timedelta(hours=1))
    assert mask("ghs_expired_token ghs_live_token_1 " + SECRET) == "ghs_expired_token *** ***"


def test_every_string_in_a_check_run_output_is_masked() -> None:
    output = {
        "title": f"tests printed {SECRET}",
        "summary": "failed",
        "annotations": [{"path": "a.py", "start_line": 3, "message": SECRET}],
    }
    assert SecretMask([SECRET]).masked(output) == {
        "title": "tests printed ***",
        "summary": "failed",
        "annotations": [{"path": "a.py", "start_line": 3, "message": "***"}],
    }


@pytest.fixture
def written() -> io.StringIO:
    """What a logger with a masked handler writes."""
    stream = io.StringIO()
    logger = logging.getLogger("gaffer.test_masking")
    logger.propagate = False
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    mask_logs(SecretMask([SECRET]), [logger])
    yield stream
    logger.removeHandler(handler)


def test_a_log_record_is_masked_in_its_message_and_arguments(written: io.StringIO) -> None:
    log = logging.getLogger("gaffer.test_masking")
    log.warning(f"secret {SECRET} and again %s and %r", SECRET, {"key": b64(SECRET)})
    assert written.getvalue() == "secret *** and again *** and {'key': '***'}\n"


def test_a_logged_traceback_is_masked(written: io.StringIO) -> None:
    log = logging.getLogger("gaffer.test_masking")
    try:
        raise RuntimeError(f"could not connect with {SECRET}")
    except RuntimeError:
        log.exception("connecting failed")
    assert "RuntimeError: could not connect with ***" in written.getvalue()
    assert SECRET not in written.getvalue()
