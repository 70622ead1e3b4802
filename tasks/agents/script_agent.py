"""A deterministic local agent for tests and the demo.

Run as `python -m tasks.agents.script_agent PROMPT_FILE`.

The stage comes from GAFFER_STAGE. The prompt is searched for the first fenced block
labelled `gaffer-script` (normally written in the issue body), holding YAML:

    ```gaffer-script
    execute:                      # steps for the execute stage
      - write: {path: hello.py, content: "print('hi')\\n"}
      - append: {path: README.md, content: "more\\n"}
      - delete: old.txt
      - sleep: 2                  # seconds
      - print: some text          # printed to stdout
      - print_env: true           # prints NAME=VALUE for the whole environment
      - fail: "why"               # prints why on stderr and exits 1
      - when:                     # steps chosen by what the prompt says
          prompt_has: "some words"  # or env_is: NAME=value (the agent's environment)
          then: [{print: told}]
          else: [{print: not told}]
    fix:                          # steps for the fix stage (after failed checks)
      - write: {path: hello.py, content: "print('fixed')\\n"}
    plan:                         # steps run before the plan is printed (e.g. sleep, fail)
      - sleep: 1
    scope: [src/*.py, README.md]  # the plan's Scope section (none without this key)
    parts:                        # the plan's Parts section, for /split (none without it)
      - {title: Add the model}
      - {title: Serve it, after: [1], body: "The API."}
    ```

A bare list of steps means `execute:`. Paths are relative to the worktree (the cwd) and may
not leave it.

- plan / revise: run that stage's steps, then print a markdown plan naming the issue title
  (from `<issue-title>...</issue-title>`), the files the execute steps touch, and for revise
  the feedback (from `<feedback>...</feedback>`).
- execute / fix: run that stage's steps; without any, write GAFFER_CHANGES.md (execute) or
  append a line to it (fix) so the stage always leaves a diff.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

BLOCK = re.compile(r"^```gaffer-script[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
TITLE = re.compile(r"<issue-title>(.*?)</issue-title>", re.DOTALL)
FEEDBACK = re.compile(r"<feedback>(.*?)</feedback>", re.DOTALL)
CHANGES_FILE = "GAFFER_CHANGES.md"


class ScriptError(Exception):
    """The gaffer-script block is malformed or a step cannot be applied."""


def read_script(prompt: str) -> dict[str, list[Any]]:
    """Return the steps per stage from the prompt's gaffer-script block (empty without one)."""
    match = BLOCK.search(prompt)
    if match is None:
        return {}
    try:
        loaded = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise ScriptError(f"gaffer-script block is not valid YAML: {exc}") from exc
    if isinstance(loaded, list):
        loaded = {"execute": loaded}
    if not isinstance(loaded, dict) or not all(isinstance(v, list) for v in loaded.values()):
        raise ScriptError("gaffer-script block must be a list of steps or stage: [steps]")
    return loaded


def _tag(pattern: re.Pattern[str], prompt: str, default: str) -> str:
    match = pattern.search(prompt)
    return " ".join(match.group(1).split()) if match else default


def _inside(cwd: Path, rel: str) -> Path:
    """Resolve a step's path, refusing one that leaves the worktree."""
    target = (cwd / rel).resolve()
    if not target.is_relative_to(cwd.resolve()) or target == cwd.resolve():
        raise ScriptError(f"path {rel!r} is outside the worktree")
    return target


def _write(cwd: Path, arg: Mapping[str, str], mode: str) -> str:
    target = _inside(cwd, str(arg["path"]))
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, mode, encoding="utf-8") as handle:
        handle.write(str(arg.get("content", "")))
    return f"{'wrote' if mode == 'w' else 'appended to'} {arg['path']}"


def _delete(cwd: Path, rel: str) -> str:
    _inside(cwd, rel).unlink()
    return f"deleted {rel}"


def _sleep(_: Path, seconds: float) -> str:
    time.sleep(float(seconds))
    return f"slept {seconds} s"


def _print(_: Path, text: str) -> str:
    print(text, flush=True)
    return "printed text"


def _print_env(_: Path, enabled: bool) -> str:
    for name in sorted(os.environ) if enabled else []:
        print(f"{name}={os.environ[name]}", flush=True)
    return "printed the environment"


def _fail(_: Path, message: str) -> str:
    print(message, file=sys.stderr, flush=True)
    raise SystemExit(1)


STEPS: dict[str, Callable[[Path, Any], str]] = {
    "write": lambda cwd, arg: _write(cwd, arg, "w"),
    "append": lambda cwd, arg: _write(cwd, arg, "a"),
    "delete": _delete,
    "sleep": _sleep,
    "print": _print,
    "print_env": _print_env,
    "fail": _fail,
}


def apply_step(cwd: Path, step: Any) -> str:
    """Apply one `- kind: argument` step in cwd and describe it."""
    if not isinstance(step, dict) or len(step) != 1:
        raise ScriptError(f"a step is one `kind: argument` pair, got {step!r}")
    ((kind, arg),) = step.items()
    if kind not in STEPS:
        raise ScriptError(f"unknown step {kind!r} (known: {', '.join(STEPS)})")
    try:
        return STEPS[kind](cwd, arg)
    except (KeyError, TypeError, ValueError, OSError) as exc:
        raise ScriptError(f"step {kind} failed: {exc!r}") from exc


def chosen(steps: list[Any], prompt: str) -> list[Any]:
    """Replace each `when:` step by the steps its condition on the prompt picks."""
    picked: list[Any] = []
    for step in steps:
        if not (isinstance(step, dict) and set(step) == {"when"}):
            picked.append(step)
            continue
        branch = (
            step["when"].get("then") if _holds(step["when"], prompt) else step["when"].get("else")
        )
        picked += chosen(list(branch or []), prompt)
    return picked


def _holds(when: Any, prompt: str) -> bool:
    """A `when`'s condition: `prompt_has: text`, or `env_is: NAME=value` (an agent
    definition's `set_env` tells two agents running one script apart)."""
    if isinstance(when, dict) and isinstance(when.get("prompt_has"), str):
        return when["prompt_has"] in prompt
    if isinstance(when, dict) and isinstance(when.get("env_is"), str):
        name, _, value = when["env_is"].partition("=")
        return os.environ.get(name) == value
    raise ScriptError("a `when` step needs `prompt_has: text` or `env_is: NAME=value`, `then:`")


def _step_paths(step: Any) -> list[str]:
    """Return the paths a step touches (either branch of a `when`)."""
    if not isinstance(step, dict) or len(step) != 1:
        return []
    ((kind, arg),) = step.items()
    if kind == "when" and isinstance(arg, dict):
        branches = [*(arg.get("then") or []), *(arg.get("else") or [])]
        return [path for each in branches for path in _step_paths(each)]
    if isinstance(arg, dict):
        return [str(arg["path"])] if arg.get("path") else []
    return [str(arg)] if kind == "delete" else []


def planned_files(steps: list[Any]) -> list[str]:
    """Return the paths the steps touch, in order, once each."""
    paths = [path for step in steps for path in _step_paths(step)]
    return list(dict.fromkeys(paths))


def render_plan(prompt: str, script: Mapping[str, list[Any]], stage: str) -> str:
    """Return the markdown plan for the issue in the prompt."""
    title = _tag(TITLE, prompt, "the issue")
    files = planned_files(script.get("execute", [])) or [CHANGES_FILE]
    lines = [f"## Plan: {title}", ""]
    if stage == "revise":
        lines += [f"Revised after feedback: “{_tag(FEEDBACK, prompt, 'none given')}”", ""]
    lines += [
        f"1. Read the code related to “{title}”.",
        f"2. Change {', '.join(f'`{f}`' for f in files)}.",
        "3. Run the repository's checks and fix what fails.",
    ]
    if script.get("scope"):
        lines += ["", "**Scope**", *(f"- `{path}`" for path in script["scope"])]
    if script.get("parts"):
        lines += ["", "**Parts**"]
        for number, part in enumerate(script["parts"], 1):
            after = part.get("after") or []
            ending = f" (after {', '.join(str(n) for n in after)})" if after else ""
            lines.append(f"{number}. {part['title']}{ending}")
            lines += [f"   {line}" for line in str(part.get("body", "")).splitlines()]
    return "\n".join(lines)


def run_stage(stage: str, prompt: str, cwd: Path) -> str:
    """Run one stage and return what to print as the answer."""
    script = read_script(prompt)
    # A `when` reads the prompt without the script itself, which names what it looks for.
    steps = chosen(script.get(stage, []), BLOCK.sub("", prompt))
    done = [apply_step(cwd, step) for step in steps]
    if stage in ("plan", "revise"):
        return render_plan(prompt, script, stage)
    if not done:
        done.append(_note_changes(cwd, stage, prompt))
    return f"Applied {len(done)} step(s) for {stage}:\n" + "\n".join(f"- {d}" for d in done)


def _note_changes(cwd: Path, stage: str, prompt: str) -> str:
    """Leave a diff when the issue gave no steps for this stage."""
    line = f"- {stage}: {_tag(TITLE, prompt, 'the issue')}\n"
    if stage == "execute":
        return _write(cwd, {"path": CHANGES_FILE, "content": "# Changes by gaffer\n\n" + line}, "w")
    return _write(cwd, {"path": CHANGES_FILE, "content": line}, "a")


def main(argv: list[str]) -> int:
    """Read the prompt file named in argv, run GAFFER_STAGE, print the answer."""
    if len(argv) != 1:
        print("usage: python -m tasks.agents.script_agent PROMPT_FILE", file=sys.stderr)
        return 2
    stage = os.environ.get("GAFFER_STAGE", "execute")
    prompt = Path(argv[0]).read_text(encoding="utf-8")
    try:
        print(run_stage(stage, prompt, Path.cwd()), flush=True)
    except ScriptError as exc:
        print(f"script agent: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
