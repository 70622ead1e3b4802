"""A model server on loopback that speaks Anthropic's Messages API, for the real agent CLIs.

Each POST to /v1/messages takes the next scripted reply (the last one repeats): a text
answer, a tool call, an HTTP error with headers, or a slow stream. Streaming requests get
server-sent events shaped as Anthropic sends them: usage in message_start, the output
count in the closing message_delta. Every request is kept for the test to read.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Text:
    """A final answer, streamed in pieces with a pause between them (a slow stream)."""

    text: str
    input_tokens: int = 100
    output_tokens: int = 50
    pieces: int = 1
    seconds_between: float = 0.0


@dataclass(frozen=True)
class ToolCall:
    """A call of one of the CLI's tools, e.g. Write {file_path, content}."""

    name: str
    arguments: dict[str, Any]
    input_tokens: int = 100
    output_tokens: int = 30


@dataclass(frozen=True)
class Refusal:
    """An HTTP error as the API sends it: 429 with a reset, 401, 529…"""

    status: int
    message: str
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return {401: "authentication_error", 429: "rate_limit_error"}.get(self.status, "api_error")


Reply = Text | ToolCall | Refusal
MODEL = "claude-sonnet-4-5"


class ModelServer:
    """Serve scripted replies; read `requests` for what the CLI sent."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def next_reply(self, request: dict[str, Any]) -> Reply:
        with self.lock:
            self.requests.append(request)
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

    def message_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].startswith("/v1/messages")]


@contextmanager
def model_server(replies: list[Reply]) -> Iterator[ModelServer]:
    server = ModelServer(replies)
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


def _handler(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - the http.server hook's name
            server.requests.append({"path": self.path, "method": "GET"})
            self._json(404, {"type": "error", "error": {"type": "not_found_error"}})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
                server.requests.append({"path": self.path, "method": "POST", "body": body})
                self._json(200, {"input_tokens": 100})
                return
            reply = server.next_reply({"path": self.path, "method": "POST", "body": body})
            if isinstance(reply, Refusal):
                error = {"type": "error", "error": {"type": reply.kind, "message": reply.message}}
                self._json(reply.status, error, reply.headers)
            elif body.get("stream"):
                self._stream(reply, body)
            else:
                self._json(200, _message(reply, body, final=True))

        def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
            out = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(out)

        def _stream(self, reply: Text | ToolCall, body: dict[str, Any]) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True
            for name, data in _events(reply, body):
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                if name == "content_block_delta" and isinstance(reply, Text):
                    time.sleep(reply.seconds_between)

    return Handler


def _message(reply: Text | ToolCall, body: dict[str, Any], *, final: bool) -> dict[str, Any]:
    content = [_block(reply)] if final else []
    stop = "tool_use" if isinstance(reply, ToolCall) else "end_turn"
    return {
        "id": f"msg_{id(reply)}_{time.monotonic_ns()}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model") or MODEL,
        "content": content,
        "stop_reason": stop if final else None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": reply.input_tokens,
            "output_tokens": reply.output_tokens if final else 1,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        },
    }


def _block(reply: Text | ToolCall) -> dict[str, Any]:
    if isinstance(reply, Text):
        return {"type": "text", "text": reply.text}
    return {"type": "tool_use", "id": "toolu_1", "name": reply.name, "input": reply.arguments}


def _events(reply: Text | ToolCall, body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "message_start", {"type": "message_start", "message": _message(reply, body, final=False)}
    if isinstance(reply, ToolCall):
        start = {"type": "tool_use", "id": "toolu_1", "name": reply.name, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(reply.arguments)}
        stop_reason, texts = "tool_use", [delta]
    else:
        start = {"type": "text", "text": ""}
        size = -(-len(reply.text) // reply.pieces)
        texts = [
            {"type": "text_delta", "text": reply.text[i : i + size]}
            for i in range(0, len(reply.text), size)
        ]
        stop_reason = "end_turn"
    yield "content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}
    for delta in texts:
        yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": reply.output_tokens},
        },
    )
    yield "message_stop", {"type": "message_stop"}
