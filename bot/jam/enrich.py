"""Fetch a Jam's details from Jam's MCP server within a time budget; never raise.

The MCP server speaks JSON-RPC 2.0 over HTTP ("streamable HTTP"): `initialize`, the
`notifications/initialized` notice, then one `tools/call` per tool. Answers come as JSON
or as a short server-sent event stream; both are read. The tools' argument name
(`jamId`) is not documented publicly.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import requests

from bot.untrusted import clean_untrusted

MCP_URL = "https://mcp.jam.dev/mcp"
PROTOCOL_VERSION = "2025-03-26"
DEFAULT_BUDGET_S = 15.0
TOOLS = (
    ("getDetails", "Details"),
    ("getConsoleLogs", "Console logs"),
    ("getNetworkRequests", "Network requests"),
    ("getUserEvents", "User events"),
)
MAX_TOOL_CHARS = 20_000


@dataclass(frozen=True)
class Enrichment:
    """What Jam's MCP server added: (title, text) per tool, and why anything is missing."""

    sections: tuple[tuple[str, str], ...] = ()
    unavailable: str | None = None


class EnrichmentError(Exception):
    """One MCP exchange failed; the message is safe to show on a public issue."""


def enrich(
    jam_id: str,
    token: str | None,
    *,
    url: str = MCP_URL,
    budget_s: float = DEFAULT_BUDGET_S,
    session: requests.Session | None = None,
) -> Enrichment:
    """Return what the four Jam tools say about a Jam; without a token, say why not."""
    if not token:
        return Enrichment(unavailable="JAM_TOKEN is not set")
    if session is None:
        with requests.Session() as own:
            return enrich(jam_id, token, url=url, budget_s=budget_s, session=own)
    client = McpClient(url, token, budget_s, session)
    try:
        client.initialize()
    except EnrichmentError as error:
        return Enrichment(unavailable=str(error))
    sections, problems = [], []
    for tool, title in TOOLS:
        try:
            text = client.call_tool(tool, {"jamId": jam_id})
        except EnrichmentError as error:
            problems.append(f"{tool}: {error}")
            continue
        if text.strip():
            sections.append((title, text[:MAX_TOOL_CHARS]))
    return Enrichment(tuple(sections), "; ".join(problems) or None)


class McpClient:
    """A minimal MCP client over HTTP: one session, a shared deadline for every request."""

    def __init__(self, url: str, token: str, budget_s: float, session: requests.Session) -> None:
        self.url = url
        self.budget_s = budget_s
        self.deadline = time.monotonic() + budget_s
        self.http = session
        self.headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        self._ids = itertools.count(1)

    def initialize(self) -> None:
        """Open the session and announce the client as initialized."""
        self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "gaffer", "version": "1"},
            },
        )
        self.headers["MCP-Protocol-Version"] = PROTOCOL_VERSION
        self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Return a tool's text content; a tool error is raised as EnrichmentError."""
        result = self.request("tools/call", {"name": name, "arguments": dict(arguments)})
        content = result.get("content") if isinstance(result, Mapping) else None
        texts = [
            item["text"]
            for item in content or []
            if isinstance(item, Mapping) and isinstance(item.get("text"), str)
        ]
        if isinstance(result, Mapping) and result.get("isError"):
            reason = " ".join(" ".join(texts).split())[:200] or "the tool failed"
            raise EnrichmentError(clean_untrusted(reason, limit=200))
        return "\n".join(texts)

    def request(self, method: str, params: Mapping[str, Any]) -> Any:
        """Send one JSON-RPC request and return its result."""
        message_id = next(self._ids)
        response = self._post(
            {"jsonrpc": "2.0", "id": message_id, "method": method, "params": params}
        )
        answer = _answer(response, message_id)
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], Mapping) else {}
            raise EnrichmentError(f"{method} answered error {error.get('code', '?')}")
        return answer.get("result")

    def _post(self, message: Mapping[str, Any]) -> requests.Response:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise EnrichmentError(f"the {self.budget_s:g} s budget was spent")
        try:
            response = self.http.post(
                self.url, json=message, headers=self.headers, timeout=remaining
            )
        except requests.Timeout:
            raise EnrichmentError(f"timed out after {self.budget_s:g} s") from None
        except requests.RequestException as error:
            raise EnrichmentError(f"could not reach Jam ({type(error).__name__})") from None
        if response.status_code >= 400:
            raise EnrichmentError(f"Jam answered HTTP {response.status_code}")
        session_id = response.headers.get("Mcp-Session-Id")
        if session_id:
            self.headers["Mcp-Session-Id"] = session_id
        return response


def _answer(response: requests.Response, message_id: int) -> Mapping[str, Any]:
    """Return the JSON-RPC answer with this id, from a JSON body or an event stream."""
    try:
        if response.headers.get("Content-Type", "").startswith("text/event-stream"):
            messages = [
                json.loads(line[5:])
                for line in response.text.splitlines()
                if line.startswith("data:") and line[5:].strip()
            ]
        else:
            messages = [response.json()]
    except ValueError:
        raise EnrichmentError("Jam's answer was not JSON") from None
    for message in messages:
        if isinstance(message, Mapping) and message.get("id") == message_id:
            return message
    raise EnrichmentError("Jam's answer did not answer the request")


def enrichment_options(server_config: Mapping[str, Any]) -> tuple[str, float]:
    """Return the MCP URL and time budget from `jam.mcp_url` and `jam.enrich_timeout_s`."""
    section = server_config.get("jam")
    section = section if isinstance(section, Mapping) else {}
    url = section.get("mcp_url")
    budget = section.get("enrich_timeout_s")
    return (
        url if isinstance(url, str) and url else MCP_URL,
        float(budget) if isinstance(budget, int | float) and budget > 0 else DEFAULT_BUDGET_S,
    )
