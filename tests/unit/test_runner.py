"""The one subprocess runner: limits kill the whole process group, output is captured safely."""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tasks.isolation.runner import RunResult, run_process, sandbox_env
from tasks.isolation.sandbox import Sandbox, SandboxConfig
from tests.support import running_with

PY = sys.executable


def run(tmp_path: Path, code: str, **limits) -> object:
    limits.setdefault("timeout_s", 30)
    return run_process(
        [PY, "-c", code],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        log_path=tmp_path / "logs" / "run.log",
        **limits,
    )


def _gone(pid: int, within_s: float = 2.0) -> bool:
    """Return True once pid has died (a zombie awaiting its reaper counts as dead)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return True
        time.sleep(0.05)
    return False


SPAWN_GRANDCHILD = f"""
import subprocess, sys, time
child = subprocess.Popen([{PY!r}, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_exit_code_and_output_are_reported(tmp_path):
    result = run(tmp_path, "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)")
    assert result.returncode == 3
    assert not result.killed
    assert "out" in result.output and "err" in result.output
    log = (tmp_path / "logs" / "run.log").read_text()
    assert "out\n" in log and log.rstrip().endswith(" s")
    assert "[gaffer] exit code 3, after" in log  # the log says how the run ended
    assert "[gaffer]" not in result.output  # what the agent or check printed, alone


def test_timeout_kills_child_and_grandchild(tmp_path):
    result = run(tmp_path, SPAWN_GRANDCHILD, timeout_s=1)
    grandchild = int(result.output.split()[0])
    assert result.timed_out and not result.ok
    assert _gone(grandchild)
    assert "[gaffer] stopped by gaffer (timed out)" in (tmp_path / "logs" / "run.log").read_text()


def test_background_process_is_killed_when_leader_exits(tmp_path):
    code = (
        f"import subprocess; p = subprocess.Popen([{PY!r}, '-c', 'import time; time.sleep(60)']);"
        " print(p.pid, flush=True)"
    )
    result = run(tmp_path, code)
    assert result.returncode == 0
    assert _gone(int(result.output.split()[0]))


def test_idle_timeout_stops_a_silent_process(tmp_path):
    result = run(
        tmp_path, "print('start', flush=True); import time; time.sleep(60)", idle_timeout_s=1
    )
    assert result.idle_timed_out and not result.timed_out
    assert "start" in result.output


def test_steady_output_is_not_idle(tmp_path):
    code = "import time\nfor i in range(6):\n    print(i, flush=True); time.sleep(0.3)"
    result = run(tmp_path, code, idle_timeout_s=1)
    assert result.ok


def test_flood_is_capped(tmp_path):
    result = run(
        tmp_path,
        "import sys\nwhile True: sys.stdout.write('x' * 10000 + '\\n')",
        max_output_bytes=200_000,
    )
    assert result.output_limited
    assert len(result.output.encode()) <= 200_000
    assert (tmp_path / "logs" / "run.log").stat().st_size < 400_000


def test_flood_without_newlines_is_capped(tmp_path):
    result = run(
        tmp_path, "import sys\nwhile True: sys.stdout.write('y' * 10000)", max_output_bytes=100_000
    )
    assert result.output_limited


def test_should_stop_ends_the_run(tmp_path):
    deadline = time.monotonic() + 0.5
    result = run(
        tmp_path, "import time; time.sleep(60)", should_stop=lambda: time.monotonic() > deadline
    )
    assert result.stopped


def test_process_ignoring_sigterm_is_killed(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    result = run(tmp_path, code, timeout_s=0.5)
    assert result.timed_out and result.returncode == -9


def test_non_utf8_output_is_replaced_not_fatal(tmp_path):
    lines: list[str] = []
    result = run(
        tmp_path,
        "import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe end\\n')",
        on_output=lines.append,
    )
    assert result.ok
    assert lines == ["ok \ufffd\ufffd end"]
    assert "\ufffd" in (tmp_path / "logs" / "run.log").read_text()


def test_stdin_text_is_given_to_the_process(tmp_path):
    result = run(tmp_path, "import sys; print(sys.stdin.read().upper())", stdin_text="hello")
    assert result.output.strip() == "HELLO"


def test_on_output_gets_lines_as_they_come(tmp_path):
    lines: list[str] = []
    run(tmp_path, "print('a'); print('b')", on_output=lines.append)
    assert lines == ["a", "b"]


SOURCE = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "ANTHROPIC_API_KEY": "sk-ant",
    "GITHUB_TOKEN": "ghs_secret",
    "GH_TOKEN": "ghs_secret",
    "WEBHOOK_SECRET": "hook",
    "DATABASE_URL": "postgresql://u:p@db/gaffer",
    "PRIVATE_KEY": "-----BEGIN",
    "GAFFER_HOME": "/srv/gaffer",
    "AWS_SECRET_ACCESS_KEY": "aws",
}


def test_sandbox_env_keeps_only_allowed_names(tmp_path):
    env = sandbox_env(
        allow=["ANTHROPIC_API_KEY"],
        source=SOURCE,
        home=tmp_path / "h",
        extra={"GAFFER_STAGE": "plan"},
    )
    assert env == {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "ANTHROPIC_API_KEY": "sk-ant",
        "HOME": str(tmp_path / "h"),
        "TMPDIR": str(tmp_path / "h" / "tmp"),
        "GAFFER_STAGE": "plan",
    }
    assert (tmp_path / "h" / "tmp").is_dir()


@pytest.mark.parametrize(
    "secret",
    ["GITHUB_TOKEN", "GH_TOKEN", "WEBHOOK_SECRET", "DATABASE_URL", "PRIVATE_KEY", "GAFFER_HOME"],
)
def test_sandbox_env_never_passes_gaffer_secrets_even_when_allowed(tmp_path, secret):
    env = sandbox_env(allow=[secret], source=SOURCE, home=tmp_path)
    assert secret not in env


def test_process_sees_only_the_sandbox_env(tmp_path):
    env = sandbox_env(
        allow=[], source={**os.environ, **SOURCE, "PATH": os.environ["PATH"]}, home=tmp_path / "h"
    )
    result = run_process(
        [PY, "-c", "import os; print(sorted(os.environ))"],
        cwd=tmp_path,
        env=env,
        log_path=tmp_path / "log",
        timeout_s=30,
    )
    assert "GITHUB_TOKEN" not in result.output and "DATABASE_URL" not in result.output


# --------------------------------------------------------------------------- memory limit

ALLOCATE_400_MB = "x = bytearray(400 * 1024 * 1024); print('allocated', flush=True)"


@pytest.mark.parametrize(
    ("memory_mb", "succeeds"),
    [
        pytest.param(None, True, id="without a limit 400 MB is allocated"),
        pytest.param(2000, True, id="under a 2000 MB limit 400 MB is allocated"),
        pytest.param(100, False, id="under a 100 MB limit 400 MB is refused"),
    ],
)
def test_a_process_stays_within_its_memory_limit(tmp_path, memory_mb, succeeds):
    result = run(tmp_path, ALLOCATE_400_MB, memory_mb=memory_mb)
    assert result.ok == succeeds
    assert result.out_of_memory != succeeds
    assert ("allocated" in result.output) == succeeds
    if not succeeds:
        assert result.returncode == 1 and "MemoryError" in result.output


def test_processes_the_child_starts_inherit_its_memory_limit(tmp_path):
    code = f"import subprocess, sys; sys.exit(subprocess.call([{PY!r}, '-c', {ALLOCATE_400_MB!r}]))"
    result = run(tmp_path, code, memory_mb=100)
    assert result.out_of_memory
    assert "allocated" not in result.output


def result_of(returncode: int | None, output: str, memory_mb: int | None = 100) -> RunResult:
    return RunResult(returncode, False, False, False, False, output, 1.0, memory_mb)


@pytest.mark.parametrize(
    ("result", "out_of_memory"),
    [
        pytest.param(result_of(1, "Traceback ...\nMemoryError\n"), True, id="Python"),
        pytest.param(
            result_of(-6, "FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap"),
            True,
            id="Node",
        ),
        pytest.param(result_of(2, "fatal error: runtime: out of memory"), True, id="Go"),
        pytest.param(result_of(-6, "memory allocation of 1048576 bytes failed"), True, id="Rust"),
        pytest.param(result_of(-6, "terminate called ... std::bad_alloc"), True, id="C++"),
        pytest.param(result_of(1, "bash: fork: Cannot allocate memory"), True, id="libc"),
        pytest.param(result_of(1, "AssertionError: 2 != 3"), False, id="another failure"),
        pytest.param(result_of(0, "MemoryError handled"), False, id="a success"),
        pytest.param(result_of(1, "MemoryError", None), False, id="no limit was set"),
    ],
)
def test_running_out_of_memory_is_told_from_other_failures(result, out_of_memory):
    assert result.out_of_memory == out_of_memory


def _run_in_turn(
    tmp_path: Path, script: str, turn: contextlib.AbstractContextManager, sandboxed: bool, **limits
) -> RunResult:
    """Run a shell script with a turn, in the sandbox or as it is."""
    boxed: dict = {}
    if sandboxed:
        sandbox = Sandbox(SandboxConfig(pids=64))
        boxed = {"sandbox": sandbox, "box": sandbox.box(tmp_path, tmp_path / "home")}
    return run_process(
        ["sh", "-c", script],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        log_path=tmp_path / "logs" / "run.log",
        turn=turn,
        **boxed,
        **limits,
    )


@pytest.mark.parametrize("sandboxed", [False, True], ids=["as-it-is", "sandboxed"])
def test_a_run_with_a_turn_is_readied_first_and_goes_when_it_takes_the_turn(tmp_path, sandboxed):
    token = f"turn-{uuid.uuid4().hex}"
    seen: dict[str, object] = {}

    @contextlib.contextmanager
    def turn() -> Iterator[None]:
        seen["readied"] = running_with(token)  # its processes are up, held at the gate
        seen["went_early"] = (tmp_path / "went").exists()
        time.sleep(1.5)  # longer than its time limit, which counts from the gate
        yield
        seen["left_at"] = time.time()

    script = f": {token}; touch went; ls /proc/$$/fd; echo ended; sleep 0.3; date +%s.%N"
    result = _run_in_turn(tmp_path, script, turn(), sandboxed, timeout_s=1)
    assert result.ok and not result.timed_out, result.output
    assert seen["readied"] and not seen["went_early"]
    assert (tmp_path / "went").exists()
    # The turn is held until the run is over, and the run holds nothing of its gate.
    assert float(seen["left_at"]) >= float(result.output.split()[-1])  # type: ignore[arg-type]
    assert result.output.split("ended")[0].split() == ["0", "1", "2"]
    assert not running_with(token)


@pytest.mark.parametrize("sandboxed", [False, True], ids=["as-it-is", "sandboxed"])
def test_a_turn_refused_ends_the_readied_run_unstarted(tmp_path, sandboxed):
    token = f"turn-{uuid.uuid4().hex}"
    readied = []

    class NoTurn(Exception):
        pass

    @contextlib.contextmanager
    def refused() -> Iterator[None]:
        readied.append(running_with(token))
        raise NoTurn("the job was stopped while it waited")
        yield

    with pytest.raises(NoTurn):
        _run_in_turn(tmp_path, f": {token}; touch went", refused(), sandboxed, timeout_s=30)
    assert readied == [True]
    assert not running_with(token)  # nothing of it is left running
    assert not (tmp_path / "went").exists()
