"""Run one subprocess with timeouts, an output cap, a log and an allow-listed environment."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from tasks.isolation.sandbox import Box, Launch, Sandbox

POLL_S = 0.2
GRACE_S = 2.0
DRAIN_S = 2.0
CHUNK_BYTES = 65536
MAX_LINE_BYTES = 65536
BASE_ENV_NAMES = ("PATH", "LANG", "LC_ALL", "TZ")
# Names that belong to gaffer itself; no agent or check may ever receive them.
SECRET_NAME = re.compile(
    r"^(GITHUB_.*|GH_.*|GAFFER_.*|APP_ID|PRIVATE_KEY.*|WEBHOOK_SECRET.*|JAM_.*"
    r"|DATABASE_URL|BROKER_URL|REDIS_URL|CELERY_.*|SECRET_KEY)$"
)
# What Python, C++, Rust, Go, Node and libc print when an allocation is refused.
OUT_OF_MEMORY = re.compile(
    r"MemoryError|out of memory|Cannot allocate memory|std::bad_alloc"
    r"|memory allocation of \d+ bytes failed|Allocation failed",
    re.IGNORECASE,
)
OUT_OF_MEMORY_TAIL_CHARS = 4000


@dataclass(frozen=True)
class RunResult:
    """What happened to one process run."""

    returncode: int | None
    timed_out: bool
    idle_timed_out: bool
    output_limited: bool
    stopped: bool
    output: str
    duration_s: float
    memory_mb: int | None = None
    cpu_limited: bool = False
    # The kernel killed a process of the run's control group for using too much memory.
    oom_killed: bool = False

    @property
    def ok(self) -> bool:
        """Return True when the process exited 0 and was not stopped by gaffer."""
        return self.returncode == 0 and not self.killed

    @property
    def killed(self) -> bool:
        """Return True when gaffer ended the process (timeout, idle, flood or stop)."""
        return (
            self.timed_out
            or self.idle_timed_out
            or self.output_limited
            or self.stopped
            or self.cpu_limited
        )

    @property
    def died_of_signal(self) -> bool:
        """Return True when a signal gaffer did not send ended the process."""
        return self.returncode is not None and self.returncode < 0 and not self.killed

    @property
    def maybe_out_of_memory(self) -> bool:
        """Return True when a process under a memory limit died of a signal nobody sent.

        A refused allocation can end a process that way without printing why.
        """
        return self.memory_mb is not None and self.died_of_signal

    @property
    def out_of_memory(self) -> bool:
        """Return True when a failed run under a memory limit says an allocation was refused."""
        if self.memory_mb is None or self.returncode == 0 or self.killed:
            return False
        return self.oom_killed or bool(
            OUT_OF_MEMORY.search(self.output[-OUT_OF_MEMORY_TAIL_CHARS:])
        )


def is_gaffer_secret(name: str) -> bool:
    """Return True for environment names reserved for gaffer's own secrets."""
    return bool(SECRET_NAME.match(name.upper()))


def sandbox_env(
    *,
    allow: Iterable[str],
    source: Mapping[str, str],
    home: Path,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Build an environment from the base names plus `allow`, with its own HOME and TMPDIR."""
    names = [*BASE_ENV_NAMES, *allow]
    env = {n: source[n] for n in names if n in source and not is_gaffer_secret(n)}
    env.setdefault("PATH", os.defpath)
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    env["TMPDIR"] = str(tmp)
    env.update(extra or {})
    return env


class _OutputCapture:
    """Split output into lines for the log and the listener, and keep a capped tail."""

    def __init__(
        self, log: IO[str], max_bytes: int, on_output: Callable[[str], None] | None
    ) -> None:
        self.log = log
        self.max_bytes = max_bytes
        self.on_output = on_output
        self.tail = bytearray()
        self.partial = b""
        self.total = 0
        self.last_at = time.monotonic()

    @property
    def over_limit(self) -> bool:
        """Return True once more than the allowed bytes were produced."""
        return self.total > self.max_bytes

    def feed(self, chunk: bytes) -> None:
        """Take one chunk read from the process."""
        self.last_at = time.monotonic()
        self.total += len(chunk)
        self.tail += chunk
        del self.tail[: max(0, len(self.tail) - self.max_bytes)]
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        if len(self.partial) > MAX_LINE_BYTES:
            lines.append(self.partial)
            self.partial = b""
        for line in lines:
            self._emit(line)

    def finish(self) -> str:
        """Flush the last partial line and return the decoded tail."""
        if self.partial:
            self._emit(self.partial)
            self.partial = b""
        return self.tail.decode("utf-8", errors="replace")

    def _emit(self, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        if self.total <= self.max_bytes + CHUNK_BYTES:
            self.log.write(line + "\n")
            self.log.flush()
        if self.on_output is not None:
            self.on_output(line)


def _exited(pid: int) -> bool:
    """Return True when the child has exited, without reaping it (its pgid stays reserved)."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    return info is not None


def _signal_group(pgid: int, sig: int) -> None:
    """Send a signal to a whole process group, ignoring a group that is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _read_available(fd: int, capture: _OutputCapture, wait_s: float) -> bool:
    """Read what the pipe has within wait_s; return False at end of file."""
    ready, _, _ = select.select([fd], [], [], wait_s)
    return _read_chunk(fd, capture) if ready else True


def _read_chunk(fd: int, capture: _OutputCapture) -> bool:
    """Read what a ready pipe holds; return False at end of file."""
    chunk = os.read(fd, CHUNK_BYTES)
    if chunk:
        capture.feed(chunk)
    return bool(chunk)


def _terminate(pid: int) -> None:
    """Ask the group to stop, and wait a short grace for the leader to exit."""
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and not _exited(pid):
        time.sleep(0.05)


@dataclass
class _Limits:
    started: float
    timeout_s: float
    idle_timeout_s: float | None
    should_stop: Callable[[], bool] | None
    cpu_s: float | None = None
    cpu_used: Callable[[], float] | None = None

    def reason(self, capture: _OutputCapture) -> str | None:
        """Name the limit that was crossed, if any."""
        now = time.monotonic()
        if capture.over_limit:
            return "output_limited"
        if self.cpu_s is not None and self.cpu_used is not None and self.cpu_used() > self.cpu_s:
            return "cpu_limited"
        if now - self.started > self.timeout_s:
            return "timed_out"
        if self.idle_timeout_s is not None and now - capture.last_at > self.idle_timeout_s:
            return "idle_timed_out"
        if self.should_stop is not None and self.should_stop():
            return "stopped"
        return None


def _supervise(
    proc: subprocess.Popen[bytes], capture: _OutputCapture, limits: _Limits
) -> str | None:
    """Pump output until the leader exits or a limit is crossed; return the limit's name."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    open_pipe = True
    with _exit_watch(proc.pid) as exit_fd:
        while not _exited(proc.pid):
            # Woken by output, by the leader's exit, or at the next look at the limits.
            watched = [fd] if open_pipe else []
            ready, _, _ = select.select(watched + exit_fd, [], [], POLL_S)
            if fd in ready:
                open_pipe = _read_chunk(fd, capture)
            reason = limits.reason(capture)
            if reason is not None:
                _terminate(proc.pid)
                return reason
    return None


@contextlib.contextmanager
def _exit_watch(pid: int) -> Iterator[list[int]]:
    """A descriptor that becomes readable when the process exits (Linux's pidfd), so its
    end is seen at once even after its output closed; none where the kernel has no pidfd."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        yield []
        return
    try:
        yield [pidfd]
    finally:
        os.close(pidfd)


def _drain(proc: subprocess.Popen[bytes], capture: _OutputCapture) -> None:
    """Read what is left in the pipe after the group is gone."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + DRAIN_S
    while time.monotonic() < deadline and _read_available(fd, capture, 0.05):
        pass


def _stdin_file(stdin_text: str | None) -> contextlib.AbstractContextManager[IO[bytes] | None]:
    """Put stdin text in an unlinked temporary file so writing it can never block."""
    if stdin_text is None:
        return contextlib.nullcontext()
    handle = tempfile.TemporaryFile()  # noqa: SIM115 - returned as the context manager
    handle.write(stdin_text.encode("utf-8"))
    handle.seek(0)
    return handle


PR_SET_PDEATHSIG = 1


def _child_setup(
    memory_mb: int | None, sandbox_setup: Callable[[], None] | None
) -> Callable[[], None] | None:
    """Return a pre-exec hook: die with the worker (Linux), stay within memory_mb, and do
    what the sandbox asks (join the run's control group, take its limits)."""
    dies_with_parent = _dies_with_parent()
    if dies_with_parent is None and memory_mb is None and sandbox_setup is None:
        return None

    def setup() -> None:
        if dies_with_parent is not None:
            dies_with_parent()
        if memory_mb is not None:
            _limit_memory(memory_mb)
        if sandbox_setup is not None:
            sandbox_setup()

    return setup


def _dies_with_parent() -> Callable[[], None] | None:
    """Return a call that has Linux kill the child if the worker is killed."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    # A worker killed with SIGKILL cannot stop its agent; the kernel can, at once. What the
    # agent started in a session of its own is killed when gaffer removes or reuses the
    # worktree (tasks/recovery/strays.py).
    return lambda: libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _limit_memory(memory_mb: int) -> None:
    """Refuse the process more than memory_mb of writable memory; its children inherit it."""
    # RLIMIT_DATA, not RLIMIT_AS: Node (Claude Code, Gemini CLI) and Go reserve far more
    # address space than they use, and WebAssembly fails under a 4 GB RLIMIT_AS. Since
    # Linux 4.7 RLIMIT_DATA counts every private writable mapping, so a runaway still hits it.
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def _start(
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    stdin: IO[bytes] | None,
    memory_mb: int | None,
    sandbox_setup: Callable[[], None] | None = None,
    gate_fd: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start argv as the leader of a new session, stdout and stderr on one pipe."""
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        pass_fds=() if gate_fd is None else (gate_fd,),
        preexec_fn=_child_setup(memory_mb, sandbox_setup),  # noqa: PLW1509 - prctl and setrlimit, no locks
    )


# What a readied run execs last before argv: it waits for one byte on the gate's pipe.
GATE_SCRIPT = (
    "import os, sys\n"
    "gate = int(sys.argv[1])\n"
    "if not os.read(gate, 1):\n"
    "    sys.exit(125)\n"
    "os.close(gate)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


class _Gate:
    """Where a readied run waits for its turn: its last step before argv's exec reads a
    byte from a pipe that gaffer writes when the turn comes. A pipe closed unwritten (the
    turn refused, or gaffer gone) ends the run unstarted. Without a turn, no gate."""

    def __init__(self, turn: contextlib.AbstractContextManager[object] | None) -> None:
        # The read end is handed to the run; the write end stays here.
        self.fd: int | None = None
        self._write: int | None = None
        if turn is not None:
            self.fd, self._write = os.pipe()

    def __enter__(self) -> _Gate:
        return self

    def __exit__(self, *_: object) -> None:
        self._close()

    def wrap(self, argv: Sequence[str]) -> list[str]:
        if self.fd is None:
            return list(argv)
        # The worker's own Python, which every sandbox shows (a shell names no descriptor
        # past 9). Its start is paid before the gate; after it, only the exec.
        return [sys.executable, "-I", "-S", "-c", GATE_SCRIPT, str(self.fd), *argv]

    def open(self) -> None:
        if self._write is not None:
            with contextlib.suppress(BrokenPipeError):  # it ended already: supervision says how
                os.write(self._write, b"g")
        self._close()

    def _close(self) -> None:
        for fd in (self.fd, self._write):
            if fd is not None:
                os.close(fd)
        self.fd = self._write = None


@contextlib.contextmanager
def _reaped_if_unstarted(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """Kill and reap the run's group when its turn is refused before supervision begins."""
    try:
        yield
    except BaseException:
        if proc.returncode is None:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        raise


def _run_to_end(
    proc: subprocess.Popen[bytes], capture: _OutputCapture, limits: _Limits
) -> str | None:
    """Supervise the run, then kill what is left of the group and reap the leader."""
    try:
        return _supervise(proc, capture, limits)
    finally:
        # The leader is still unreaped here, so its pgid cannot have been reused.
        _signal_group(proc.pid, signal.SIGKILL)
        _drain(proc, capture)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    log_path: Path,
    timeout_s: float,
    idle_timeout_s: float | None = None,
    max_output_bytes: int = 8_000_000,
    stdin_text: str | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_output: Callable[[str], None] | None = None,
    memory_mb: int | None = None,
    sandbox: Sandbox | None = None,
    box: Box | None = None,
    turn: contextlib.AbstractContextManager[object] | None = None,
) -> RunResult:
    """Run argv in its own process group and kill the whole group when a limit is crossed.

    With memory_mb, the process and each process it starts may use that much memory. With
    an enabled sandbox and a box, the run is isolated (tasks/isolation/sandbox.py): memory_mb then
    also bounds its whole process tree, and its CPU time is limited.

    With a turn (an agent slot, say), the run is readied first: its sandbox, proxy and
    processes are started and held at a gate just before argv's exec. The turn is entered
    then, argv goes at once, and the turn is left as soon as the run's processes are gone,
    before the sandbox is torn down. What the turn raises on entry ends the held run
    unstarted and is raised here. The time limits count from the gate.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with (
        open(log_path, "a", encoding="utf-8") as log,
        _stdin_file(stdin_text) as stdin,
        _Gate(turn) as gate,
        _isolated(gate.wrap(argv), env, sandbox, box, memory_mb) as launch,
    ):
        capture = _OutputCapture(log, max_output_bytes, on_output)
        if launch is None:
            proc = _start(gate.wrap(argv), cwd, env, stdin, memory_mb, gate_fd=gate.fd)
        else:
            proc = _start(
                launch.argv, cwd, launch.env, stdin, memory_mb, launch.setup, gate_fd=gate.fd
            )
        with _reaped_if_unstarted(proc), turn or contextlib.nullcontext():
            started = time.monotonic()
            limits = _Limits(started, timeout_s, idle_timeout_s, should_stop)
            if launch is not None:
                limits.cpu_s = launch.cpu_limit_s
                limits.cpu_used = launch.cpu_seconds
            gate.open()
            reason = _run_to_end(proc, capture, limits)
        output = capture.finish()
        oom_killed = launch is not None and launch.oom_killed()
        log.write(_ending(reason, proc.returncode, time.monotonic() - started, oom_killed))
    return RunResult(
        returncode=proc.returncode,
        timed_out=reason == "timed_out",
        idle_timed_out=reason == "idle_timed_out",
        output_limited=reason == "output_limited",
        stopped=reason == "stopped",
        output=output,
        duration_s=time.monotonic() - started,
        memory_mb=memory_mb,
        cpu_limited=reason == "cpu_limited",
        oom_killed=oom_killed,
    )


def _ending(reason: str | None, returncode: int | None, seconds: float, oom: bool) -> str:
    """The line that closes a run in its log: how it ended, for a person reading it later."""
    how = f"exit code {returncode}"
    if reason is not None:
        how = f"stopped by gaffer ({reason.replace('_', ' ')}), {how}"
    elif oom:
        how = f"killed for using too much memory, {how}"
    return f"\n[gaffer] {how}, after {seconds:.1f} s\n"


def _isolated(
    argv: Sequence[str],
    env: Mapping[str, str],
    sandbox: Sandbox | None,
    box: Box | None,
    memory_mb: int | None,
) -> contextlib.AbstractContextManager[Launch | None]:
    """Return the sandboxed launch of argv, or nothing when it runs as it is."""
    if sandbox is None or box is None or not sandbox.enabled:
        return contextlib.nullcontext()
    return sandbox.launch(argv, env, replace(box, memory_mb=memory_mb))
