"""Agent definitions, running an agent in a sandbox, and the deterministic script agent."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tasks.agents.definitions import (
    AgentConfigError,
    AgentSpec,
    egress_of,
    load_agents,
    parse_agent,
    render_argv,
    run_agent,
)
from tasks.agents.script_agent import ScriptError, read_script, run_stage

SECRETS = {
    "GITHUB_TOKEN": "ghs_leak",
    "WEBHOOK_SECRET": "hook_leak",
    "DATABASE_URL": "postgresql://leak",
    "PRIVATE_KEY": "key_leak",
}
SOURCE_ENV = {"PATH": os.environ["PATH"], "SCRIPT_KEY": "sk-ok", **SECRETS}


def issue_prompt(title: str, body: str = "", feedback: str | None = None) -> str:
    parts = [
        "# Program",
        f"<issue-title>{title}</issue-title>",
        f"<issue-body>\n{body}\n</issue-body>",
    ]
    if feedback:
        parts.append(f"<feedback>\n{feedback}\n</feedback>")
    return "\n\n".join(parts) + "\n"


def script_block(yaml_text: str) -> str:
    return f"Please do this:\n\n```gaffer-script\n{yaml_text}\n```\n"


@pytest.fixture
def agents():
    return load_agents()


def run(spec: AgentSpec, tmp_path: Path, prompt: str, stage: str = "execute", **kw):
    workdir = tmp_path / "worktree"
    workdir.mkdir(parents=True, exist_ok=True)
    kw.setdefault("timeout_s", 30)
    kw.setdefault("idle_timeout_s", None)
    kw.setdefault("source_env", SOURCE_ENV)
    return run_agent(
        spec,
        stage=stage,
        prompt=prompt,
        workdir=workdir,
        job_dir=tmp_path / "job",
        model=None,
        **kw,
    )


def test_shipped_agents_load(agents):
    assert {"claude", "codex", "gemini", "aider", "opencode", "script", "text"} <= set(agents)
    assert agents["claude"].output == "claude-json"


@pytest.mark.parametrize(
    "stage, mode",
    [
        pytest.param("plan", "plan", id="plan reads only"),
        pytest.param("revise", "plan", id="revise reads only"),
        pytest.param("execute", "bypassPermissions", id="execute may edit and run commands"),
        pytest.param("fix", "bypassPermissions", id="fix may edit and run commands"),
    ],
)
def test_claude_permission_mode_follows_the_stage(agents, stage, mode):
    argv = render_argv(agents["claude"], stage, {"prompt": "hi", "model": ""})
    assert argv[:2] == ["claude", "-p"] and "hi" not in argv  # the prompt goes on stdin
    assert agents["claude"].prompt_on_stdin
    assert argv[argv.index("--permission-mode") + 1] == mode
    assert "--model" not in argv


def test_model_args_added_only_with_a_model(agents):
    argv = render_argv(agents["codex"], "plan", {"prompt": "p", "workdir": "/w", "model": "o3"})
    assert argv[-2:] == ["-m", "o3"]
    assert argv[argv.index("--sandbox") + 1] == "read-only"


def test_settings_add_and_replace_agents():
    extra = {
        "mine": {"command": ["my-agent", "{prompt_file}"]},
        "script": {"command": ["echo", "replaced"]},
    }
    agents = load_agents(extra)
    assert agents["mine"].command == ("my-agent", "{prompt_file}")
    assert agents["mine"].output == "text"
    assert agents["script"].command == ("echo", "replaced")


def test_a_settings_entry_without_a_command_changes_only_the_keys_it_gives():
    change = {
        "base_url": "https://models.internal",
        "memory_mb": 512,
        "set_env": {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "8000"},
    }
    claude = load_agents({"claude": change})["claude"]
    shipped = load_agents()["claude"]
    assert claude.base_url == "https://models.internal"
    assert claude.memory_mb == 512
    assert claude.command == shipped.command
    # Added to the shipped settings (telemetry stays off), not put in their place.
    assert dict(claude.set_env) == {
        **dict(shipped.set_env),
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "8000",
    }


def test_the_base_url_reaches_the_cli_by_its_own_variable_and_arguments(tmp_path):
    definition = {
        "command": [
            "{python}",
            "-c",
            "import os, sys; print(os.environ['MODEL_URL'], sys.argv[1:])",
        ],
        "env": ["MODEL_URL"],
        "base_url_env": "MODEL_URL",
        "env_args": {"MODEL_URL": ["-c", 'url="{value}"']},
        "base_url": "http://models.internal:8080/v1",
    }
    spec = parse_agent("cli", definition)
    # The setting wins over the worker's own variable.
    source = {"PATH": os.environ["PATH"], "MODEL_URL": "https://elsewhere"}
    told = run(spec, tmp_path, "hi", source_env=source)
    url = "http://models.internal:8080/v1"
    assert told.text.strip() == f"""{url} ['-c', 'url="{url}"']"""
    assert "models.internal:8080" in egress_of(spec, {})


@pytest.mark.parametrize(
    "definition, message",
    [
        pytest.param({"output": "text"}, "`command` is required", id="no command"),
        pytest.param(
            {"command": ["x"], "base_url": "models.internal", "base_url_env": "U", "env": ["U"]},
            "`base_url` must be an http or https URL",
            id="base_url not a URL",
        ),
        pytest.param(
            {"command": ["x"], "base_url": "http://m"},
            "`base_url` needs `base_url_env`",
            id="base_url told no way",
        ),
        pytest.param(
            {"command": ["x"], "base_url_env": "U"},
            "`base_url_env` names U, not in `env`",
            id="base_url_env not shown",
        ),
        pytest.param({"command": []}, "must not be empty", id="empty command"),
        pytest.param({"command": "claude -p"}, "list of strings", id="command as a string"),
        pytest.param({"command": ["x", "{promt}"]}, "unknown placeholder {promt}", id="typo"),
        pytest.param({"command": ["x"], "output": "xml"}, "unknown output 'xml'", id="output"),
        pytest.param({"command": ["x"], "comand": []}, "unknown key 'comand'", id="key typo"),
        pytest.param({"command": ["x"], "env": ["GITHUB_TOKEN"]}, "gaffer secret", id="secret"),
        pytest.param(["x"], "must be a mapping", id="not a mapping"),
    ],
)
def test_invalid_definitions_say_what_is_wrong(definition, message):
    with pytest.raises(AgentConfigError, match="agent 'bad'") as caught:
        parse_agent("bad", definition)
    assert message in str(caught.value)


def test_text_agent_result_is_its_output(tmp_path):
    spec = parse_agent("echo", {"command": ["cat", "{prompt_file}"]})
    result = run(spec, tmp_path, "the answer\n")
    assert result.ok and result.error is None
    assert result.text == "the answer\n"
    assert (tmp_path / "job" / "prompt.md").read_text() == "the answer\n"
    assert "the answer" in (tmp_path / "job" / "agent.log").read_text()


def test_missing_executable_is_a_clear_error(tmp_path):
    spec = parse_agent("claude", {"command": ["claude-not-here", "-p", "{prompt}"]})
    result = run(spec, tmp_path, "hi")
    assert not result.ok
    assert result.error == (
        "agent 'claude' is not installed on this worker (looked for `claude-not-here` on PATH)"
    )


def test_failing_agent_reports_exit_code_and_output(tmp_path):
    spec = parse_agent("sh", {"command": ["sh", "-c", "echo broken >&2; exit 4"]})
    result = run(spec, tmp_path, "hi")
    assert not result.ok
    assert result.error == "agent 'sh' exited with code 4: broken"


def test_timed_out_agent_says_so(tmp_path):
    spec = parse_agent("slow", {"command": ["sleep", "30"]})
    result = run(spec, tmp_path, "hi", timeout_s=0.5)
    assert not result.ok and result.run.timed_out
    assert result.error == "agent 'slow' timed out after 0.5 s"


def test_agent_env_has_stage_and_its_key_but_no_secrets(tmp_path):
    spec = parse_agent("env", {"command": ["env"], "env": ["SCRIPT_KEY"]})
    result = run(spec, tmp_path, "hi", stage="plan")
    env = dict(line.split("=", 1) for line in result.text.splitlines())
    assert env["GAFFER_STAGE"] == "plan"
    assert env["SCRIPT_KEY"] == "sk-ok"
    assert env["HOME"] == str(tmp_path / "job" / "home")
    for name, value in SECRETS.items():
        assert name not in env and value not in result.text


def test_issue_asking_to_print_the_environment_leaks_nothing(agents, tmp_path):
    prompt = issue_prompt("Print env", script_block("- print_env: true"))
    result = run(agents["script"], tmp_path, prompt)
    assert result.ok, result.error
    assert "GAFFER_STAGE=execute" in result.run.output
    for value in SECRETS.values():
        assert value not in result.run.output


def test_script_agent_plan_names_the_issue(agents, tmp_path):
    body = script_block('execute:\n  - write: {path: src/hello.py, content: "print(1)\\n"}')
    result = run(agents["script"], tmp_path, issue_prompt("Add a greeting", body), stage="plan")
    assert result.ok, result.error
    assert result.text.startswith("## Plan: Add a greeting")
    assert "`src/hello.py`" in result.text
    assert not (tmp_path / "worktree" / "src").exists()


def test_script_agent_revision_quotes_the_feedback(agents, tmp_path):
    prompt = issue_prompt("Add a greeting", feedback="Use French please")
    result = run(agents["script"], tmp_path, prompt, stage="revise")
    assert "Revised after feedback: “Use French please”" in result.text


def test_script_agent_applies_execute_steps(agents, tmp_path):
    (tmp_path / "worktree").mkdir()
    (tmp_path / "worktree" / "old.txt").write_text("x")
    steps = (
        '- write: {path: pkg/a.py, content: "A = 1\\n"}\n'
        '- append: {path: pkg/a.py, content: "B = 2\\n"}\n'
        "- delete: old.txt\n"
        "- sleep: 0.1"
    )
    result = run(agents["script"], tmp_path, issue_prompt("Steps", script_block(steps)))
    assert result.ok, result.error
    assert (tmp_path / "worktree" / "pkg" / "a.py").read_text() == "A = 1\nB = 2\n"
    assert not (tmp_path / "worktree" / "old.txt").exists()
    assert "Applied 4 step(s) for execute" in result.text


def test_script_agent_uses_the_fix_section_for_fix(agents, tmp_path):
    steps = (
        "execute:\n  - write: {path: a.txt, content: one}\n"
        "fix:\n  - write: {path: a.txt, content: two}"
    )
    run(agents["script"], tmp_path, issue_prompt("Fix", script_block(steps)), stage="fix")
    assert (tmp_path / "worktree" / "a.txt").read_text() == "two"


def test_script_agent_without_steps_leaves_a_change_note(agents, tmp_path):
    result = run(agents["script"], tmp_path, issue_prompt("Tidy up"))
    assert result.ok
    assert "Tidy up" in (tmp_path / "worktree" / "GAFFER_CHANGES.md").read_text()


def test_script_agent_fail_step_fails_the_run(agents, tmp_path):
    result = run(agents["script"], tmp_path, issue_prompt("F", script_block('- fail: "no way"')))
    assert not result.ok
    assert result.error == "agent 'script' exited with code 1: no way"


def test_script_agent_sleep_hits_the_idle_timeout(agents, tmp_path):
    prompt = issue_prompt("Slow", script_block("- sleep: 30"))
    result = run(agents["script"], tmp_path, prompt, idle_timeout_s=1)
    assert result.run.idle_timed_out and not result.ok


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param("- write: {path: ../escape.txt, content: x}", id="parent directory"),
        pytest.param("- write: {path: /tmp/abs.txt, content: x}", id="absolute path"),
        pytest.param("- explode: true", id="unknown step"),
        pytest.param("- write: [1, 2]", id="bad argument"),
    ],
)
def test_script_agent_refuses_bad_steps(tmp_path, steps):
    with pytest.raises(ScriptError):
        run_stage("execute", script_block(steps), tmp_path)
    assert not (tmp_path.parent / "escape.txt").exists()


def test_bare_list_means_execute():
    assert read_script(script_block("- sleep: 1")) == {"execute": [{"sleep": 1}]}


def test_script_agent_runs_with_the_worktree_off_sys_path(agents, tmp_path):
    # A repository with its own `tasks` package must not replace gaffer's script agent.
    fake = tmp_path / "worktree" / "tasks"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "script_agent.py").write_text("print('impostor')")
    result = run(agents["script"], tmp_path, issue_prompt("Real"), stage="plan")
    assert "impostor" not in result.text and "Real" in result.text
    assert sys.executable in render_argv(
        agents["script"], "plan", {"python": sys.executable, "prompt_file": "p"}
    )


@pytest.mark.parametrize(
    ("definition", "error"),
    [
        pytest.param(
            {"stdin": "yes"}, "`stdin` can only be `prompt`", id="stdin other than prompt"
        ),
        pytest.param({"set_env": ["A=1"]}, "`set_env` must map names", id="set_env as a list"),
        pytest.param(
            {"set_env": {"WEBHOOK_SECRET": "x"}}, "a gaffer secret", id="set_env naming a secret"
        ),
        pytest.param(
            {"home_files": {"../escape": "x"}}, "must stay inside the home", id="home file outside"
        ),
        pytest.param(
            {"home_files": {"/etc/x": "x"}}, "must stay inside the home", id="home file absolute"
        ),
    ],
)
def test_bad_stdin_and_set_env_are_refused(definition, error):
    with pytest.raises(AgentConfigError, match=error):
        parse_agent("mine", {"command": ["my-agent"], **definition})


def test_an_agent_given_its_prompt_on_stdin_reads_all_of_it(tmp_path):
    spec = parse_agent(
        "reader",
        {
            "command": [
                "{python}",
                "-c",
                "import sys; d = sys.stdin.read(); print(len(d), d[-3:])",
            ],
            "stdin": "prompt",
            "set_env": {"TELEMETRY": "off"},
        },
    )
    result = run(spec, tmp_path, "x" * 300_000 + "END")
    assert result.ok, result.error
    assert result.text.split() == ["300003", "END"]


def test_a_prompt_too_long_for_one_argument_is_refused_before_the_agent_starts(tmp_path):
    spec = parse_agent("argv", {"command": ["{python}", "-c", "pass", "{prompt}"]})
    result = run(spec, tmp_path, "x" * 200_000)
    assert not result.ok
    assert result.error is not None and "past Linux's 128 KiB limit" in result.error


def test_a_failed_exit_is_explained_by_what_the_agents_output_says(tmp_path):
    # Claude Code exits 1 after printing a result object that names the failure.
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "agents" / "claude-api-429.json"
    spec = parse_agent(
        "claude-ish",
        {
            "command": ["{python}", "-c", f"print(open({str(fixture)!r}).read()); exit(1)"],
            "output": "claude-json",
        },
    )
    result = run(spec, tmp_path, "hi")
    assert result.error is not None
    assert result.error.startswith("agent 'claude-ish' exited with code 1: Claude Code's API")
    assert '"type"' not in result.error  # no raw JSON


def test_env_args_tell_a_cli_what_it_would_not_read_from_its_environment(tmp_path):
    definition = {
        "command": ["{python}", "-c", "import sys; print(sys.argv[1:])"],
        "env": ["MODEL_URL"],
        "env_args": {"MODEL_URL": ["-c", 'base_url="{value}"']},
    }
    spec = parse_agent("cli", definition)
    told = run(spec, tmp_path, "hi", source_env={"PATH": os.environ["PATH"], "MODEL_URL": "u"})
    assert told.text.strip() == """['-c', 'base_url="u"']"""
    untold = run(spec, tmp_path / "again", "hi", source_env={"PATH": os.environ["PATH"]})
    assert untold.text.strip() == "[]"
    with pytest.raises(AgentConfigError, match="`env_args` names OTHER, not in `env`"):
        parse_agent("cli", {**definition, "env_args": {"OTHER": ["-x"]}})
