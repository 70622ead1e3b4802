"""gaffer's web front against the thread-per-request shape it replaced, with slow clients.

    .venv/bin/python bench/slow_clients.py [--slow 100] [--deliveries 10] [--requests 1000]

Both fronts serve the same app on PostgreSQL and Redis with two gunicorn workers:
- threads: gunicorn's threaded worker, 4 threads each (gaffer's shape until now);
- whole requests: the event-loop worker with bot/asgi.py (what `gaffer web` runs now).

For each, one run measures signed deliveries per second with 16 clients, then opens
`--slow` connections that send their body one byte every half second, and sends
`--deliveries` signed deliveries beside them. GitHub waits 10 s for an answer, so a
delivery not answered within 10 s counts as lost.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.intake import PORT, fresh_database, load, post, serve, signed_headers  # noqa: E402
from bot.cli import gunicorn_argv  # noqa: E402
from double.webhooks import issue, labeled, repository  # noqa: E402

WORKERS = 2
FRONTS = {
    "threads": [
        sys.executable,
        "-m",
        "gunicorn",
        "--bind",
        f"127.0.0.1:{PORT}",
        "--workers",
        str(WORKERS),
        "--threads",
        "4",
        "bench.intake_app:create_bench_app()",
    ],
    "whole requests": gunicorn_argv(
        f"127.0.0.1:{PORT}", WORKERS, "bench.intake_app:create_bench_asgi_app()"
    ),
}
GITHUB_WAITS_S = 10.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--slow", type=int, default=100)
    parser.add_argument("--deliveries", type=int, default=10)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    body = json.dumps(labeled(repository("acme/widgets", "/dev/null"), issue(1))).encode()
    results = {name: _measure(argv, body, args) for name, argv in FRONTS.items()}
    for name, (rate, answered, latencies) in results.items():
        p50 = f"{statistics.median(latencies) * 1000:7.1f} ms" if latencies else "      —"
        print(
            f"{name:<15} {rate:6.0f} deliveries/s   with {args.slow} slow clients: "
            f"{answered}/{args.deliveries} answered within {GITHUB_WAITS_S:g} s, p50 {p50}"
        )
    threads, whole = results["threads"], results["whole requests"]
    print(f"throughput, whole requests / threads: {whole[0] / threads[0]:.2f}")
    print(
        f"answered beside slow clients: {whole[1]}/{args.deliveries} "
        f"against {threads[1]}/{args.deliveries}"
    )


def _measure(
    argv: list[str], body: bytes, args: argparse.Namespace
) -> tuple[float, int, list[float]]:
    server = serve(fresh_database(), WORKERS, argv)
    try:
        seconds, _ = load("/webhooks/github", body, args)
        slow = _Trickle(args.slow)
        try:
            latencies = [_deliver(body) for _ in range(args.deliveries)]
        finally:
            slow.close()
    finally:
        server.terminate()
        server.wait()
    answered = [each for each in latencies if each is not None]
    return args.requests / seconds, len(answered), answered


def _deliver(body: bytes) -> float | None:
    try:
        return post("/webhooks/github", body, signed_headers(body), timeout=GITHUB_WAITS_S)
    except TimeoutError:
        return None


class _Trickle:
    def __init__(self, count: int) -> None:
        head = (
            b"POST /webhooks/github HTTP/1.1\r\nHost: gaffer\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        )
        self.sockets = [socket.create_connection(("127.0.0.1", PORT)) for _ in range(count)]
        for each in self.sockets:
            each.sendall(head)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            for each in self.sockets:
                try:
                    each.sendall(b" ")
                except OSError:
                    continue

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for each in self.sockets:
            each.close()


if __name__ == "__main__":
    main()
