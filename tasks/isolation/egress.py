"""Let one sandboxed run reach only what its egress policy allows, through a proxy of its own.

The run's only way out is a unix socket; gaffer serves an HTTP proxy on it (CONNECT tunnels
and absolute-form plain HTTP) and decides each destination with `EgressPolicy.refusal`:

  gaffer's own services  (host, port) pairs, compared by name and by every resolved address:
                         never reachable, even when listed
  the egress list        None lets a check reach any host; otherwise entries are
                         "api.example.com" (port 443 only), "*.example.com" (any subdomain,
                         not the apex) or "host:port"; anything else is refused
  never                  link-local (the cloud metadata address among them), other metadata
                         addresses, unspecified, multicast and reserved addresses
  loopback               only through an entry naming this exact host with a port: a local
                         model server the operator configured
  private                likewise; with no list, a check may reach the office network

Names are checked before they are resolved (an unlisted name never reaches DNS, so it cannot
carry data out), and the proxy connects to the very addresses it checked, so a name cannot
resolve to something else between the check and the connection.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

HTTPS_PORT = 443
HTTP_PORT = 80
MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 10.0
JOIN_S = 2.0
CHUNK_BYTES = 65536
HOST_NAME = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$")
METHOD = re.compile(r"^[A-Z]+$")
# Cloud metadata services: link-local on most clouds, elsewhere on Alibaba and AWS over IPv6.
METADATA = frozenset(ip_address(a) for a in ("169.254.169.254", "100.100.100.200", "fd00:ec2::254"))
# Connecting to 0.x.x.x reaches this machine on Linux, so it counts as unspecified.
THIS_NETWORK = ip_network("0.0.0.0/8")
NAT64 = ip_network("64:ff9b::/96")
# Where machines of one's own network live, carrier-grade NAT and tailnets among them. Other
# special ranges count as public: resolvers that hand out made-up addresses use them.
PRIVATE_NETWORKS = tuple(
    ip_network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
)
LOOPBACK = "a loopback address"
PRIVATE = "a private address"
# Headers about the client's hop to the proxy, and Host, which the proxy writes itself.
DROPPED_HEADERS = frozenset(
    {"connection", "proxy-connection", "keep-alive", "proxy-authorization", "te", "upgrade", "host"}
)


@dataclass(frozen=True)
class EgressPolicy:
    """Which destinations one sandboxed run may reach through its proxy."""

    allow: tuple[str, ...] | None
    refused_services: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        # A malformed entry or service fails when the policy is made, not at a request.
        for entry in self.allow or ():
            _Entry.parse(entry)
        for host, _ in self.refused_services:
            _normalise_host(host)

    def refusal(self, host: str, port: int, addresses: Sequence[str]) -> str | None:
        """Return why host:port, resolving to addresses, is refused; None when it may be reached."""
        try:
            host = _normalise_host(host)
        except ValueError:
            return "not a host name"
        ips = {ip for ip in map(_ip, addresses) if ip is not None}
        for service_host, service_port in self.refused_services:
            service = _normalise_host(service_host)
            if port == service_port and (service == host or _ip(service) in ips):
                return "one of gaffer's own services"
        entries = [e for e in map(_Entry.parse, self.allow or ()) if e.matches(host, port)]
        if self.allow is not None and not entries:
            return "not in the agent's egress list"
        local_endpoint = any(e.names_endpoint for e in entries)
        reachable = {LOOPBACK: local_endpoint, PRIVATE: local_endpoint or self.allow is None}
        for address in addresses:
            kind = _address_kind(address)
            if kind is not None and not reachable.get(kind, False):
                return f"resolves to {address}, {kind}"
        return None


@dataclass(frozen=True)
class _Entry:
    """One entry of an egress list."""

    host: str  # without the "*." of a wildcard
    wildcard: bool
    port: int | None  # None: the entry names no port, so it means 443

    @classmethod
    def parse(cls, text: str) -> _Entry:
        host, port = _split_authority(text.removeprefix("*."))
        return cls(host, text.startswith("*."), port)

    def matches(self, host: str, port: int) -> bool:
        if port != (self.port or HTTPS_PORT):
            return False
        return host.endswith(f".{self.host}") if self.wildcard else host == self.host

    @property
    def names_endpoint(self) -> bool:
        """Return True when the entry names one host and port: local addresses may be meant."""
        return not self.wildcard and self.port is not None


def _split_authority(text: str) -> tuple[str, int | None]:
    """Split "host", "host:port" or "[v6]:port" into a normalised host and port (or None)."""
    port_text: str | None = None
    if text.startswith("["):
        host, bracket, tail = text[1:].partition("]")
        if not bracket or tail[:1] not in ("", ":"):
            raise ValueError(f"not a host and port: {text!r}")
        port_text = tail[1:] if tail else None
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host = text  # a name, or an IPv6 address without a port
    if port_text is None:
        return _normalise_host(host), None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"not a port: {port_text!r}")
    return _normalise_host(host), int(port_text)


def _normalise_host(host: str) -> str:
    """Return host lower-cased without a trailing dot, addresses in their canonical form."""
    host = host.lower().removesuffix(".")
    with contextlib.suppress(ValueError):
        return str(ip_address(host))
    if not HOST_NAME.match(host):
        raise ValueError(f"not a host name: {host!r}")
    return host


def _ip(text: str) -> IPv4Address | IPv6Address | None:
    """Return the address text names, an IPv4 address when it is one wrapped in IPv6."""
    try:
        ip = ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if isinstance(ip, IPv6Address) and ip in NAT64:
        return IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def _address_kind(address: str) -> str | None:
    """Return what kind of special address this is, or None for a public one."""
    ip = _ip(address)
    if ip is None:
        return "not an address"
    checks = [
        (ip in METADATA, "a cloud metadata address"),
        (ip.is_link_local, "a link-local address"),
        (ip.is_unspecified or ip in THIS_NETWORK, "an unspecified address"),
        (ip.is_multicast, "a multicast address"),
        (ip.is_loopback, LOOPBACK),  # before reserved: ::1 is both
        (ip.is_reserved, "a reserved address"),
        (any(ip in network for network in PRIVATE_NETWORKS), PRIVATE),
    ]
    return next((kind for matched, kind in checks if matched), None)


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Rejected(Exception):
    """A request the proxy answers itself, with this status and one line of why."""

    def __init__(self, status: str, why: str) -> None:
        super().__init__(why)
        self.status = status
        self.why = why


@dataclass(frozen=True)
class _Request:
    """Where one request goes and, for plain HTTP, the head to send there."""

    host: str
    port: int
    forward: bytes | None  # None: a CONNECT tunnel


class EgressProxy:
    """An HTTP proxy on a unix socket that lets one run reach what its policy allows."""

    _listener: socket.socket

    def __init__(self, socket_path: Path, policy: EgressPolicy, log_path: Path) -> None:
        self.socket_path = socket_path
        self.policy = policy
        self.log_path = log_path
        self.attempts: list[tuple[str, int, str | None]] = []
        self._lock = threading.Lock()
        self._closing = False
        self._sockets: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()

    def __enter__(self) -> EgressProxy:
        self.policy = _with_service_addresses(self.policy)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._listener.bind(str(self.socket_path))
            # The run connects as a uid of its own; the folder holding the socket guards it.
            self.socket_path.chmod(0o666)
            self._listener.listen()
        except OSError:
            self._listener.close()
            raise
        self._spawn(self._accept)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        with self._lock:
            self._closing = True
            for sock in [self._listener, *self._sockets]:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked on it
            threads = list(self._threads)
        for thread in threads:
            thread.join(JOIN_S)
        self._listener.close()
        self.socket_path.unlink(missing_ok=True)

    def _spawn(self, work: Callable[[], None]) -> None:
        def run() -> None:
            try:
                work()
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())

        thread = threading.Thread(target=run, daemon=True)
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # __exit__ shut the listener down
            self._spawn(functools.partial(self._serve, client))

    def _serve(self, client: socket.socket) -> None:
        """Answer one client connection: refuse it, or connect it and relay until done."""
        try:
            with self._watching(client):
                try:
                    self._forward(client)
                except _Rejected as rejected:
                    client.sendall(_answer(rejected.status, rejected.why))
        except OSError:
            pass  # either side went away, or the proxy is closing

    def _forward(self, client: socket.socket) -> None:
        head, early = _read_head(client)
        request = _parse(head)
        addresses = self._check(request.host, request.port)
        with self._watching(_connect(request.host, request.port, addresses)) as upstream:
            if request.forward is None:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                upstream.sendall(request.forward)
            upstream.sendall(early)
            _relay(client, upstream, until_response_ends=request.forward is not None)

    def _check(self, host: str, port: int) -> list[str]:
        """Decide host:port, log the attempt, and return the addresses that were checked."""
        why = self.policy.refusal(host, port, ())
        addresses = _resolve(host, port) if why is None else []
        if why is None:
            why = self.policy.refusal(host, port, addresses)
        self._record(host, port, why)
        if why is not None:
            raise _Rejected("403 Forbidden", f"gaffer refused {_authority(host, port)}: {why}")
        return addresses

    def _record(self, host: str, port: int, why: str | None) -> None:
        where = _authority(host, port)
        line = f"allowed {where}\n" if why is None else f"refused {where}: {why}\n"
        with self._lock:
            self.attempts.append((host, port, why))
            with self.log_path.open("a") as log:
                log.write(line)

    @contextlib.contextmanager
    def _watching(self, sock: socket.socket) -> Iterator[socket.socket]:
        """Let __exit__ cut sock off while the block runs; close it afterwards."""
        with sock:
            with self._lock:
                if self._closing:
                    raise ConnectionAbortedError("the proxy is closing")
                self._sockets.add(sock)
            try:
                yield sock
            finally:
                with self._lock:
                    self._sockets.discard(sock)


def _with_service_addresses(policy: EgressPolicy) -> EgressPolicy:
    """Return policy with gaffer's services also listed under every address they resolve to."""
    resolved = tuple(
        (address, port)
        for host, port in policy.refused_services
        for address in _resolve(host, port)
    )
    return dataclasses.replace(policy, refused_services=policy.refused_services + resolved)


def _resolve(host: str, port: int) -> list[str]:
    """Return the addresses host resolves to, in the resolver's order; none when it fails."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return list(dict.fromkeys(str(sockaddr[0]) for *_, sockaddr in found))


def _connect(host: str, port: int, addresses: list[str]) -> socket.socket:
    """Connect to the first checked address that answers, never resolving host again."""
    for address in addresses:
        with contextlib.suppress(OSError):
            upstream = socket.create_connection((address, port), timeout=CONNECT_TIMEOUT_S)
            upstream.settimeout(None)
            return upstream
    raise _Rejected("502 Bad Gateway", f"gaffer could not reach {_authority(host, port)}")


def _read_head(client: socket.socket) -> tuple[bytes, bytes]:
    """Return the request head and whatever the client sent after it, within time and size."""
    deadline = time.monotonic() + HEAD_TIMEOUT_S
    received = b""
    while b"\r\n\r\n" not in received:
        if len(received) > MAX_HEAD_BYTES:
            raise _Rejected("431 Request Header Fields Too Large", "the request head is too large")
        # A deadline for the whole head, not each read: a trickling client cannot hold on.
        client.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            chunk = client.recv(CHUNK_BYTES)
        except TimeoutError:
            raise _Rejected("408 Request Timeout", "the request head came too slowly") from None
        if not chunk:
            raise ConnectionResetError("the client left before finishing its request")
        received += chunk
    client.settimeout(None)
    head, _, early = received.partition(b"\r\n\r\n")
    if len(head) > MAX_HEAD_BYTES:
        raise _Rejected("431 Request Header Fields Too Large", "the request head is too large")
    return head, early


def _parse(head: bytes) -> _Request:
    """Read a CONNECT or an absolute-form plain HTTP request; reject anything else with 400."""
    request_line, *headers = head.decode("latin-1").split("\r\n")
    parts = request_line.split(" ")
    try:
        method, target, version = parts
        if not METHOD.match(method) or not version.startswith("HTTP/1."):
            raise ValueError(request_line)
        if any(":" not in header for header in headers):
            raise ValueError("a header without a colon")
        if method != "CONNECT":
            return _plain(method, target, version, headers)
        host, port = _split_authority(target)
        if port is None:
            raise ValueError(target)
        return _Request(host, port, None)
    except ValueError:
        why = "gaffer's proxy takes CONNECT host:port or an absolute http:// request"
        raise _Rejected("400 Bad Request", why) from None


def _plain(method: str, target: str, version: str, headers: list[str]) -> _Request:
    """Return the request to send on: origin-form, to the URL's host, on a closing connection."""
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise ValueError(target)
    host = _normalise_host(url.hostname)
    port = url.port if url.port is not None else HTTP_PORT
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    # The URL says where the request goes; a Host header saying otherwise is replaced.
    kept = [h for h in headers if h.split(":", 1)[0].strip().lower() not in DROPPED_HEADERS]
    authority = _authority(host, port)
    if port == HTTP_PORT:
        authority = authority.removesuffix(f":{HTTP_PORT}")
    lines = [f"{method} {path} {version}", f"Host: {authority}", *kept, "Connection: close"]
    return _Request(host, port, "\r\n".join([*lines, "", ""]).encode("latin-1"))


def _relay(client: socket.socket, upstream: socket.socket, *, until_response_ends: bool) -> None:
    """Copy bytes both ways until both sides are done (plain HTTP: until the response ends)."""
    with selectors.DefaultSelector() as selector:
        selector.register(client, selectors.EVENT_READ, (client, upstream))
        selector.register(upstream, selectors.EVENT_READ, (upstream, client))
        while selector.get_map():
            for key, _ in selector.select():
                source, destination = key.data
                data = source.recv(CHUNK_BYTES)
                if data:
                    destination.sendall(data)
                elif until_response_ends and source is upstream:
                    return
                else:
                    # One side finished sending; the other may still answer.
                    selector.unregister(source)
                    destination.shutdown(socket.SHUT_WR)


def _answer(status: str, why: str) -> bytes:
    body = f"{why}\n".encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body
