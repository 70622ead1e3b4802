"""Signed deliveries per second through `gaffer web` on PostgreSQL and Redis, beside a bare
Flask endpoint served the same way.

    .venv/bin/python bench/intake.py [--requests 6000] [--connections 16] [--rounds 5]

Two servers run side by side, each the gunicorn command `gaffer web` runs (bot.cli's
gunicorn_argv: the event-loop worker, whole requests read before Flask answers, the same
number of workers): gaffer itself, and a Flask app of its own whose one endpoint reads the
body and answers 202 (bench/intake_app.py). Load comes from other processes (--generators),
each holding its share of --connections keep-alive connections and sending the next request
as soon as the last is answered. The body is GitHub's own `issue_comment` example (from
@octokit/webhooks-examples, which `make test` installs), signed, each with a delivery id
of its own. Rounds alternate between the two servers, so load from elsewhere on the machine
falls on both; the median round of each is reported, then the ratio, then the proof that
nothing was lost: every delivery gaffer answered is in its database exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.cli import gunicorn_argv  # noqa: E402
from bot.migrate import upgrade  # noqa: E402
from double.webhooks import sign  # noqa: E402

SECRET = "bench-secret"
PORT = 8765
BARE_PORT = 8766
PG = os.environ.get("GAFFER_BENCH_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432")
REDIS = os.environ.get("GAFFER_BENCH_REDIS", "redis://127.0.0.1:6379/9")
EXAMPLES = ROOT / "tests/contract/node_modules/@octokit/webhooks-examples/api.github.com/index.json"
WARM_UP = 200


@dataclass
class Run:
    """One load against one server: how long it took, each answer's time, what the server spent."""

    seconds: float
    latencies: list[float]
    server_cpu_s: float
    generator_cpu_s: float
    database_cpu_s: float

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds


def main() -> None:
    args = _arguments()
    body = github_example("issue_comment", "created")
    database = fresh_database()
    gaffer = serve(database, args.workers)
    bare = serve(database, args.workers, bare_argv(args.workers), port=BARE_PORT)
    try:
        load("/bare", body, args, port=BARE_PORT, requests=WARM_UP)
        load("/webhooks/github", body, args, requests=WARM_UP)
        runs: dict[str, list[Run]] = {"bare": [], "gaffer": []}
        for _ in range(args.rounds):
            runs["bare"].append(measure(bare, "/bare", body, args, BARE_PORT, database))
            runs["gaffer"].append(measure(gaffer, "/webhooks/github", body, args, PORT, database))
    finally:
        for server in (gaffer, bare):
            server.terminate()
            server.wait()
    sent = WARM_UP + args.rounds * args.requests
    stored = _stored(database)
    drop_database(database)
    _report(runs, body, args, stored=stored, sent=sent)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=6000, help="per round and server")
    parser.add_argument("--connections", "--clients", dest="clients", type=int, default=16)
    parser.add_argument("--generators", type=int, default=2, help="load processes")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (gaffer web's)")
    parser.add_argument("--rounds", type=int, default=5)
    return parser.parse_args()


def github_example(event: str, action: str) -> bytes:
    """Return the largest of GitHub's example payloads for event and action, as a body."""
    if not EXAMPLES.exists():
        raise SystemExit("run `npm ci --prefix tests/contract` to install GitHub's examples")
    examples = [
        example
        for group in json.loads(EXAMPLES.read_text())
        if group["name"] == event
        for example in group["examples"]
        if example.get("action") == action
    ]
    # Indented as GitHub's documentation shows it; the receiver stores the body as sent.
    return json.dumps(max(examples, key=lambda each: len(json.dumps(each))), indent=2).encode()


def fresh_database() -> str:
    name = f"gaffer_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(f"{PG}/test", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = f"{PG}/{name}"
    upgrade(url)
    return url


def drop_database(url: str) -> None:
    """Drop a database fresh_database made, once nothing uses it."""
    admin = create_engine(f"{PG}/test", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)'))
    admin.dispose()


def bare_argv(workers: int) -> list[str]:
    return gunicorn_argv(
        f"127.0.0.1:{BARE_PORT}", workers, "bench.intake_app:create_bare_asgi_app()"
    )


def serve(
    database: str, workers: int, argv: list[str] | None = None, port: int = PORT
) -> subprocess.Popen[bytes]:
    """Start gunicorn as `gaffer web` does (or with argv) and wait until it answers."""
    env = {
        **os.environ,
        "WEBHOOK_SECRET": SECRET,
        "DATABASE_URL": database,
        "BROKER_URL": REDIS,
        "GAFFER_HOME": "/tmp/gaffer-bench",
    }
    argv = argv or gunicorn_argv(f"127.0.0.1:{port}", workers)
    argv = [*argv, "--log-level", "warning"]
    server = subprocess.Popen(argv, env=env, cwd=ROOT)
    for _ in range(100):
        try:
            asyncio.run(_get_health(port))
            return server
        except OSError:
            time.sleep(0.1)
    server.terminate()
    server.wait(timeout=10)
    raise SystemExit("gunicorn did not start")


async def _get_health(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
    await reader.read()
    writer.close()


def signed_headers(body: bytes, event: str = "issues") -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(body, SECRET),
        "X-GitHub-Hook-Installation-Target-ID": "1",
    }


def post(
    path: str, body: bytes, headers: dict[str, str], method: str = "POST", timeout: float = 30
) -> float:
    """Send one request on a connection of its own; return how long the answer took."""
    import http.client

    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    response.read()
    conn.close()
    if response.status >= 300 and method == "POST":
        raise RuntimeError(f"{path} answered {response.status}")
    return time.perf_counter() - started


def measure(
    server: subprocess.Popen[bytes],
    path: str,
    body: bytes,
    args: argparse.Namespace,
    port: int,
    database: str,
) -> Run:
    """Load one server with --requests deliveries; note the CPU its workers and the
    database's server processes for its connections spent on them."""
    before = _cpu_seconds(_children(server.pid))
    backends = _backends(database)
    database_before = _cpu_seconds(backends)
    seconds, latencies, generator_cpu = _load(path, body, args, port, args.requests)
    spent = _cpu_seconds(_children(server.pid)) - before
    database_spent = _cpu_seconds(backends) - database_before
    return Run(seconds, latencies, spent, generator_cpu, database_spent)


def load(
    path: str,
    body: bytes,
    args: argparse.Namespace,
    port: int = PORT,
    requests: int | None = None,
) -> tuple[float, list[float]]:
    """Send requests (--requests by default) from load processes; return the seconds taken
    and each answer's latency."""
    seconds, latencies, _ = _load(path, body, args, port, requests or args.requests)
    return seconds, latencies


def _load(
    path: str, body: bytes, args: argparse.Namespace, port: int, requests: int
) -> tuple[float, list[float], float]:
    generators = max(1, min(getattr(args, "generators", 2), args.clients))
    context = multiprocessing.get_context("spawn")
    ready, results, go = context.Queue(), context.Queue(), context.Event()
    processes = [
        context.Process(
            target=_generate,
            args=(
                port,
                path,
                body,
                _share(requests, generators, i),
                _share(args.clients, generators, i),
            ),
            kwargs={"ready": ready, "go": go, "results": results},
        )
        for i in range(generators)
    ]
    for process in processes:
        process.start()
    for _ in processes:  # every load process has its connections open
        ready.get(timeout=60)
    started = time.monotonic()
    go.set()
    answers = [results.get(timeout=600) for _ in processes]
    for process in processes:
        process.join()
    if any(process.exitcode for process in processes):
        raise SystemExit("a load process failed")
    finished = max(answer[0] for answer in answers)
    latencies = [latency for answer in answers for latency in answer[1]]
    return finished - started, latencies, sum(answer[2] for answer in answers)


def _share(total: int, parts: int, index: int) -> int:
    return total // parts + (1 if index < total % parts else 0)


def _generate(
    port: int, path: str, body: bytes, requests: int, connections: int, *, ready, go, results
) -> None:
    """In a load process: open connections, say so, wait for the go, send requests over them
    each as soon as the last was answered; put when the last was answered, each latency
    and the CPU seconds this process spent."""
    event = "issue_comment" if path == "/webhooks/github" else "bare"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nX-GitHub-Event: {event}\r\n"
        f"X-Hub-Signature-256: {sign(body, SECRET)}\r\n"
        "X-GitHub-Hook-Installation-Target-ID: 1\r\n"
    ).encode()
    prefix = uuid.uuid4().hex
    heads = iter(
        [head + f"X-GitHub-Delivery: {prefix}-{n}\r\n\r\n".encode() for n in range(requests)]
    )
    latencies: list[float] = []

    async def send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for request in heads:
            sent = time.monotonic()
            writer.writelines((request, body))
            answer = await reader.readuntil(b"\r\n\r\n")
            if not answer.startswith((b"HTTP/1.1 200", b"HTTP/1.1 202")):
                raise RuntimeError(f"{path} answered {answer[:12].decode()}")
            await reader.readexactly(_content_length(answer))
            latencies.append(time.monotonic() - sent)
        writer.close()

    async def run() -> None:
        opened = [await asyncio.open_connection("127.0.0.1", port) for _ in range(connections)]
        ready.put(True)
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        await asyncio.gather(*(send(reader, writer) for reader, writer in opened))

    cpu = time.process_time()
    asyncio.run(run())
    results.put((time.monotonic(), latencies, time.process_time() - cpu))


def _content_length(head: bytes) -> int:
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    raise RuntimeError("an answer without Content-Length")


def _children(pid: int) -> list[int]:
    found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(each) for each in found]


def _cpu_seconds(pids: list[int]) -> float:
    """User and system CPU seconds the processes have spent so far (0 for one gone)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def _backends(database: str) -> list[int]:
    """The PostgreSQL server processes serving connections to database (on this machine;
    the warm-up has opened them)."""
    engine = create_engine(database)
    with engine.connect() as conn:
        pids = conn.execute(
            text(
                "SELECT pid FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ).scalars()
        found = [int(pid) for pid in pids]
    engine.dispose()
    return found


def _stored(database: str) -> tuple[int, int]:
    """How many delivery rows there are, and how many distinct delivery ids among them."""
    engine = create_engine(database)
    with engine.connect() as conn:
        rows, distinct = conn.execute(
            text("SELECT count(*), count(DISTINCT delivery_id) FROM deliveries")
        ).one()
    engine.dispose()
    return int(rows), int(distinct)


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    models = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return models[0] if models else platform.machine()


def _report(
    runs: dict[str, list[Run]],
    body: bytes,
    args: argparse.Namespace,
    *,
    stored: tuple[int, int],
    sent: int,
) -> None:
    print(
        f"{os.cpu_count()} cores ({_cpu_model()}), "
        f"load average {os.getloadavg()[0]:.1f} at the end; {args.workers} gunicorn workers "
        f"each; {args.clients} connections from {args.generators} load processes; "
        f"GitHub's issue_comment example, {len(body):,} bytes"
    )
    medians = {}
    for name, label in (("bare", "bare Flask endpoint"), ("gaffer", "gaffer intake")):
        rounds = runs[name]
        middle = sorted(rounds, key=lambda run: run.rate)[len(rounds) // 2]
        medians[name] = middle.rate
        cuts = statistics.quantiles(middle.latencies, n=100)
        each = ", ".join(f"{run.rate:.0f}" for run in rounds)
        n = len(middle.latencies)
        print(
            f"{label:<20} {middle.rate:6.0f} /s  (rounds: {each})  p50 {cuts[49] * 1000:5.1f} ms"
            f"  p99 {cuts[98] * 1000:5.1f} ms"
        )
        print(
            f"{'':<20} CPU per request: web {middle.server_cpu_s / n * 1000:.2f} ms, "
            f"database {middle.database_cpu_s / n * 1000:.2f} ms, "
            f"load {middle.generator_cpu_s / n * 1000:.2f} ms"
        )
    print(f"gaffer / bare: {medians['gaffer'] / medians['bare']:.2f}")
    rows, distinct = stored
    verdict = "none lost, none twice" if rows == distinct == sent else "LOST OR DOUBLED"
    print(f"deliveries answered {sent}, stored {rows}, distinct {distinct}: {verdict}")


if __name__ == "__main__":
    main()
