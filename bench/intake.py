"""Signed deliveries per second through gaffer's web front on PostgreSQL and Redis.

    .venv/bin/python bench/intake.py [--requests 4000] [--clients 16]

gaffer's receiver and a bare endpoint are served by the same front (the gunicorn shape
`gaffer web` uses) and hit by the same client, one after the other, so the ratio says
what gaffer's intake costs over an endpoint that does nothing. Afterwards every delivery
must be in the database exactly once."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.cli import gunicorn_argv  # noqa: E402
from bot.migrate import upgrade  # noqa: E402
from double.webhooks import issue, labeled, repository, sign  # noqa: E402

SECRET = "bench-secret"
PORT = 8765
PG = os.environ.get("GAFFER_BENCH_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432")
REDIS = os.environ.get("GAFFER_BENCH_REDIS", "redis://127.0.0.1:6379/9")


def main() -> None:
    args = _arguments()
    database = fresh_database()
    server = serve(database, args.workers)
    try:
        body = json.dumps(labeled(repository("acme/widgets", "/dev/null"), issue(1))).encode()
        bare = load("/bare", body, args)
        gaffer = load("/webhooks/github", body, args)
    finally:
        server.terminate()
        server.wait()
    stored = _stored(database)
    _report(bare, gaffer, args.requests, stored)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--workers", type=int, default=4)
    return parser.parse_args()


def fresh_database() -> str:
    name = f"gaffer_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(f"{PG}/test", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = f"{PG}/{name}"
    upgrade(url)
    return url


def serve(database: str, workers: int, argv: list[str] | None = None) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "WEBHOOK_SECRET": SECRET,
        "DATABASE_URL": database,
        "BROKER_URL": REDIS,
        "GAFFER_HOME": "/tmp/gaffer-bench",
    }
    argv = argv or gunicorn_argv(
        f"127.0.0.1:{PORT}", workers, "bench.intake_app:create_bench_asgi_app()"
    )
    argv = [*argv, "--log-level", "warning"]
    server = subprocess.Popen(argv, env=env, cwd=Path(__file__).resolve().parent.parent)
    for _ in range(100):
        try:
            post("/healthz", b"", {}, method="GET")
            return server
        except OSError:
            time.sleep(0.1)
    server.terminate()
    server.wait(timeout=10)
    raise SystemExit("gunicorn did not start")


def post(
    path: str, body: bytes, headers: dict[str, str], method: str = "POST", timeout: float = 30
) -> float:
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    response.read()
    conn.close()
    if response.status >= 300 and method == "POST":
        raise RuntimeError(f"{path} answered {response.status}")
    return time.perf_counter() - started


def signed_headers(body: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(body, SECRET),
        "X-GitHub-Hook-Installation-Target-ID": "1",
    }


def load(path: str, body: bytes, args: argparse.Namespace) -> tuple[float, list[float]]:
    headers = [signed_headers(body) for _ in range(args.requests)]
    started = time.perf_counter()
    with ThreadPoolExecutor(args.clients) as pool:
        latencies = list(pool.map(lambda h: post(path, body, h), headers))
    return time.perf_counter() - started, latencies


def _stored(database: str) -> int:
    engine = create_engine(database)
    with engine.connect() as conn:
        count = conn.execute(
            text("SELECT count(DISTINCT delivery_id) FROM deliveries")
        ).scalar_one()
    engine.dispose()
    return int(count)


def _report(
    bare: tuple[float, list[float]], gaffer: tuple[float, list[float]], n: int, stored: int
) -> None:
    def line(name: str, run: tuple[float, list[float]]) -> float:
        seconds, latencies = run
        cuts = statistics.quantiles(latencies, n=100)
        rate = n / seconds
        print(
            f"{name:<22} {rate:8.0f} req/s   p50 {cuts[49] * 1000:6.1f} ms   "
            f"p99 {cuts[98] * 1000:6.1f} ms"
        )
        return rate

    bare_rate = line("bare endpoint", bare)
    gaffer_rate = line("gaffer intake", gaffer)
    print(f"gaffer / bare throughput: {gaffer_rate / bare_rate:.2f}")
    print(f"deliveries stored: {stored} of {n} ({'none lost' if stored == n else 'LOST SOME'})")


if __name__ == "__main__":
    main()
