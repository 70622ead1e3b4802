"""Attacks from inside an agent or check run: each fails in the sandbox and works without it.

Every test runs the same hostile script twice through gaffer's runner, from a process that
holds a worker's secrets: with `sandbox: none` the attack must succeed (so the test can
fail), in the sandbox it must not.
"""

from __future__ import annotations

import http.server
import os
import signal
import sys
import threading
import uuid
from collections.abc import Iterator

import pytest

from tests.security.conftest import OFF, ON, PG_SOCKET, processes_marked
from tests.support import WEBHOOK_SECRET

pytestmark = pytest.mark.usefixtures("machine")


def test_the_workers_secrets_cannot_be_read_from_its_environment(attack) -> None:
    unboxed = attack({"environ": True}, sandbox=OFF).report["environ"]
    assert f"WEBHOOK_SECRET={WEBHOOK_SECRET}" in unboxed
    assert attack({"environ": True}).report["environ"] == []


def test_the_key_the_database_and_other_jobs_cannot_be_read(attack, machine) -> None:
    targets = [*machine.secrets_paths(), str(machine.other_worktree)]
    unboxed = attack({"files": targets}, sandbox=OFF).report["files"]
    assert str(machine.key_file) in unboxed
    assert str(machine.database) in unboxed
    assert str(machine.other_worktree / "unreleased.py") in unboxed
    assert attack({"files": targets}).report["files"] == []


def test_the_run_reads_and_writes_its_own_worktree(attack, machine) -> None:
    (machine.worktree / "README.md").write_text("# widgets\n")
    done = attack({"files": [str(machine.worktree)], "edit": "notes.txt"})
    assert done.result["returncode"] == 0, done.result["output"]
    assert str(machine.worktree / "README.md") in done.report["files"]
    assert (machine.worktree / "notes.txt").read_text() == "attacked\n"


def test_gaffers_services_cannot_be_reached(attack, machine) -> None:
    targets = [
        f"127.0.0.1:{machine.web_port}",
        "127.0.0.1:5432",
        "127.0.0.1:6379",
        PG_SOCKET,
        str(machine.unix_socket),
    ]
    unboxed = attack({"connect": targets}, sandbox=OFF).report["connect"]
    assert f"127.0.0.1:{machine.web_port}" in unboxed
    assert str(machine.unix_socket) in unboxed
    assert attack({"connect": targets}).report["connect"] == []


@pytest.fixture
def model_server() -> Iterator[int]:
    """A local model endpoint on the worker's loopback; return its port."""

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"model says hi")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_an_agent_reaches_its_model_endpoint_and_nothing_else(
    attack, machine, model_server: int
) -> None:
    endpoint = f"127.0.0.1:{model_server}"
    plan = {
        "fetch": [f"http://{endpoint}/v1/messages"],
        "tunnel": ["example.org:443", f"127.0.0.1:{machine.web_port}", "169.254.169.254:80"],
    }
    done = attack(plan, egress=[endpoint, f"127.0.0.1:{machine.web_port}"])
    assert done.report["fetch"] == {f"http://{endpoint}/v1/messages": "200 model says hi"}
    for target, answer in done.report["tunnel"].items():
        assert " 403 " in answer, target
    # The operator sees every attempt in the run's egress log.
    logged = done.log.with_suffix(".egress").read_text()
    assert f"allowed {endpoint}" in logged
    assert "refused example.org:443: not in the agent's egress list" in logged
    assert f"refused 127.0.0.1:{machine.web_port}: one of gaffer's own services" in logged


def test_a_detached_process_dies_with_the_run(attack) -> None:
    marker = f"linger-{uuid.uuid4().hex}"
    try:
        attack({"linger": marker}, sandbox=OFF)
        assert processes_marked(marker), "without the sandbox the detached process lives on"
        for pid in processes_marked(marker):
            os.kill(pid, signal.SIGKILL)
        attack({"linger": marker})
        assert processes_marked(marker) == []
    finally:
        for pid in processes_marked(marker):
            os.kill(pid, signal.SIGKILL)


def test_a_process_that_ignores_sigterm_is_killed_at_the_time_limit(attack) -> None:
    done = attack({"ignore_term": True}, timeout_s=2)
    assert done.result["timed_out"]
    assert done.result["returncode"] is not None


def test_the_process_count_is_limited_per_run(attack) -> None:
    assert attack({"spawn": 100}, sandbox=OFF).report["spawned"] == 100
    assert attack({"spawn": 100}).report["spawned"] < 64


def test_a_fork_bomb_ends_with_its_run(attack) -> None:
    done = attack({"fork_bomb": True}, timeout_s=3)
    assert done.result["timed_out"]
    assert done.result["returncode"] is not None


def test_cpu_time_is_limited_per_run(attack) -> None:
    spin = {"spin": 6}
    assert not attack(spin, sandbox=OFF, timeout_s=20).result["cpu_limited"]
    boxed = attack(spin, sandbox={**ON, "cpu_s": 1}, timeout_s=20).result
    assert boxed["cpu_limited"] and not boxed["timed_out"]


def test_a_huge_write_stops_at_the_file_size_limit(attack) -> None:
    # Without the sandbox a 100 MB file is written whole; inside, it stops at 50 MB (the
    # setting the tests use), which is what stops a 10 GB write.
    assert attack({"write_mb": 100}, sandbox=OFF).report["written_mb"] == 100
    boxed = attack({"write_mb": 10 * 1024})
    assert boxed.report["written_mb"] <= 50


HOG = (
    "import time; x = bytearray(60 * 1024 * 1024); x[::4096] = b'1' * len(x[::4096]); "
    "print('held', flush=True); time.sleep(3)"
)


def test_memory_is_limited_for_the_whole_tree(attack) -> None:
    # Four processes of 60 MB each stay under the 100 MB each may use, together over it.
    command = f'for i in 1 2 3 4; do "{sys.executable}" -c "{HOG}" & done; wait'
    unboxed = attack({}, sandbox=OFF, argv=["bash", "-c", command], memory_mb=100)
    assert unboxed.result["output"].count("held") == 4
    boxed = attack({}, argv=["bash", "-c", command], memory_mb=100)
    assert boxed.result["oom_killed"]
