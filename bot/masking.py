"""Keep gaffer's secrets out of what it posts and logs: each known value becomes `***`.

A secret is masked in every form it travels in: as it is, URL-encoded, base64 (standard
and URL-safe), inside `x-access-token:<value>` base64 (how git sends an installation
token), and inside a longer base64 text (an encoded environment dump), where only the
characters that depend on the secret alone can be recognised.

Values shorter than MIN_SECRET_CHARS are ignored: masking a short word would shred
ordinary text, and a secret that short is no secret.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from bot.agent_names import agent_env_names
from bot.settings import Settings

MASKED = "***"
MIN_SECRET_CHARS = 8
PEM_FENCE = "-----"
URLSAFE = str.maketrans("+/", "-_")
_FORMATTER = logging.Formatter()


class SecretMask:
    """Replace known secret values in text with `***`; values may be added at any time."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._until: dict[str, datetime | None] = {}
        self._forms: tuple[str, ...] = ()
        for value in values:
            self.add(value)

    def add(self, value: str, until: datetime | None = None) -> None:
        """Mask value from now on; with until, forget it after then (a token that expires)."""
        if len(value) < MIN_SECRET_CHARS:
            return
        with self._lock:
            now = datetime.now(UTC)
            # A worker mints a token an hour for each installation: dead ones are dropped,
            # or the forms to replace would grow for as long as the worker lives.
            self._until = {v: t for v, t in self._until.items() if t is None or t > now}
            self._until[value] = _later(self._until.get(value, until), until)
            self._forms = _longest_first(self._until)

    def __call__(self, text: str) -> str:
        """Return text with every form of every known secret replaced by `***`."""
        # add() replaces the tuple whole, so one read here needs no lock.
        for form in self._forms:
            if form in text:
                text = text.replace(form, MASKED)
        return text

    def masked(self, value: Any) -> Any:
        """Return value with every string in it masked, through dicts, lists and tuples."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, Mapping):
            return {key: self.masked(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.masked(item) for item in value)
        return value

    @classmethod
    def from_settings(cls, settings: Settings, environ: Mapping[str, str]) -> SecretMask:
        """Return a mask knowing gaffer's secrets and the values of the agents' env names."""
        mask = cls(settings_secrets(settings))
        for name in agent_env_names(settings.server_config):
            mask.add(environ.get(name, ""))
        return mask


def settings_secrets(settings: Settings) -> list[str]:
    """List the secret values the settings hold (empty where unset), the key line by line."""
    jam = settings.jam_webhook_secret or ""
    return [
        *settings.webhook_secrets,
        *settings.api_tokens,
        *pem_body_lines(settings.private_key or ""),
        jam,
        jam.removeprefix("whsec_"),  # Jam signs with the key after the prefix
        settings.jam_token or "",
        *url_passwords(settings.database_url),
        *url_passwords(settings.broker_url),
    ]


def pem_body_lines(pem: str) -> list[str]:
    """Return the base64 lines of a PEM key; the BEGIN and END lines are public."""
    lines = (line.strip() for line in pem.splitlines())
    return [line for line in lines if line and not line.startswith(PEM_FENCE)]


def url_passwords(url: str) -> list[str]:
    """Return the password in a URL as written and decoded, or nothing without one."""
    password = urlsplit(url).password
    return [password, unquote(password)] if password else []


def secret_forms(value: str) -> set[str]:
    """Return the forms value may travel in, too short ones (base64 fragments) left out."""
    raw = value.encode()
    forms = {
        value,
        quote(value, safe=""),
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode(),
        base64.b64encode(b"x-access-token:" + raw).decode(),
    }
    forms |= {core for shift in range(3) for core in base64_cores(raw, shift)}
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


def base64_cores(raw: bytes, shift: int) -> tuple[str, str]:
    """Return the base64 characters (standard, URL-safe) that raw alone decides.

    Base64 turns each 3 bytes into 4 characters of 6 bits, so raw placed `shift` bytes
    into a longer text encodes differently for each shift mod 3. The characters at either
    end mix raw's bits with its neighbours' and are cut off.
    """
    encoded = base64.b64encode(bytes(shift) + raw).decode()
    first = -(-8 * shift // 6)  # the first character whose 6 bits are all raw's
    last = 8 * (shift + len(raw)) // 6  # one past the last such character
    core = encoded[first:last]
    return core, core.translate(URLSAFE)


def _later(one: datetime | None, other: datetime | None) -> datetime | None:
    """Return the later of two expiries, where None (never expires) is latest."""
    return None if one is None or other is None else max(one, other)


def _longest_first(values: Iterable[str]) -> tuple[str, ...]:
    # A form that contains another (a token's header holds its plain base64) goes first,
    # so it is replaced whole. Plain replacing beats one big regex: compiling that takes a
    # quarter of a second for a private key's few hundred forms.
    forms = {form for value in values for form in secret_forms(value)}
    return tuple(sorted(forms, key=lambda form: (-len(form), form)))


class MaskingFilter(logging.Filter):
    """Mask a log record's message, arguments and traceback before a handler writes it."""

    def __init__(self, mask: SecretMask) -> None:
        super().__init__()
        self.mask = mask

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed call is still written, its parts masked
            message = f"{record.msg} % {record.args!r}"
        record.msg, record.args = self.mask(message), ()
        if record.exc_info and not record.exc_text:
            # Formatted here so the mask sees it; formatters reuse exc_text once it is set.
            record.exc_text = _FORMATTER.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.mask(record.exc_text)
        if record.stack_info:
            record.stack_info = self.mask(record.stack_info)
        return True


def mask_logs(mask: SecretMask, loggers: Iterable[logging.Logger]) -> None:
    """Give every handler of loggers, and logging's last resort, a filter applying mask.

    A handler keeps one masking filter: installing again replaces it.
    """
    handlers = [handler for logger in loggers for handler in logger.handlers]
    if logging.lastResort is not None:  # where records go while no handler is set up
        handlers.append(logging.lastResort)
    for handler in handlers:
        for old in [f for f in handler.filters if isinstance(f, MaskingFilter)]:
            handler.removeFilter(old)
        handler.addFilter(MaskingFilter(mask))
