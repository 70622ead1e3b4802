"""Wrap one agent or check run in bubblewrap: its own identity, processes, files and network.

What a sandboxed run sees:
  identity  a uid of its own (`sandbox.uid`) that owns nothing of gaffer's; a root worker
            switches to it with setpriv (no capabilities, no new privileges), a worker that
            is not root maps it in a user namespace
  processes a PID namespace: only its own tree; when its first process ends, the kernel
            kills every other, detached or not
  files     the toolchain read-only (/usr, the selected parts of /etc, the worker's Python,
            PATH, `sandbox.read_only`), its worktree and HOME read-write, a private /tmp;
            the repository mirror and given files read-only; nothing else of GAFFER_HOME
  network   a network namespace with loopback only; with an egress policy, a forwarder on
            127.0.0.1:3128 leads to gaffer's proxy for the run (tasks/isolation/egress.py), and each
            allowed loopback endpoint (a local model server) is tunnelled to the same port
  limits    a control group per run for memory, process count and CPU time where the
            machine allows it (tasks/isolation/cgroups.py), and a file size limit per process
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bot.settings import Settings
from tasks.isolation.cgroups import RunGroup, TreeLimits
from tasks.isolation.egress import EgressPolicy, EgressProxy

PROXY_PORT = 3128
INSIDE_RUN = Path("/run/gaffer")
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "opt")
# What programs need of /etc: certificates, name lookup, the loader, time zones.
ETC_ENTRIES = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "ssl",
    "pki",
    "hosts",
    "host.conf",
    "gai.conf",
    "nsswitch.conf",
    "resolv.conf",
    "protocols",
    "services",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "mime.types",
    "os-release",
    "debian_version",
)
PROBE_TIMEOUT_S = 10
NONE = "none"


class SandboxUnavailable(Exception):
    """This worker cannot isolate agents and checks; the message says what is missing."""


class SandboxConfigError(ValueError):
    """The server's `sandbox:` setting is malformed."""


@dataclass(frozen=True)
class SandboxConfig:
    """The server's `sandbox:` setting: `none`, or how runs are isolated and limited."""

    enabled: bool = True
    uid: int = 61000
    gid: int = 61000
    read_only: tuple[Path, ...] = ()
    pids: int | None = 1024
    file_size_mb: int | None = 4096
    cpu_s: int | None = 7200

    @classmethod
    def from_setting(cls, raw: Any) -> SandboxConfig:
        """Read the setting; refuse anything but `none` or a mapping of known keys."""
        if raw is None:
            return cls()
        if raw == NONE:
            return cls(enabled=False)
        if not isinstance(raw, Mapping):
            raise SandboxConfigError("sandbox must be `none` or a mapping")
        unknown = set(raw) - {"uid", "gid", "read_only", "pids", "file_size_mb", "cpu_s"}
        if unknown:
            raise SandboxConfigError(f"sandbox: unknown keys {', '.join(sorted(unknown))}")
        uid = _positive(raw, "uid", cls.uid)
        paths = raw.get("read_only") or []
        if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
            raise SandboxConfigError("sandbox.read_only must be a list of paths")
        return cls(
            uid=uid or cls.uid,
            gid=_positive(raw, "gid", uid) or cls.gid,
            read_only=tuple(Path(p) for p in paths),
            pids=_positive(raw, "pids", cls.pids),
            file_size_mb=_positive(raw, "file_size_mb", cls.file_size_mb),
            cpu_s=_positive(raw, "cpu_s", cls.cpu_s),
        )


def _positive(raw: Mapping[str, Any], key: str, default: int | None) -> int | None:
    value = raw.get(key, default)
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    raise SandboxConfigError(f"sandbox.{key} must be a positive whole number or null")


@dataclass(frozen=True)
class Box:
    """What one run may see and reach besides the toolchain."""

    worktree: Path
    home: Path
    read_only: tuple[Path, ...] = ()
    # None: loopback only. A policy: the run reaches what it allows through gaffer's proxy.
    egress: EgressPolicy | None = None
    egress_log: Path | None = None
    # False shows the worktree read-only (planning stages).
    writable: bool = True
    memory_mb: int | None = None
    # gaffer's own paths: never shown, even when a toolchain folder holds them.
    hidden: tuple[Path, ...] = ()


@dataclass
class Launch:
    """One sandboxed start: the argv to run, the child's setup, and the run's group."""

    argv: list[str]
    env: dict[str, str]
    setup: Callable[[], None]
    group: RunGroup | None = None
    # The CPU time the whole tree may use, watched by the runner (None: not watched here).
    cpu_limit_s: float | None = None

    def cpu_seconds(self) -> float:
        return self.group.cpu_seconds() if self.group is not None else 0.0

    def oom_killed(self) -> bool:
        return self.group is not None and self.group.oom_killed()


@dataclass(frozen=True)
class Sandbox:
    """Isolate runs as the server's `sandbox:` setting says; `none` runs them as they are."""

    config: SandboxConfig
    # gaffer's own paths (home, key, settings, database) and services (database, broker,
    # web port): no run sees the first or reaches the second.
    hidden: tuple[Path, ...] = ()
    services: tuple[tuple[str, int], ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings, environ: Mapping[str, str]) -> Sandbox:
        """Build the worker's sandbox from its settings; a bad `sandbox:` raises."""
        config = SandboxConfig.from_setting(settings.server_config.get("sandbox"))
        hidden = [settings.home]
        for name in ("PRIVATE_KEY_PATH", "GAFFER_CONFIG"):
            if environ.get(name):
                hidden.append(Path(environ[name]))
        for url in (settings.database_url, settings.broker_url):
            hidden += _database_file(url)
        return cls(config, tuple(hidden), _services(settings))

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def box(
        self,
        worktree: Path,
        home: Path,
        *,
        read_only: Sequence[Path] = (),
        egress: Sequence[str] | None = (),
        egress_log: Path | None = None,
        writable: bool = True,
    ) -> Box:
        """Describe one run: egress None means any outside host, () loopback only."""
        policy = None
        if egress is None or egress:
            allow = None if egress is None else tuple(egress)
            policy = EgressPolicy(allow=allow, refused_services=self.services)
        return Box(
            worktree, home, tuple(read_only), policy, egress_log, writable, hidden=self.hidden
        )

    def check(self) -> None:
        """Raise SandboxUnavailable, saying what is missing, when runs cannot be isolated."""
        if not self.enabled:
            return
        missing = probe(self.config.uid, self.config.gid)
        if missing is not None:
            raise SandboxUnavailable(
                f"gaffer cannot isolate agents and checks on this worker: {missing}. "
                "Install bubblewrap and socat and allow user namespaces (see deploy/README.md), "
                "or set `sandbox: none` in the server settings to run them without isolation."
            )

    @contextlib.contextmanager
    def launch(self, argv: Sequence[str], env: Mapping[str, str], box: Box) -> Iterator[Launch]:
        """Yield how to start argv inside box; tear down its proxy and group afterwards."""
        self.check()
        with tempfile.TemporaryDirectory(prefix="gaffer-box-") as scratch:
            run_dir = Path(scratch)
            group = RunGroup.create(TreeLimits(box.memory_mb, self.config.pids))
            try:
                with _proxy(box, run_dir) as proxy:
                    yield self._launch(argv, env, box, run_dir, group, proxy)
            finally:
                if group is not None:
                    group.remove()

    def _launch(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        box: Box,
        run_dir: Path,
        group: RunGroup | None,
        proxy: EgressProxy | None,
        as_root: bool | None = None,
    ) -> Launch:
        if as_root is None:
            as_root = os.geteuid() == 0
        _own(box, run_dir, self.config, as_root)
        _identity_files(run_dir, self.config, box.home)
        env = dict(env)
        inner = list(argv)
        if proxy is not None and box.egress is not None:
            env.update(_proxy_env())
            inner = _with_forwarders(inner, _loopback_ports(box.egress))
        if as_root:
            inner = [*_drop_to(self.config), *inner]
        wrapped = [
            *_bwrap_head(self.config, as_root),
            *_mounts(box, run_dir, self.config, env.get("PATH", os.defpath), proxy is not None),
            "--",
            *inner,
        ]
        setup = _child_setup(self.config, group, as_root)
        cpu = self.config.cpu_s if group is not None else None
        return Launch(wrapped, env, setup, group, cpu)


def _database_file(url: str) -> list[Path]:
    """Return the SQLite file a database or broker URL names, if it names one."""
    path = url.partition(":///")[2] if "sqlite:///" in url else ""
    return [Path(path)] if path else []


def _services(settings: Settings) -> tuple[tuple[str, int], ...]:
    """Return gaffer's own network services: the database, the broker and the web port."""
    found = [("127.0.0.1", settings.port), ("localhost", settings.port)]
    defaults = {"postgresql": 5432, "postgres": 5432, "redis": 6379, "rediss": 6379}
    for url in (settings.database_url, settings.broker_url):
        parts = urlsplit(url)
        scheme = parts.scheme.split("+")[0]
        if parts.hostname and scheme in defaults:
            found.append((parts.hostname, parts.port or defaults[scheme]))
    return tuple(found)


@functools.cache
def probe(uid: int, gid: int) -> str | None:
    """Say what this worker lacks to isolate runs, or None when a sandboxed `true` works."""
    for program in ("bwrap", "socat", "setpriv"):
        if shutil.which(program) is None:
            return f"`{program}` is not installed"
    with tempfile.TemporaryDirectory(prefix="gaffer-probe-") as scratch:
        folder = Path(scratch)
        box = Box(worktree=folder / "wt", home=folder / "home")
        for path in (box.worktree, box.home):
            path.mkdir()
        config = SandboxConfig(uid=uid, gid=gid)
        launch = Sandbox(config)._launch(["true"], {"PATH": os.defpath}, box, folder, None, None)
        try:
            result = subprocess.run(
                launch.argv,
                env=launch.env,
                preexec_fn=launch.setup,  # noqa: PLW1509 - setrlimit and prctl only
                capture_output=True,
                timeout=PROBE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"bubblewrap could not start ({error})"
    if result.returncode != 0:
        said = result.stderr.decode(errors="replace").strip().splitlines()
        return f"bubblewrap cannot make its namespaces here ({said[-1] if said else 'no reason'})"
    return None


def _bwrap_head(config: SandboxConfig, as_root: bool) -> list[str]:
    head = [
        "bwrap",
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "gaffer-sandbox",
        "--die-with-parent",
        "--new-session",
    ]
    if not as_root:
        # No root to switch identity: a user namespace shows the run as the sandbox uid.
        head += ["--unshare-user", "--uid", str(config.uid), "--gid", str(config.gid)]
    return head


def _drop_to(config: SandboxConfig) -> list[str]:
    """Return argv that runs the rest as the sandbox uid, with no way back to privileges."""
    return [
        "setpriv",
        f"--reuid={config.uid}",
        f"--regid={config.gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


def _mounts(
    box: Box, run_dir: Path, config: SandboxConfig, path_var: str, egress: bool
) -> list[str]:
    args = _system_mounts()
    binds: list[tuple[str, Path, Path]] = []
    for folder in _toolchain(config, path_var, box.hidden):
        binds.append(("--ro-bind", folder, folder))
    binds += [("--ro-bind", p.resolve(), p.resolve()) for p in box.read_only if p.exists()]
    worktree = "--bind" if box.writable else "--ro-bind"
    binds += [(worktree, box.worktree.resolve(), box.worktree.resolve())]
    binds += [("--bind", box.home.resolve(), box.home.resolve())]
    if egress:
        binds.append(("--ro-bind", run_dir / "net", INSIDE_RUN))
    made: set[Path] = {Path("/"), Path("/tmp"), Path("/etc")}
    for kind, source, target in sorted(binds, key=lambda b: len(b[2].parts)):
        for parent in reversed(target.parents):
            if parent not in made and not _covered(parent, binds):
                args += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        args += [kind, str(source), str(target)]
        made.add(target)
    args += ["--ro-bind", str(run_dir / "passwd"), "/etc/passwd"]
    args += ["--ro-bind", str(run_dir / "group"), "/etc/group"]
    args += ["--chdir", str(box.worktree.resolve())]
    return args


def _system_mounts() -> list[str]:
    args: list[str] = []
    for name in SYSTEM_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--tmpfs", "/tmp"]
    args += ["--dir", "/etc"]
    for name in ETC_ENTRIES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args


def _covered(path: Path, binds: list[tuple[str, Path, Path]]) -> bool:
    """Return True when path lies inside a bound folder (or a system one)."""
    if path.parts[1:2] and path.parts[1] in SYSTEM_DIRS:
        return True
    return any(target in path.parents for _, _, target in binds)


def _toolchain(config: SandboxConfig, path_var: str, hidden: tuple[Path, ...]) -> list[Path]:
    """Return the folders shown read-only: the worker's Python, gaffer, PATH and extras."""
    gaffer = Path(__file__).resolve().parents[2]
    candidates = [
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.exec_prefix),
        gaffer / "tasks",
        gaffer / "bot",
        *(Path(p) for p in path_var.split(os.pathsep) if p),
        *config.read_only,
    ]
    secret = [p.resolve() for p in hidden]
    chosen: list[Path] = []
    for candidate in candidates:
        folder = candidate.resolve()
        if not folder.is_dir() or folder == Path("/") or folder in chosen:
            continue
        if not os.access(folder, os.R_OK | os.X_OK):
            continue  # bubblewrap, run by a worker that is not root, could not show it
        if folder.parts[1:2] and folder.parts[1] in SYSTEM_DIRS:
            continue
        if any(folder == s or folder in s.parents or s in folder.parents for s in secret):
            continue  # a folder holding gaffer's home, key or database is never shown
        chosen.append(folder)
    # A folder inside another chosen one comes with it.
    return [f for f in chosen if not any(other in f.parents for other in chosen)]


def _own(box: Box, run_dir: Path, config: SandboxConfig, as_root: bool) -> None:
    """Give the sandbox uid its worktree and home (root workers; others share their uid)."""
    for folder in (box.worktree, box.home, box.home / "tmp"):
        folder.mkdir(parents=True, exist_ok=True)
    net = run_dir / "net"
    net.mkdir(exist_ok=True)
    if not as_root:
        return
    for folder in (box.worktree, box.home):
        _chown_tree(folder, config.uid, config.gid)
    os.chown(net, config.uid, config.gid)
    run_dir.chmod(0o711)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    """Hand a folder and everything in it to uid, never following a symlink."""
    os.lchown(root, uid, gid)
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = os.path.join(folder, name)
            if os.lstat(path).st_uid != uid:
                os.lchown(path, uid, gid)


def _identity_files(run_dir: Path, config: SandboxConfig, home: Path) -> None:
    """Write the passwd and group the run sees: itself and nobody else of the machine."""
    (run_dir / "passwd").write_text(
        "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
        f"gaffer-run:x:{config.uid}:{config.gid}:gaffer run:{home.resolve()}:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (run_dir / "group").write_text(f"root:x:0:\ngaffer-run:x:{config.gid}:\nnogroup:x:65534:\n")


def _proxy_env() -> dict[str, str]:
    url = f"http://127.0.0.1:{PROXY_PORT}"
    env = {name: url for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")}
    # Loopback endpoints are tunnelled to the same port inside, so clients go there directly.
    env.update(NO_PROXY="127.0.0.1,localhost,::1", no_proxy="127.0.0.1,localhost,::1")
    return env


def _loopback_ports(policy: EgressPolicy) -> list[int]:
    """Return the ports of allowed loopback endpoints (a local model server, say)."""
    ports = []
    for entry in policy.allow or ():
        host, _, port = entry.rpartition(":")
        if host in ("127.0.0.1", "localhost", "[::1]") and port.isdigit():
            ports.append(int(port))
    return sorted(set(ports) - {PROXY_PORT})


def _with_forwarders(argv: list[str], loopback_ports: list[int]) -> list[str]:
    """Return argv run after socat forwarders to the proxy are listening inside."""
    sock = INSIDE_RUN / "egress.sock"
    lines = [
        f"socat TCP-LISTEN:{PROXY_PORT},bind=127.0.0.1,fork,reuseaddr "
        f"UNIX-CONNECT:{sock} 2>/dev/null &"
    ]
    for port in loopback_ports:
        lines.append(
            f"socat TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr "
            f"PROXY:127.0.0.1:127.0.0.1:{port},proxyport={PROXY_PORT} 2>/dev/null &"
        )
    # Wait until each port listens (state 0A in /proc/net/tcp) so the first request finds it.
    for port in [PROXY_PORT, *loopback_ports]:
        hexport = f"{port:04X}"
        lines.append(
            f"i=0; until grep -q ':{hexport} 00000000:0000 0A' /proc/net/tcp; do "
            f'i=$((i+1)); [ "$i" -gt 500 ] && break; sleep 0.01; done'
        )
    lines.append('exec "$@"')
    return ["sh", "-c", "\n".join(lines), "gaffer-run", *argv]


@contextlib.contextmanager
def _proxy(box: Box, run_dir: Path) -> Iterator[EgressProxy | None]:
    if box.egress is None:
        yield None
        return
    log = box.egress_log or run_dir / "egress.log"
    (run_dir / "net").mkdir(exist_ok=True)
    with EgressProxy(run_dir / "net" / "egress.sock", box.egress, log) as proxy:
        yield proxy


def _child_setup(
    config: SandboxConfig, group: RunGroup | None, as_root: bool
) -> Callable[[], None]:
    """Return what the child does before exec: join its group, take its per-process limits."""

    def setup() -> None:
        if group is not None:
            group.join()
        _limit(resource.RLIMIT_CORE, 0)
        if config.file_size_mb is not None:
            _limit(resource.RLIMIT_FSIZE, config.file_size_mb * 1024 * 1024)
        if group is None and config.cpu_s is not None:
            _limit(resource.RLIMIT_CPU, config.cpu_s)
        if group is None and as_root and config.pids is not None:
            # Counted per uid: every run on this machine shares it, so it is only a backstop.
            _limit(resource.RLIMIT_NPROC, config.pids)

    return setup


def _limit(kind: int, value: int) -> None:
    _soft, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, value))
