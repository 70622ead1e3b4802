"""Load agent definitions and run one agent in a worktree with the shared process runner."""

from __future__ import annotations

import re
import shutil
import string
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from bot.agent_names import AGENTS_FILE, merge_definitions, shipped_definitions
from bot.models import Stage
from tasks.agents.live import LiveUsage
from tasks.agents.pricing import price
from tasks.agents.readers.aider import parse_aider
from tasks.agents.readers.claude import parse_claude_json
from tasks.agents.readers.codex import parse_codex_jsonl
from tasks.agents.readers.gemini import parse_gemini_json
from tasks.agents.readers.opencode import parse_opencode_jsonl
from tasks.agents.usage import AgentOutput, QuotaHit, RetryVerdict, Usage
from tasks.isolation.egress import EgressPolicy
from tasks.isolation.runner import RunResult, is_gaffer_secret, run_process, sandbox_env
from tasks.isolation.sandbox import Sandbox, SandboxUnavailable
from tasks.recovery.strays import worktree_mark

READ_ONLY_STAGES = frozenset({Stage.PLAN, Stage.REVISE})
OUTPUTS = ("text", "claude-json", "codex-jsonl", "gemini-json", "aider", "opencode-jsonl")
PLACEHOLDERS = frozenset({"prompt", "prompt_file", "model", "workdir", "stage", "python"})
KEYS = frozenset(
    {
        "command",
        "plan_command",
        "model_args",
        "output",
        "env",
        "description",
        "memory_mb",
        "egress",
        "stdin",
        "set_env",
        "ignore",
        "env_args",
        "home_files",
        "base_url",
        "base_url_env",
    }
)
# Linux refuses one argv string longer than this (MAX_ARG_STRLEN, 128 KiB) with E2BIG.
MAX_ARG_BYTES = 128 * 1024
# An env value naming where the agent's model answers (a local model server, say) is an
# endpoint the operator configured: the sandbox lets the agent reach it.
ENDPOINT_NAME = re.compile(r"(_BASE_URL|_API_BASE|_ENDPOINT)$")
ERROR_TAIL_CHARS = 500
# An agent that names no memory_mb gets the server's `agent_memory_mb`.
SERVER_DEFAULT: Final = "server"


class AgentConfigError(ValueError):
    """An agent definition is invalid; the message says which agent and why."""


@dataclass(frozen=True)
class AgentSpec:
    """One agent: argv templates, how to read its output, which env names it may see."""

    name: str
    command: tuple[str, ...]
    output: str
    env: tuple[str, ...] = ()
    description: str = ""
    plan_command: tuple[str, ...] | None = None
    model_args: tuple[str, ...] = ()
    memory_mb: int | Literal["server"] | None = SERVER_DEFAULT
    egress: tuple[str, ...] = ()
    # `stdin: prompt`: the prompt is written to the agent's standard input, whatever its size.
    prompt_on_stdin: bool = False
    # Fixed, non-secret settings for the CLI, e.g. telemetry off.
    set_env: tuple[tuple[str, str], ...] = ()
    # What the CLI leaves in the worktree that is never committed: patterns from the
    # worktree's root, `*` matching across folders (`.aider*`).
    ignore: tuple[str, ...] = ()
    # Arguments added when one of its env names is set on the worker, `{value}` standing for
    # the value: how a CLI that ignores a variable (Codex and OPENAI_BASE_URL) is told.
    env_args: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Files written into the run's fresh home before it starts (path in the home: text),
    # for settings a CLI reads only from a file, e.g. Gemini CLI's auth type.
    home_files: tuple[tuple[str, str], ...] = ()
    # Where the model answers (the operator's `base_url`), and the env name through which
    # this CLI is told it (`base_url_env`; with `env_args` for a CLI that ignores it).
    base_url: str | None = None
    base_url_env: str | None = None

    def memory_limit_mb(self, server_default: int | None) -> int | None:
        """Return the agent's memory limit in MB, or None for no limit."""
        if isinstance(self.memory_mb, str):
            return server_default
        return self.memory_mb

    def template(self, stage: str) -> tuple[str, ...]:
        """Return the argv template for a stage (plan_command for read-only stages)."""
        if stage in READ_ONLY_STAGES and self.plan_command:
            return self.plan_command
        return self.command


@dataclass(frozen=True)
class AgentResult:
    """The agent's answer, whether it can be used, and the process run behind it."""

    text: str
    ok: bool
    error: str | None
    run: RunResult
    usage: Usage | None = None
    quota: QuotaHit | None = None
    over_budget: bool = False
    denials: tuple[str, ...] = ()


def parse_text(output: str) -> AgentOutput:
    """Read plain output: the answer is everything printed."""
    return AgentOutput(text=output)


PARSERS: dict[str, Callable[[str], AgentOutput]] = {
    "text": parse_text,
    "claude-json": parse_claude_json,
    "codex-jsonl": parse_codex_jsonl,
    "gemini-json": parse_gemini_json,
    "aider": parse_aider,
    "opencode-jsonl": parse_opencode_jsonl,
}


def _strings(name: str, key: str, value: Any, *, empty_ok: bool) -> tuple[str, ...]:
    """Check that a definition field is a list of strings."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AgentConfigError(f"agent {name!r}: `{key}` must be a list of strings")
    if not value and not empty_ok:
        raise AgentConfigError(f"agent {name!r}: `{key}` must not be empty")
    return tuple(value)


def _check_placeholders(name: str, key: str, argv: Sequence[str]) -> None:
    """Refuse placeholders gaffer does not fill, naming the first one."""
    for arg in argv:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(arg) if f is not None]
        except ValueError as exc:
            raise AgentConfigError(f"agent {name!r}: `{key}` has a bad brace in {arg!r}") from exc
        for field_name in fields:
            if field_name not in PLACEHOLDERS:
                allowed = ", ".join(f"{{{p}}}" for p in sorted(PLACEHOLDERS))
                raise AgentConfigError(
                    f"agent {name!r}: unknown placeholder {{{field_name}}} in `{key}` "
                    f"(known: {allowed})"
                )


def _check_env(name: str, names: Sequence[str]) -> None:
    """Refuse env names that would hand an agent one of gaffer's own secrets."""
    for env_name in names:
        if is_gaffer_secret(env_name):
            raise AgentConfigError(
                f"agent {name!r}: `env` may not include {env_name}, a gaffer secret"
            )


def _memory_mb(name: str, raw: Mapping[str, Any]) -> int | Literal["server"] | None:
    """Read the optional memory limit: a positive number of MB, or null for none."""
    if "memory_mb" not in raw:
        return SERVER_DEFAULT
    value = raw["memory_mb"]
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise AgentConfigError(
            f"agent {name!r}: `memory_mb` must be a positive number of MB, or null for no limit"
        )
    return value


def _argv_field(name: str, raw: Mapping[str, Any], key: str) -> tuple[str, ...] | None:
    """Read and check an optional argv template field."""
    if raw.get(key) is None:
        return None
    argv = _strings(name, key, raw[key], empty_ok=key == "model_args")
    _check_placeholders(name, key, argv)
    return argv


def parse_agent(name: str, raw: Any) -> AgentSpec:
    """Build an AgentSpec from one definition, with a clear error when it is wrong."""
    if not isinstance(raw, Mapping):
        raise AgentConfigError(f"agent {name!r}: definition must be a mapping")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise AgentConfigError(
            f"agent {name!r}: unknown key {unknown[0]!r} (known: {', '.join(sorted(KEYS))})"
        )
    if "command" not in raw:
        raise AgentConfigError(f"agent {name!r}: `command` is required")
    output = raw.get("output", "text")
    if output not in OUTPUTS:
        raise AgentConfigError(
            f"agent {name!r}: unknown output {output!r} (known: {', '.join(OUTPUTS)})"
        )
    env = _strings(name, "env", raw.get("env", []), empty_ok=True)
    _check_env(name, env)
    return AgentSpec(
        name=name,
        command=_argv_field(name, raw, "command") or (),
        output=output,
        env=env,
        description=str(raw.get("description", "")),
        plan_command=_argv_field(name, raw, "plan_command"),
        model_args=_argv_field(name, raw, "model_args") or (),
        memory_mb=_memory_mb(name, raw),
        egress=_egress(name, raw),
        prompt_on_stdin=_stdin(name, raw),
        set_env=_set_env(name, raw),
        ignore=_strings(name, "ignore", raw.get("ignore", []), empty_ok=True),
        env_args=_env_args(name, raw, env),
        home_files=_home_files(name, raw),
        **_base_url(name, raw, env),
    )


def _base_url(name: str, raw: Mapping[str, Any], env: Sequence[str]) -> dict[str, str | None]:
    """Read `base_url:` (an http or https URL) and `base_url_env:` (a name in `env`)."""
    url, via = raw.get("base_url"), raw.get("base_url_env")
    if via is not None and via not in env:
        raise AgentConfigError(f"agent {name!r}: `base_url_env` names {via}, not in `env`")
    if url is None:
        return {"base_url": None, "base_url_env": via}
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise AgentConfigError(f"agent {name!r}: `base_url` must be an http or https URL")
    if via is None:
        raise AgentConfigError(
            f"agent {name!r}: `base_url` needs `base_url_env`, the variable its CLI reads it from"
        )
    return {"base_url": url, "base_url_env": via}


def _home_files(name: str, raw: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """Read `home_files:`, relative paths inside the home mapped to their text."""
    files = raw.get("home_files") or {}
    if not isinstance(files, Mapping) or not all(
        isinstance(path, str) and isinstance(text, str) for path, text in files.items()
    ):
        raise AgentConfigError(f"agent {name!r}: `home_files` must map paths to text")
    for path in files:
        parts = PurePosixPath(path).parts
        if not parts or PurePosixPath(path).is_absolute() or ".." in parts:
            raise AgentConfigError(
                f"agent {name!r}: `home_files` path {path!r} must stay inside the home"
            )
    return tuple(files.items())


def _env_args(
    name: str, raw: Mapping[str, Any], env: Sequence[str]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Read `env_args:`, each name one the agent may see (in `env`), mapped to arguments."""
    values = raw.get("env_args") or {}
    if not isinstance(values, Mapping):
        raise AgentConfigError(f"agent {name!r}: `env_args` must map env names to arguments")
    for env_name in values:
        if env_name not in env:
            raise AgentConfigError(f"agent {name!r}: `env_args` names {env_name}, not in `env`")
    return tuple(
        (str(env_name), _strings(name, "env_args", args, empty_ok=False))
        for env_name, args in values.items()
    )


def _set_env(name: str, raw: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """Read `set_env:`, names and the plain values the agent gets for them."""
    values = raw.get("set_env") or {}
    if not isinstance(values, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str | int) and not isinstance(v, bool)
        for k, v in values.items()
    ):
        raise AgentConfigError(f"agent {name!r}: `set_env` must map names to strings")
    _check_env(name, list(values))
    return tuple((key, str(value)) for key, value in values.items())


def _stdin(name: str, raw: Mapping[str, Any]) -> bool:
    """Read `stdin:`, which can only say that the prompt goes there."""
    if raw.get("stdin") in (None, "prompt"):
        return raw.get("stdin") == "prompt"
    raise AgentConfigError(f"agent {name!r}: `stdin` can only be `prompt`")


def _egress(name: str, raw: Mapping[str, Any]) -> tuple[str, ...]:
    """Read the hosts the agent may reach: `api.example.com`, `*.example.com`, `host:port`."""
    hosts = _strings(name, "egress", raw.get("egress", []), empty_ok=True)
    try:
        EgressPolicy(allow=hosts)
    except ValueError as error:
        raise AgentConfigError(f"agent {name!r}: `egress` {error}") from error
    return hosts


def egress_of(spec: AgentSpec, env: Mapping[str, str]) -> list[str]:
    """Return the hosts the agent may reach: its `egress`, its `base_url` and the endpoints
    its env names."""
    endpoints = [value for name, value in env.items() if ENDPOINT_NAME.search(name)]
    hosts = list(spec.egress)
    for endpoint in [*endpoints, *([spec.base_url] if spec.base_url else [])]:
        url = urlsplit(endpoint)
        if url.hostname and url.scheme in ("http", "https"):
            port = url.port or (443 if url.scheme == "https" else 80)
            host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
            hosts.append(f"{host}:{port}")
    return hosts


def load_agents(
    extra: Mapping[str, Any] | None = None, *, path: Path = AGENTS_FILE
) -> dict[str, AgentSpec]:
    """Return the shipped agents with those from the settings file added or changing them
    (see `merge_definitions`)."""
    shipped = shipped_definitions(path)
    if not isinstance(shipped, Mapping) or (extra is not None and not isinstance(extra, Mapping)):
        raise AgentConfigError("agent definitions must be a mapping of name to definition")
    merged = merge_definitions(shipped, extra or {})
    return {str(name): parse_agent(str(name), raw) for name, raw in merged.items()}


def render_argv(spec: AgentSpec, stage: str, values: Mapping[str, str]) -> list[str]:
    """Fill the stage's argv template; model_args are added only when a model is set."""
    template = list(spec.template(stage))
    if values.get("model"):
        template += spec.model_args
    return [arg.format_map(values) for arg in template]


def _failure(
    spec: AgentSpec, run: RunResult, timeout_s: float, idle_s: float | None, said: str | None
) -> str | None:
    """Say why a run cannot be used, or None when it exited cleanly.

    said: the error the agent's own output gives (its parser read it); for a failed exit it
    reads better than the output's last characters.
    """
    if run.timed_out:
        return f"agent {spec.name!r} timed out after {timeout_s:g} s"
    if run.idle_timed_out:
        return f"agent {spec.name!r} printed nothing for {idle_s:g} s and was stopped"
    if run.output_limited:
        return f"agent {spec.name!r} printed more output than allowed and was stopped"
    if run.stopped:
        return f"agent {spec.name!r} was stopped"
    if run.cpu_limited:
        return f"agent {spec.name!r} used all the CPU time its run may use and was stopped"
    if run.returncode != 0:
        tail = said or run.output.strip()[-ERROR_TAIL_CHARS:]
        message = f"agent {spec.name!r} {_exit_reason(run)}"
        return f"{message}: {tail}" if tail else message
    return None


def _exit_reason(run: RunResult) -> str:
    """Say how the process ended, naming the memory limit when it may be the cause."""
    exited = f"exited with code {run.returncode}"
    if run.out_of_memory:
        return f"ran out of memory (its limit is {run.memory_mb} MB) and {exited}"
    if run.maybe_out_of_memory:
        return f"{exited} (it may have run out of its {run.memory_mb} MB memory limit)"
    return exited


def _not_installed(spec: AgentSpec, program: str) -> AgentResult:
    """Report a missing executable as a failed result, not an exception."""
    return _not_started(
        f"agent '{spec.name}' is not installed on this worker (looked for `{program}` on PATH)"
    )


def _not_started(error: str) -> AgentResult:
    """Report an agent that could not be started as a failed result, not an exception."""
    run = RunResult(None, False, False, False, False, "", 0.0)
    return AgentResult(text="", ok=False, error=error, run=run)


def _parse(spec: AgentSpec, output: str) -> AgentOutput:
    """Read the output with the agent's parser."""
    parser = PARSERS.get(spec.output)
    if parser is None:
        return AgentOutput(text="", error=f"no parser for output {spec.output!r} yet")
    return parser(output)


def run_agent(
    spec: AgentSpec,
    *,
    stage: str,
    prompt: str,
    workdir: Path,
    job_dir: Path,
    model: str | None,
    timeout_s: float,
    idle_timeout_s: float | None,
    source_env: Mapping[str, str],
    should_stop: Callable[[], bool] | None = None,
    spend_limit_usd: Decimal | None = None,
    prices: Mapping[str, Any] | None = None,
    memory_mb: int | None = None,
    sandbox: Sandbox | None = None,
    shown: Sequence[Path] = (),
    on_answer: Callable[[], None] | None = None,
    turn: AbstractContextManager[Decimal | None] | None = None,
) -> AgentResult:
    """Run the agent for one stage in workdir and return its parsed, priced answer.

    With spend_limit_usd, the agent's live usage (stream formats) is priced as it arrives
    and the agent is stopped once it has spent the limit. on_answer is called once, while
    the agent runs, when its output first shows the provider billing tokens (the provider
    answered, so the account is not at its limit). With memory_mb, the agent and
    each process it starts may use that much memory. With a sandbox, the agent runs
    isolated: it sees workdir (read-only in planning stages), its home, its prompt file and
    `shown` (the repository's mirror), and reaches only its egress hosts.

    With a turn (the machine's agent slot), the agent is readied to its last step and
    started on entering it; the turn yields the spend limit as it stands then, which
    replaces spend_limit_usd (tasks/isolation/runner.py).
    """
    job_dir.mkdir(parents=True, exist_ok=True)
    prompt_file = job_dir / "prompt.md"
    prompt_file.write_text(prompt, encoding="utf-8")
    values = {
        "prompt": prompt,
        "prompt_file": str(prompt_file),
        "model": model or "",
        "workdir": str(workdir),
        "stage": stage,
        "python": sys.executable,
    }
    for relative, text in spec.home_files:
        written = job_dir / "home" / relative
        written.parent.mkdir(parents=True, exist_ok=True)
        written.write_text(text, encoding="utf-8")
    env = sandbox_env(
        allow=spec.env,
        source=source_env,
        home=job_dir / "home",
        extra={
            **dict(spec.set_env),
            **({spec.base_url_env: spec.base_url} if spec.base_url and spec.base_url_env else {}),
            "GAFFER_STAGE": stage,
            **worktree_mark(workdir),
        },
    )
    argv = _command(spec, stage, values, env)
    if shutil.which(argv[0], path=env["PATH"]) is None:
        return _not_installed(spec, argv[0])
    if too_long := [arg for arg in argv if len(arg.encode()) >= MAX_ARG_BYTES]:
        return _not_started(
            f"agent {spec.name!r} was not started: an argument of "
            f"{len(too_long[0].encode()) // 1024} KiB is past Linux's 128 KiB limit; pass the "
            "prompt as `{prompt_file}` or with `stdin: prompt` in the agent's definition"
        )
    meter = SpendMeter(model, spend_limit_usd, prices, on_answer)
    box = None
    if sandbox is not None:
        try:
            sandbox.check()
        except SandboxUnavailable as missing:
            return _not_started(str(missing))
        box = sandbox.box(
            workdir,
            job_dir / "home",
            read_only=[prompt_file, *shown],
            egress=egress_of(spec, env),
            egress_log=job_dir / "egress.log",
            writable=stage not in READ_ONLY_STAGES,
        )
    run = run_process(
        argv,
        cwd=workdir,
        env=env,
        log_path=job_dir / "agent.log",
        timeout_s=timeout_s,
        idle_timeout_s=idle_timeout_s,
        should_stop=lambda: meter.stopped() or bool(should_stop and should_stop()),
        on_output=meter.feed,
        memory_mb=memory_mb,
        sandbox=sandbox,
        box=box,
        stdin_text=prompt if spec.prompt_on_stdin else None,
        turn=None if turn is None else _limited(turn, meter),
    )
    # Parse even a failed run: a Claude error result or a quota hit still reports usage.
    parsed = _parse(spec, run.output)
    usage = price(_named(parsed.usage or meter.usage, model), overrides=prices)
    if meter.over():
        stopped = f"agent {spec.name!r} was stopped: it reached the budget of ${meter.limit}"
        return AgentResult("", False, stopped, run, usage, parsed.quota, over_budget=True)
    if meter.verdict is not None:
        verdict = meter.verdict
        return AgentResult("", False, verdict.error, run, usage, verdict.quota or parsed.quota)
    failure = _failure(spec, run, timeout_s, idle_timeout_s, parsed.error) or parsed.error
    return AgentResult(
        parsed.text if failure is None else "",
        failure is None,
        failure,
        run,
        usage,
        parsed.quota,
        denials=parsed.denials,
    )


@contextmanager
def _limited(turn: AbstractContextManager[Decimal | None], meter: SpendMeter) -> Iterator[None]:
    """Hold the turn; the spend limit it yields is the meter's from then on."""
    with turn as limit:
        meter.limit = limit
        yield


def _command(
    spec: AgentSpec, stage: str, values: Mapping[str, str], env: Mapping[str, str]
) -> list[str]:
    """Return the stage's argv, with the env_args of each env name set for the agent."""
    argv = render_argv(spec, stage, values)
    for env_name, args in spec.env_args:
        if env.get(env_name):
            argv += [arg.replace("{value}", env[env_name]) for arg in args]
    return argv


class SpendMeter:
    """Watch an agent's output as it streams: price its live usage against an optional
    limit, notice a retry loop that waiting cannot end (verdict), and say once when the
    provider first answers (on_answer)."""

    def __init__(
        self,
        model: str | None,
        limit: Decimal | None,
        prices: Mapping[str, Any] | None,
        on_answer: Callable[[], None] | None = None,
    ) -> None:
        self._live = LiveUsage()
        self._model, self.limit, self._prices = model, limit, prices
        self._over = False
        self._on_answer = on_answer

    def feed(self, line: str) -> None:
        self._live.feed(line)
        if self._on_answer is not None and self.usage is not None and self.usage.total_tokens:
            # Tokens are billed only for an answer: a refusal reports none.
            told, self._on_answer = self._on_answer, None
            told()
        if self.limit is not None and not self._over and self.usage is not None:
            spent = price(_named(self.usage, self._model), overrides=self._prices).cost_usd
            self._over = spent is not None and spent >= self.limit

    @property
    def verdict(self) -> RetryVerdict | None:
        return self._live.verdict

    def stopped(self) -> bool:
        return self._over or self.verdict is not None

    @property
    def usage(self) -> Usage | None:
        return self._live.usage

    def over(self) -> bool:
        return self._over


def _named(usage: Usage | None, model: str | None) -> Usage:
    # Codex and OpenCode name no model in their events: the chosen one is what was billed.
    usage = usage or Usage()
    return usage if usage.model or not model else replace(usage, model=model)
