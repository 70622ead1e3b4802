"""The egress proxy: which destinations a sandboxed run may reach, and the proxy that says so."""

from __future__ import annotations

import socket
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tasks.isolation import egress
from tasks.isolation.egress import EgressPolicy, EgressProxy

# A safety net, not an assertion: a broken proxy fails the test instead of hanging it.
CLIENT_TIMEOUT_S = 10
NOT_LISTED = "not in the agent's egress list"
OWN_SERVICE = "one of gaffer's own services"
PUBLIC = ("93.184.215.14",)

LISTED = EgressPolicy(
    allow=(
        "api.example.com",
        "*.pkg.example.com",
        "mirror.example.com:8443",
        "127.0.0.1:8081",
        "localhost:8081",
        "*.models.example.com:8081",
        "10.1.2.3:3000",
        "db.example.com:5432",
        "127.0.0.1:5432",
    ),
    refused_services=(("127.0.0.1", 5432), ("10.0.0.7", 5432)),
)
OPEN = EgressPolicy(allow=None, refused_services=(("127.0.0.1", 5432), ("10.0.0.7", 5432)))

REFUSALS = [
    pytest.param(LISTED, "api.example.com", 443, PUBLIC, None, id="a listed name on 443"),
    pytest.param(
        LISTED, "api.example.com", 80, PUBLIC, NOT_LISTED, id="a listed name on another port"
    ),
    pytest.param(LISTED, "evil.example.net", 443, (), NOT_LISTED, id="a name not in the list"),
    pytest.param(LISTED, "a.pkg.example.com", 443, PUBLIC, None, id="a subdomain of a wildcard"),
    pytest.param(
        LISTED, "x.y.pkg.example.com", 443, PUBLIC, None, id="a deeper subdomain of a wildcard"
    ),
    pytest.param(LISTED, "pkg.example.com", 443, PUBLIC, NOT_LISTED, id="the apex of a wildcard"),
    pytest.param(
        LISTED,
        "evilpkg.example.com",
        443,
        PUBLIC,
        NOT_LISTED,
        id="a name that only ends like a wildcard",
    ),
    pytest.param(
        LISTED, "API.Example.com.", 443, PUBLIC, None, id="a listed name in capitals with a dot"
    ),
    pytest.param(LISTED, "mirror.example.com", 8443, PUBLIC, None, id="an entry with its port"),
    pytest.param(
        EgressPolicy(allow=()), "api.example.com", 443, PUBLIC, NOT_LISTED, id="an empty list"
    ),
    pytest.param(
        OPEN,
        "169.254.169.254",
        80,
        ("169.254.169.254",),
        "resolves to 169.254.169.254, a cloud metadata address",
        id="the metadata address",
    ),
    pytest.param(
        LISTED,
        "api.example.com",
        443,
        ("93.184.215.14", "169.254.169.254"),
        "cloud metadata",
        id="a listed name with one address at the metadata service",
    ),
    pytest.param(
        OPEN,
        "x.example.com",
        443,
        ("::ffff:169.254.169.254",),
        "cloud metadata",
        id="the metadata address wrapped in IPv6",
    ),
    pytest.param(
        OPEN, "x.example.com", 443, ("fe80::1",), "link-local", id="an IPv6 link-local address"
    ),
    pytest.param(OPEN, "0.0.0.0", 8081, ("0.0.0.0",), "unspecified", id="the unspecified address"),
    pytest.param(OPEN, "x.example.com", 443, ("224.0.0.1",), "multicast", id="a multicast address"),
    pytest.param(
        OPEN, "localhost", 8081, ("127.0.0.1",), "a loopback address", id="loopback not listed"
    ),
    pytest.param(
        LISTED,
        "api.example.com",
        443,
        ("127.0.0.1",),
        "loopback",
        id="a listed name that resolves to loopback",
    ),
    pytest.param(
        LISTED, "127.0.0.1", 8081, ("127.0.0.1",), None, id="a configured local model endpoint"
    ),
    pytest.param(
        LISTED,
        "localhost",
        8081,
        ("::1", "127.0.0.1"),
        None,
        id="a configured local model endpoint by name",
    ),
    pytest.param(
        LISTED,
        "gpu.models.example.com",
        8081,
        ("127.0.0.1",),
        "loopback",
        id="a wildcard with a port does not open loopback",
    ),
    pytest.param(
        LISTED,
        "api.example.com",
        443,
        ("10.1.2.3",),
        "a private address",
        id="a listed name that resolves to a private address",
    ),
    pytest.param(
        LISTED, "10.1.2.3", 3000, ("10.1.2.3",), None, id="a listed private endpoint with a port"
    ),
    pytest.param(
        LISTED,
        "api.example.com",
        443,
        ("100.101.102.103",),
        "a private address",
        id="a listed name that resolves into a tailnet",
    ),
    pytest.param(
        LISTED,
        "api.example.com",
        443,
        ("198.18.0.5",),
        None,
        id="a listed name at an address a fake-IP resolver made up",
    ),
    pytest.param(
        LISTED,
        "127.0.0.1",
        5432,
        ("127.0.0.1",),
        OWN_SERVICE,
        id="the database's port even when listed",
    ),
    pytest.param(
        LISTED,
        "db.example.com",
        5432,
        ("10.0.0.7",),
        OWN_SERVICE,
        id="the database under another name",
    ),
    pytest.param(
        OPEN,
        "10.0.0.7",
        22,
        ("10.0.0.7",),
        None,
        id="another port of a service's machine for a check",
    ),
    pytest.param(OPEN, "example.org", 443, PUBLIC, None, id="any public host for a check"),
    pytest.param(
        OPEN, "mirror.office", 8080, ("192.168.4.2",), None, id="an office mirror for a check"
    ),
    pytest.param(OPEN, "evil host", 443, (), "not a host name", id="a host that is not a name"),
]


@pytest.mark.parametrize(("policy", "host", "port", "addresses", "expected"), REFUSALS)
def test_refusal(policy, host, port, addresses, expected):
    why = policy.refusal(host, port, addresses)
    if expected is None:
        assert why is None
    else:
        assert why is not None and expected in why


@pytest.mark.parametrize(
    "entry",
    ["api.example.com:https", "[::1", "a:b:c", "bad host", "api.example.com:70000"],
    ids=["a named port", "an open bracket", "two colons", "a space", "a port out of range"],
)
def test_a_malformed_entry_fails_when_the_policy_is_made(entry):
    with pytest.raises(ValueError):
        EgressPolicy(allow=(entry,))


class _Echo(BaseHTTPRequestHandler):
    """Answer any request with what arrived: method, path, two headers and the body."""

    def do_GET(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        body = (
            f"{self.command} {self.path} host={self.headers['Host']} "
            f"connection={self.headers['Connection']} {self.rfile.read(length).decode()}"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def web() -> Iterator[int]:
    """Serve HTTP on 127.0.0.1; yield the port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join()


def proxy(tmp_path: Path, allow: tuple[str, ...] | None, refused=()) -> EgressProxy:
    policy = EgressPolicy(allow=allow, refused_services=refused)
    return EgressProxy(tmp_path / "egress.sock", policy, tmp_path / "logs" / "egress.log")


def dial(running: EgressProxy) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(CLIENT_TIMEOUT_S)
    client.connect(str(running.socket_path))
    return client


def read_head(client: socket.socket) -> bytes:
    received = b""
    while not received.endswith(b"\r\n\r\n"):
        chunk = client.recv(1)
        assert chunk, f"the proxy closed after {received!r}"
        received += chunk
    return received


def read_all(client: socket.socket) -> bytes:
    received = b""
    while chunk := client.recv(65536):
        received += chunk
    return received


def ask(running: EgressProxy, request: bytes) -> bytes:
    with dial(running) as client:
        client.sendall(request)
        return read_all(client)


def logged(tmp_path: Path) -> list[str]:
    log = tmp_path / "logs" / "egress.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize(
    "version",
    ["HTTP/1.1", "HTTP/1.0"],
    ids=["a CONNECT from an HTTPS client", "a CONNECT from the sandbox's port forwarder"],
)
def test_a_connect_to_a_listed_local_server_relays_both_ways(tmp_path, web, version):
    with proxy(tmp_path, (f"127.0.0.1:{web}",)) as running, dial(running) as client:
        client.sendall(f"CONNECT 127.0.0.1:{web} {version}\r\n\r\n".encode())
        assert read_head(client) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        client.sendall(b"GET /through HTTP/1.1\r\nHost: model\r\n\r\n")
        answer = read_all(client)
    assert answer.startswith(b"HTTP/1.0 200")
    assert answer.endswith(b"GET /through host=model connection=None ")
    assert running.attempts == [("127.0.0.1", web, None)]
    assert logged(tmp_path) == [f"allowed 127.0.0.1:{web}"]


def test_a_connect_to_an_unlisted_host_is_forbidden_and_logged(tmp_path):
    with proxy(tmp_path, ("api.example.com",)) as running:
        answer = ask(running, b"CONNECT evil.example.net:443 HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert answer.endswith(
        b"\r\n\r\ngaffer refused evil.example.net:443: " + NOT_LISTED.encode() + b"\n"
    )
    assert running.attempts == [("evil.example.net", 443, NOT_LISTED)]
    assert logged(tmp_path) == [f"refused evil.example.net:443: {NOT_LISTED}"]


PLAIN = [
    pytest.param(
        "GET http://127.0.0.1:{port}/x?q=1 HTTP/1.1\r\nHost: elsewhere\r\n"
        "Proxy-Connection: keep-alive\r\n\r\n",
        "GET /x?q=1 host=127.0.0.1:{port} connection=close ",
        id="a GET goes on in origin form to the URL's host, closing",
    ),
    pytest.param(
        "POST http://127.0.0.1:{port}/form HTTP/1.1\r\nContent-Length: 4\r\n\r\nping",
        "POST /form host=127.0.0.1:{port} connection=close ping",
        id="a POST carries its body",
    ),
]


@pytest.mark.parametrize(("request_text", "seen"), PLAIN)
def test_a_plain_http_request_to_a_listed_server_returns_its_answer(
    tmp_path, web, request_text, seen
):
    with proxy(tmp_path, (f"127.0.0.1:{web}",)) as running:
        answer = ask(running, request_text.format(port=web).encode())
    assert answer.startswith(b"HTTP/1.0 200")
    assert answer.endswith(seen.format(port=web).encode())
    assert running.attempts == [("127.0.0.1", web, None)]


@pytest.mark.parametrize(
    "service",
    ["127.0.0.1", "localhost"],
    ids=["named by its address", "named by a name that resolves to it"],
)
def test_one_of_gaffers_services_is_forbidden_even_when_listed(tmp_path, web, service):
    with proxy(tmp_path, (f"127.0.0.1:{web}",), ((service, web),)) as running:
        answer = ask(running, f"CONNECT 127.0.0.1:{web} HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert running.attempts == [("127.0.0.1", web, OWN_SERVICE)]
    assert logged(tmp_path) == [f"refused 127.0.0.1:{web}: {OWN_SERVICE}"]


GARBAGE = [
    pytest.param(b"hello\r\n\r\n", id="a line that is not HTTP"),
    pytest.param(b"GET /x HTTP/1.1\r\nHost: example.com\r\n\r\n", id="an origin-form request"),
    pytest.param(b"CONNECT example.com HTTP/1.1\r\n\r\n", id="a CONNECT without a port"),
    pytest.param(b"GET https://example.com/ HTTP/1.1\r\n\r\n", id="an absolute https URL"),
    pytest.param(
        b"GET http://example.com/ HTTP/1.1\r\nnonsense\r\n\r\n", id="a header line without a colon"
    ),
    pytest.param(b"CONNECT ex%ample.com:443 HTTP/1.1\r\n\r\n", id="a host that is not a name"),
    pytest.param(b"CONNECT example.com:443 SMTP/1.0\r\n\r\n", id="another protocol"),
]


@pytest.mark.parametrize("request_bytes", GARBAGE)
def test_anything_else_is_a_bad_request(tmp_path, request_bytes):
    with proxy(tmp_path, None) as running:
        answer = ask(running, request_bytes)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert running.attempts == []
    assert logged(tmp_path) == []


def test_a_head_too_large_is_refused(tmp_path):
    endless = b"GET http://example.com/ HTTP/1.1\r\nX-Filler: " + b"a" * egress.MAX_HEAD_BYTES
    with proxy(tmp_path, None) as running:
        answer = ask(running, endless)
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert running.attempts == []


def test_a_client_too_slow_with_its_head_is_cut_off(tmp_path, monkeypatch):
    monkeypatch.setattr(egress, "HEAD_TIMEOUT_S", 0.2)
    with proxy(tmp_path, None) as running:
        answer = ask(running, b"CONNECT example.com:4")
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert running.attempts == []


def test_a_listed_server_that_does_not_answer_is_a_bad_gateway(tmp_path):
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    with proxy(tmp_path, (f"127.0.0.1:{port}",)) as running:
        answer = ask(running, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
    assert running.attempts == [("127.0.0.1", port, None)]


def test_leaving_the_proxy_ends_open_tunnels_and_removes_its_socket(tmp_path, web):
    with proxy(tmp_path, (f"127.0.0.1:{web}",)) as running:
        mode = stat.S_IMODE(running.socket_path.stat().st_mode)
        client = dial(running)
        client.sendall(f"CONNECT 127.0.0.1:{web} HTTP/1.1\r\n\r\n".encode())
        read_head(client)
    with client:
        assert client.recv(1) == b""
    assert mode == 0o666
    assert not running.socket_path.exists()
