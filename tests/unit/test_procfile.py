"""The Procfile: a release step that migrates, the web on the platform's $PORT."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

PROCFILE = Path(__file__).resolve().parents[2] / "deploy" / "Procfile"


def processes() -> dict[str, str]:
    lines = [line for line in PROCFILE.read_text().splitlines() if line and line[0] != "#"]
    return dict(line.split(": ", 1) for line in lines)


def test_a_release_migrates_before_the_processes_start() -> None:
    assert processes()["release"] == "gaffer db upgrade"
    assert set(processes()) == {"release", "web", "scheduler", "github", "agent"}


def test_the_web_listens_on_the_platforms_port() -> None:
    shown = processes()["web"].replace("gaffer web", "printenv GAFFER_PORT")
    env = {key: value for key, value in os.environ.items() if key != "GAFFER_PORT"}
    port = subprocess.run(["sh", "-c", shown], env={**env, "PORT": "5123"}, capture_output=True)
    assert port.stdout.decode().strip() == "5123"
    default = subprocess.run(["sh", "-c", shown], env=env, capture_output=True)
    assert default.stdout.decode().strip() == "8000"
