"""Read a Jam report defensively, choose its repository, and write its GitHub issue.

The fields of a `jam.created` payload's `data` are not documented. Each value is looked
for under the names Jam is likely to use and none is required: a payload with no fields
at all still becomes an issue that links the Jam. Everything in a report was captured
from someone's browser, so it is cleaned and fenced before it reaches an issue.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from bot.untrusted import clean_untrusted

JAM_CREATED = "jam.created"
JAM_LINK = re.compile(r"https://(?:www\.)?jam\.dev/c/[A-Za-z0-9][A-Za-z0-9_-]*")
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_MENTION = re.compile(r"(?<![\w`])@[A-Za-z0-9][A-Za-z0-9-]*(?:/[A-Za-z0-9_.-]+)?")

MAX_ENTRIES = 50
MAX_ENTRY_CHARS = 1_000
MAX_SECTION_CHARS = 8_000
MAX_ENRICHED_CHARS = 6_000
MAX_TITLE_CHARS = 200
# GitHub refuses issue bodies over 65,536 characters.
MAX_BODY_CHARS = 64_000

# Where Jam may keep each value, first match wins; dotted names look inside objects.
ID_KEYS = ("id", "jamId", "jam_id", "jam.id")
LINK_KEYS = ("url", "jamUrl", "jam_url", "link", "shareUrl", "share_url", "jam.url")
PAGE_KEYS = ("pageUrl", "page_url", "page.url", "tab.url", "metadata.url", "url")
TITLE_KEYS = ("title", "name", "summary", "jam.title")
DESCRIPTION_KEYS = ("description", "notes", "comment", "jam.description")
CONSOLE_KEYS = ("consoleLogs", "console_logs", "console", "logs", "console.logs")
NETWORK_KEYS = ("networkRequests", "network_requests", "network", "requests")
STEP_KEYS = ("steps", "reproSteps", "repro_steps", "userEvents", "user_events", "events")
DEVICE_KEYS = {
    "Device": ("device", "metadata.device"),
    "Operating system": ("os", "device.os", "metadata.os", "operatingSystem"),
    "Viewport": ("viewport", "metadata.viewport", "screen"),
    "Network speed": ("networkSpeed", "network_speed", "metadata.networkSpeed"),
    "Country": ("country", "location.country", "metadata.country"),
}
BROWSER_KEYS = {
    "Browser": ("browser", "metadata.browser", "device.browser"),
    "User agent": ("userAgent", "user_agent", "metadata.userAgent"),
}
ERROR_LEVELS = frozenset({"error", "exception", "fatal", "assert", "uncaught"})


class JamConfigError(ValueError):
    """The `jam` section of the server settings is malformed."""


@dataclass(frozen=True)
class Jam:
    """What gaffer could read from one Jam report."""

    id: str
    url: str | None = None
    title: str = ""
    description: str = ""
    page_url: str | None = None
    console_errors: tuple[str, ...] = ()
    failed_requests: tuple[str, ...] = ()
    device: tuple[tuple[str, str], ...] = ()
    browser: tuple[tuple[str, str], ...] = ()
    steps: tuple[str, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def page_host(self) -> str | None:
        """Return the captured page's host name, lower-cased, if the report has one."""
        if not self.page_url:
            return None
        url = self.page_url if "://" in self.page_url else f"//{self.page_url}"
        try:
            return urlsplit(url).hostname
        except ValueError:
            return None


# --------------------------------------------------------------------------- reading


def read_envelope(payload: Mapping[str, Any]) -> Jam:
    """Return the Jam an envelope {id, type, created_at, data} describes; never fail."""
    data = payload.get("data")
    data = data if isinstance(data, Mapping) else {}
    url = _jam_link(data)
    jam_id = _jam_id(data, url, payload)
    if url is None and _UUID.fullmatch(jam_id):
        url = f"https://jam.dev/c/{jam_id}"
    return Jam(
        id=jam_id,
        url=url,
        title=_text(_first(data, TITLE_KEYS)) or "",
        description=_text(_first(data, DESCRIPTION_KEYS)) or "",
        page_url=_page_url(data),
        console_errors=_collect(_first(data, CONSOLE_KEYS), _console_error),
        failed_requests=_collect(_first(data, NETWORK_KEYS), _failed_request),
        device=_facts(data, DEVICE_KEYS),
        browser=_facts(data, BROWSER_KEYS),
        steps=_collect(_first(data, STEP_KEYS), _step),
        data=data,
    )


def _jam_id(data: Mapping[str, Any], url: str | None, payload: Mapping[str, Any]) -> str:
    found = _text(_first(data, ID_KEYS))
    if not found and url:
        found = url.rstrip("/").rsplit("/", 1)[-1]
    if not found:
        found = _text(payload.get("id"))
    if not found:
        found = json.dumps(payload, sort_keys=True, default=str)
    # The id goes into an HTML comment and a unique column: anything odd is hashed.
    if _SAFE_ID.fullmatch(found):
        return found
    return "sha256:" + hashlib.sha256(found.encode()).hexdigest()[:40]


def _jam_link(data: Mapping[str, Any]) -> str | None:
    candidates = [_lookup(data, key) for key in LINK_KEYS] + list(data.values())
    for value in candidates:
        if isinstance(value, str) and (match := JAM_LINK.match(value.strip())):
            return match.group(0)
    return None


def _page_url(data: Mapping[str, Any]) -> str | None:
    for key in PAGE_KEYS:
        value = _text(_lookup(data, key))
        if value and not JAM_LINK.match(value):
            return value.strip()[:MAX_ENTRY_CHARS]
    return None


def _lookup(data: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, Mapping):
            return None
        data = data.get(part)
    return data


def _first(data: Any, keys: Iterable[str]) -> Any:
    for key in keys:
        value = _lookup(data, key)
        if value not in (None, "", [], {}):
            return value
    return None


def _text(value: Any) -> str | None:
    """Return a scalar, a list of scalars or a flat object as one line of text."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str | int | float):
        return str(value).strip() or None
    if isinstance(value, list):
        words = [_text(item) for item in value if not isinstance(item, list | Mapping)]
        return " ".join(word for word in words if word) or None
    if isinstance(value, Mapping):
        parts = [
            f"{key}: {text}"
            for key, item in value.items()
            if not isinstance(item, list | Mapping) and (text := _text(item))
        ]
        return ", ".join(parts) or None
    return None


def _collect(value: Any, read: Callable[[Any], str | None]) -> tuple[str, ...]:
    if isinstance(value, str):
        items: list[Any] = value.splitlines()
    elif isinstance(value, Mapping):
        items = [value]
    elif isinstance(value, list):
        items = value
    else:
        return ()
    found = [read(item) for item in items]
    return tuple(text[:MAX_ENTRY_CHARS] for text in found if text)


def _console_error(entry: Any) -> str | None:
    if isinstance(entry, str):
        return entry.strip() or None
    if not isinstance(entry, Mapping):
        return None
    level = _text(_first(entry, ("level", "severity", "type", "method")))
    if level is not None and level.lower() not in ERROR_LEVELS:
        return None
    message = _text(_first(entry, ("message", "text", "msg", "args", "value", "stack")))
    return f"[{level or 'console'}] {message or '(no message)'}"


def _failed_request(entry: Any) -> str | None:
    if not isinstance(entry, Mapping):
        return None
    status = _first(entry, ("status", "statusCode", "status_code", "response.status"))
    error = _text(_first(entry, ("error", "errorText", "failure", "response.error")))
    code = _status_code(status)
    failed = bool(error) or entry.get("failed") is True or (code is not None and not 0 < code < 400)
    if not failed:
        return None
    method = _text(_first(entry, ("method", "request.method")))
    url = _text(_first(entry, ("url", "request.url", "name"))) or "(no URL)"
    outcome = " ".join(p for p in (_text(status), error) if p) or "failed"
    return " ".join(p for p in (method, url, "->", outcome) if p)


def _status_code(value: Any) -> int | None:
    try:
        return int(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _step(entry: Any) -> str | None:
    if isinstance(entry, str):
        return entry.strip() or None
    if not isinstance(entry, Mapping):
        return None
    kind = _text(_first(entry, ("type", "action", "event", "name")))
    target = _text(_first(entry, ("text", "label", "target", "selector", "element", "value")))
    where = _text(_first(entry, ("url", "page")))
    words = " ".join(p for p in (kind, target) if p)
    return " ".join(p for p in (words, f"({where})" if where else None) if p) or None


def _facts(
    data: Mapping[str, Any], keys: Mapping[str, Sequence[str]]
) -> tuple[tuple[str, str], ...]:
    found = ((label, _text(_first(data, paths))) for label, paths in keys.items())
    return tuple((label, value[:MAX_ENTRY_CHARS]) for label, value in found if value)


# --------------------------------------------------------------------------- routing


@dataclass(frozen=True)
class Route:
    """Send a Jam to a repository by its page's host, or by one of its fields' value."""

    repository: str
    host: str | None = None
    field: str | None = None
    equals: str | None = None

    def matches(self, jam: Jam) -> bool:
        if self.host is not None:
            host = jam.page_host
            return host is not None and fnmatch.fnmatchcase(host, self.host.lower())
        value = _lookup(jam.data, self.field or "")
        values = value if isinstance(value, list) else [value]
        return any(_text(v) == self.equals for v in values if v is not None)


@dataclass(frozen=True)
class JamRoutes:
    """The routes in order, and the repository for a Jam none of them matches."""

    routes: tuple[Route, ...] = ()
    default_repository: str | None = None

    def repository_for(self, jam: Jam) -> str | None:
        """Return the first matching route's repository, else the default (maybe None)."""
        for route in self.routes:
            if route.matches(jam):
                return route.repository
        return self.default_repository


def parse_routes(server_config: Mapping[str, Any]) -> JamRoutes:
    """Read and check `jam.routes` and `jam.default_repository` from the server settings."""
    section = server_config.get("jam") or {}
    if not isinstance(section, Mapping):
        raise JamConfigError("`jam` must be a mapping")
    raw = section.get("routes") or []
    if not isinstance(raw, list):
        raise JamConfigError("`jam.routes` must be a list of {host or field, repository}")
    default = section.get("default_repository")
    return JamRoutes(
        tuple(_route(item, index) for index, item in enumerate(raw, 1)),
        None if default is None else _repository(default, "`jam.default_repository`"),
    )


def _route(item: Any, index: int) -> Route:
    where = f"jam route {index}"
    if not isinstance(item, Mapping):
        raise JamConfigError(f"{where} must be a mapping")
    repository = _repository(item.get("repository"), f"{where}: `repository`")
    host, name = item.get("host"), item.get("field")
    if (host is None) == (name is None):
        raise JamConfigError(f"{where} needs exactly one of `host` or `field`")
    if host is not None:
        if not isinstance(host, str) or not host.strip():
            raise JamConfigError(f"{where}: `host` must be a host name such as app.example.com")
        return Route(repository, host=host.strip())
    if not isinstance(name, str) or not name.strip() or item.get("equals") is None:
        raise JamConfigError(f"{where}: `field` needs a name and an `equals` value")
    return Route(repository, field=name.strip(), equals=_text(item["equals"]))


def _repository(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _REPOSITORY.fullmatch(value.strip()):
        raise JamConfigError(f"{where} must be a repository as owner/name")
    return value.strip()


# --------------------------------------------------------------------------- the issue


def issue_marker(jam_id: str) -> str:
    """Return the hidden marker that ties an issue to its Jam."""
    return f"<!-- gaffer:jam {jam_id} -->"


def render_issue(
    jam: Jam, *, enriched: Sequence[tuple[str, str]] = (), unavailable: str | None = None
) -> tuple[str, str]:
    """Return the issue's title and body: the Jam's link, then its context in sections."""
    head = [issue_marker(jam.id), _introduction(jam)]
    if jam.description:
        head.append(_quoted(jam.description))
    sections = [
        _details("Console errors", jam.console_errors, count=True),
        _details("Failed network requests", jam.failed_requests, count=True),
        _details("Page URL", [jam.page_url] if jam.page_url else []),
        _details("Device", [f"{label}: {value}" for label, value in jam.device]),
        _details("Browser", [f"{label}: {value}" for label, value in jam.browser]),
        _details("Steps", jam.steps, count=True, numbered=True),
    ]
    extra = [
        _details(f"{name} (from Jam)", [text], limit=MAX_ENRICHED_CHARS) for name, text in enriched
    ]
    note = _enrichment_note(bool(enriched), unavailable)
    body = _join([*head, *sections, *extra, note])
    if len(body) > MAX_BODY_CHARS:
        note = "_Jam's enrichment was left out: the issue would have been too long for GitHub._"
        body = _join([*head, *sections, note])
    return issue_title(jam), body[:MAX_BODY_CHARS]


def issue_title(jam: Jam) -> str:
    """Return the issue title: the report's own, else its description's start, else its id."""
    text = " ".join(clean_untrusted(jam.title or jam.description, limit=4_000).split())
    if not text:
        return f"Jam report {jam.id[:40]}"
    return text if len(text) <= MAX_TITLE_CHARS else text[: MAX_TITLE_CHARS - 1] + "…"


def _introduction(jam: Jam) -> str:
    if jam.url:
        return (
            f"Reported with [Jam]({jam.url}): the recording and its full console, network "
            "and device details are there."
        )
    return f"Reported with Jam (`{jam.id}`); the report carried no link to the Jam."


def _quoted(text: str) -> str:
    cleaned = _MENTION.sub(lambda m: f"`{m.group(0)}`", clean_untrusted(text, limit=4_000))
    return "\n".join(f"> {line}" for line in cleaned.splitlines())


def _details(
    summary: str,
    entries: Sequence[str],
    *,
    count: bool = False,
    numbered: bool = False,
    limit: int = MAX_SECTION_CHARS,
) -> str:
    if not entries:
        return ""
    shown = [
        f"{number}. {entry}" if numbered else entry
        for number, entry in enumerate(entries[:MAX_ENTRIES], 1)
    ]
    if len(entries) > MAX_ENTRIES:
        shown.append(f"… and {len(entries) - MAX_ENTRIES} more")
    title = f"{summary} ({len(entries)})" if count else summary
    return f"<details><summary>{title}</summary>\n\n{_fenced(shown, limit)}\n\n</details>"


def _fenced(lines: Sequence[str], limit: int) -> str:
    text = clean_untrusted("\n".join(lines), limit=limit)
    # A fence longer than any run of backticks inside keeps the text from closing it.
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def _enrichment_note(enriched: bool, unavailable: str | None) -> str:
    if unavailable is None:
        return ""
    if enriched:
        return f"_Part of the enrichment from Jam was unavailable: {unavailable}._"
    return (
        f"_Enrichment from Jam was unavailable ({unavailable}); "
        "this issue holds what the webhook carried._"
    )


def _join(parts: Iterable[str]) -> str:
    return "\n\n".join(part for part in parts if part) + "\n"


# --------------------------------------------------------------------------- reading issues


_DETAILS = re.compile(
    r"<details>\s*<summary>(.*?)</summary>(.*?)</details>", re.DOTALL | re.IGNORECASE
)
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_TAG = re.compile(r"<[^>]*>")


def jam_links(body: str) -> list[str]:
    """Return the jam.dev links in an issue body, first seen first, without repeats."""
    return list(dict.fromkeys(JAM_LINK.findall(body or "")))


def debug_sections(body: str) -> list[tuple[str, str]]:
    """Return (name, text) sections of a Jam issue: its <details> blocks, else its headings."""
    found = [
        (_TAG.sub("", summary).strip(), text.strip()) for summary, text in _DETAILS.findall(body)
    ]
    if found:
        return [(name or "Details", text) for name, text in found if text]
    headings = list(_HEADING.finditer(body))
    sections = []
    for heading, following in zip(headings, [*headings[1:], None], strict=True):
        end = following.start() if following else len(body)
        text = body[heading.end() : end].strip()
        if text:
            sections.append((heading.group(1).strip(), text))
    return sections
