"""A model server on loopback for the real agent CLIs: Anthropic's Messages API
(`/v1/messages`), OpenAI's Responses API (`/v1/responses`) and Chat Completions
(`/v1/chat/completions`, whole answers only), and Gemini's generateContent
(`/v1beta/models/…`).

Each model call takes the next scripted reply (the last one repeats): a text answer, a
tool call, an HTTP error with headers, or a slow stream. Streaming calls get server-sent
events shaped as each API sends them: for Anthropic, usage in message_start and the output
count in the closing message_delta; for OpenAI, usage in response.completed. Every request
is kept for the test to read.
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
    output_tokens: int = 50  # reasoning included, as the APIs count
    pieces: int = 1
    seconds_between: float = 0.0
    reasoning_tokens: int = 0  # reported apart by the Responses API


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
        # Streams the client went away from before their last event (a stopped agent).
        self.streams_cut = 0
        self.streams_open = 0
        self.lock = threading.Lock()
        self.quiet = threading.Condition(self.lock)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def next_reply(self, request: dict[str, Any]) -> Reply:
        with self.lock:
            self.requests.append(request)
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]

    def wait_until_streams_end(self, timeout: float = 30) -> None:
        """Wait until no stream is being written (each ended or was cut)."""
        with self.quiet:
            if not self.quiet.wait_for(lambda: self.streams_open == 0, timeout):
                raise AssertionError(f"{self.streams_open} stream(s) still open")

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
            if self.path.startswith("/v1/responses"):
                self._respond_openai(body)
                return
            if self.path.startswith("/v1/chat/completions"):
                self._complete_chat(body)
                return
            if self.path.startswith("/v1beta/models/"):
                self._generate_gemini(body)
                return
            if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
                server.requests.append({"path": self.path, "method": "POST", "body": body})
                self._json(200, {"input_tokens": 100})
                return
            reply = server.next_reply({"path": self.path, "method": "POST", "body": body})
            if isinstance(reply, Refusal):
                error = {"type": "error", "error": {"type": reply.kind, "message": reply.message}}
                self._json(reply.status, error, reply.headers)
            elif body.get("stream"):
                self._sse(_paced(_events(reply, body), reply))
            else:
                self._json(200, _message(reply, body, final=True))

        def _respond_openai(self, body: dict[str, Any]) -> None:
            reply = server.next_reply({"path": self.path, "method": "POST", "body": body})
            if isinstance(reply, Refusal):
                self._refuse_openai(reply)
                return
            self._sse(_openai_events(reply, body))

        def _complete_chat(self, body: dict[str, Any]) -> None:
            reply = server.next_reply({"path": self.path, "method": "POST", "body": body})
            if isinstance(reply, Refusal):
                self._refuse_openai(reply)
                return
            if isinstance(reply, ToolCall):
                raise ValueError("chat completions here answer with text only")
            usage = {
                "prompt_tokens": reply.input_tokens,
                "completion_tokens": reply.output_tokens,
                "total_tokens": reply.input_tokens + reply.output_tokens,
            }
            message = {"role": "assistant", "content": reply.text}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            completion = {
                "id": f"chatcmpl-{time.monotonic_ns()}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model") or "gpt-4.1",
                "choices": [choice],
                "usage": usage,
            }
            self._json(200, completion)

        def _generate_gemini(self, body: dict[str, Any]) -> None:
            if ":countTokens" in self.path:
                self._json(200, {"totalTokens": 100})
                return
            model = self.path.split("/models/", 1)[1].split(":", 1)[0]
            reply = server.next_reply({"path": self.path, "method": "POST", "body": body})
            if isinstance(reply, Refusal):
                status = {401: "UNAUTHENTICATED", 429: "RESOURCE_EXHAUSTED"}.get(reply.status)
                error = {"code": reply.status, "message": reply.message, "status": status}
                self._json(reply.status, {"error": error}, reply.headers)
                return
            chunk = _gemini_chunk(reply, model)
            if "alt=sse" in self.path:
                self._sse(iter([("", chunk)]))
            else:
                self._json(200, chunk)

        def _refuse_openai(self, reply: Refusal) -> None:
            code = {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(reply.status)
            error = {"message": reply.message, "type": reply.kind, "code": code}
            self._json(reply.status, {"error": error}, reply.headers)

        def _sse(self, events: Iterator[tuple[str, dict[str, Any]]]) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True
            with server.lock:
                server.streams_open += 1
            try:
                for name, data in events:
                    head = f"event: {name}\n" if name else ""
                    self.wfile.write(f"{head}data: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                with server.lock:
                    server.streams_cut += 1
            finally:
                with server.quiet:
                    server.streams_open -= 1
                    server.quiet.notify_all()

        def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
            out = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(out)

    return Handler


def _paced(
    events: Iterator[tuple[str, dict[str, Any]]], reply: Text | ToolCall
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Pause after each piece of text, as a slow stream does."""
    for name, data in events:
        yield name, data
        if name == "content_block_delta" and isinstance(reply, Text):
            time.sleep(reply.seconds_between)


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


def _openai_events(
    reply: Text | ToolCall, body: dict[str, Any]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """A Responses API stream: the item, its text or arguments, then usage at completion."""
    response = {
        "id": f"resp_{time.monotonic_ns()}",
        "object": "response",
        "status": "in_progress",
        "model": body.get("model") or "gpt-5",
        "output": [],
    }
    if isinstance(reply, ToolCall):
        arguments = json.dumps(reply.arguments)
        item: dict[str, Any] = {
            "type": "function_call",
            "id": "fc_1",
            "call_id": f"call_{time.monotonic_ns()}",
            "name": reply.name,
            "arguments": arguments,
            "status": "completed",
        }
        delta = ("response.function_call_arguments.delta", {"delta": arguments})
    else:
        content = [{"type": "output_text", "text": reply.text, "annotations": []}]
        item = {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": content,
        }
        delta = ("response.output_text.delta", {"content_index": 0, "delta": reply.text})
    started = {**item, "status": "in_progress"}
    usage = {
        "input_tokens": reply.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": reply.output_tokens,
        "output_tokens_details": {"reasoning_tokens": getattr(reply, "reasoning_tokens", 0)},
        "total_tokens": reply.input_tokens + reply.output_tokens,
    }
    yield "response.created", {"type": "response.created", "response": response}
    yield (
        "response.output_item.added",
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": started,
        },
    )
    name, data = delta
    yield name, {"type": name, "output_index": 0, "item_id": item["id"], **data}
    yield (
        "response.output_item.done",
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": item,
        },
    )
    done = {**response, "status": "completed", "output": [item], "usage": usage}
    yield "response.completed", {"type": "response.completed", "response": done}


def _gemini_chunk(reply: Text | ToolCall, model: str) -> dict[str, Any]:
    """A whole generateContent answer: the text or function call, and its usage."""
    if isinstance(reply, ToolCall):
        part: dict[str, Any] = {"functionCall": {"name": reply.name, "args": reply.arguments}}
    else:
        part = {"text": reply.text}
    candidate = {
        "content": {"parts": [part], "role": "model"},
        "finishReason": "STOP",
        "index": 0,
    }
    usage = {
        "promptTokenCount": reply.input_tokens,
        "candidatesTokenCount": reply.output_tokens,
        "totalTokenCount": reply.input_tokens + reply.output_tokens,
    }
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": model}
