"""Turn a check command's result into the payload of a GitHub check run, within GitHub's limits."""

from __future__ import annotations

import hashlib
import re
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

# GitHub documents 65,535 *characters* but enforces bytes ("exceeds a maximum bytesize of
# 65535", github/docs#35252), so every limit below is measured in UTF-8 bytes.
MAX_OUTPUT_BYTES = 65_535
MAX_TITLE_CHARS = 255
# The API declares no limit on names; GitHub Actions cuts check names at 100 characters and
# branch protection matches names exactly, so gaffer never sends a longer one.
MAX_NAME_CHARS = 100
MAX_EXTERNAL_ID_CHARS = 80
MAX_ANNOTATIONS_PER_REQUEST = 50
MAX_ANNOTATION_MESSAGE_BYTES = 64 * 1024 - 1
NAME_PREFIX = "gaffer/"
# Room kept in `text` for the note about cutting and the code fences around the output.
TEXT_RESERVE_BYTES = 300
LONGEST_BACKTICK_RUN = 16

Conclusion = Literal["success", "failure", "neutral", "timed_out"]

_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks
    r"|\x1b[@-Z\\-_]"  # other two-character escapes
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_BACKTICK_RUN = re.compile(f"`{{{LONGEST_BACKTICK_RUN + 1},}}")
_LOCATION = re.compile(r"^(?P<path>[^\s:]+):(?P<line>\d+):(?:(?P<col>\d+):)?\s+(?P<rest>\S.*)$")
_MYPY = re.compile(
    r"^(?P<level>error|warning|note):\s*(?P<message>.+?)(?:\s+\[(?P<code>[\w-]+)\])?$"
)
_RUFF = re.compile(r"^(?P<code>[A-Z]+[0-9]+)\s+(?:\[\*\]\s+)?(?P<message>.+)$")
_PYTEST = re.compile(
    r"^(?P<code>[A-Za-z_][\w.]*(?:Error|Exception|Failed|Warning))\b:?\s*(?P<message>.*)$"
)
_MYPY_LEVELS = {"error": "failure", "warning": "warning", "note": "notice"}


@dataclass(frozen=True)
class CheckOutput:
    """The `conclusion` and `output` of one completed check run."""

    conclusion: Conclusion
    title: str
    summary: str
    text: str

    def as_output(self) -> dict[str, str]:
        """Return the `output` object of the check-runs API."""
        return {"title": self.title, "summary": self.summary, "text": self.text}


def check_output(
    name: str,
    *,
    returncode: int | None,
    timed_out: bool,
    output: str | bytes,
    duration_s: float,
    cost_line: str | None = None,
    output_limited: bool = False,
) -> CheckOutput:
    """Describe one check command's result as a check run's conclusion and output."""
    conclusion = _conclusion(returncode, timed_out)
    cleaned = clean_output(output)
    if output_limited:  # gaffer stopped it: say so, not which signal did
        outcome = "was stopped: it printed more output than allowed"
    else:
        outcome = _outcome(returncode, timed_out, duration_s)
    title = fit_title(f"{_one_line(name)} {outcome}")
    text, shown_lines = _output_text(cleaned)
    summary = _summary(_one_line(name), outcome, cleaned, shown_lines, cost_line)
    return CheckOutput(conclusion, title, fit_head(summary), text)


def check_run_name(name: str) -> str:
    """Return the check run's name, `gaffer/<name>`, on one line and at most 100 characters."""
    clean = _one_line(name)
    if not clean:
        raise ValueError("a check needs a name")
    return NAME_PREFIX + _shorten(clean, MAX_NAME_CHARS - len(NAME_PREFIX))


def external_id(plan_id: int, name: str, head_sha: str) -> str:
    """Return a short id, stable across retries, for one check of one plan on one commit."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "check"
    if slug != name:
        slug = f"{slug[:24]}-{_digest(name)}"
    return f"gaffer-{plan_id}-{_shorten(slug, 40)}-{head_sha[:12]}"


def clean_output(output: str | bytes) -> str:
    """Return output as a terminal would show it: valid UTF-8, no escape codes, no controls."""
    text = _valid_unicode(output)
    text = _ANSI.sub("", text).replace("\r\n", "\n")
    text = "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))
    return _CONTROL.sub("", text)


def fit_head(text: str, limit: int = MAX_OUTPUT_BYTES) -> str:
    """Return text, or its head with a note, within limit UTF-8 bytes."""
    text = _valid_unicode(text)
    if _size(text) <= limit:
        return text
    note = "\n\n… cut to fit GitHub's limit."
    head = text.encode()[: limit - _size(note)].decode("utf-8", errors="ignore")
    return head + note


def fit_title(title: str) -> str:
    """Return title on one line and within GitHub's 255 characters."""
    title = _one_line(title)
    return title if len(title) <= MAX_TITLE_CHARS else title[: MAX_TITLE_CHARS - 1] + "…"


def annotations_from_output(
    output: str | bytes, worktree_prefix: str | PurePosixPath, *, limit: int = 200
) -> list[dict[str, Any]]:
    """Return annotations for pytest, ruff and mypy lines that point into the worktree."""
    found: list[dict[str, Any]] = []
    for line in clean_output(output).splitlines():
        annotation = _annotation(line.strip(), str(worktree_prefix))
        if annotation is not None and annotation not in found:
            found.append(annotation)
        if len(found) >= limit:
            break
    return found


def batches(
    annotations: Sequence[dict[str, Any]], size: int = MAX_ANNOTATIONS_PER_REQUEST
) -> Iterator[list[dict[str, Any]]]:
    """Yield annotations in groups of at most `size` (GitHub takes 50 per request)."""
    if not 1 <= size <= MAX_ANNOTATIONS_PER_REQUEST:
        raise ValueError(f"batch size must be 1..{MAX_ANNOTATIONS_PER_REQUEST}, not {size}")
    for start in range(0, len(annotations), size):
        yield list(annotations[start : start + size])


def _conclusion(returncode: int | None, timed_out: bool) -> Conclusion:
    if timed_out:
        return "timed_out"
    return "success" if returncode == 0 else "failure"


def _outcome(returncode: int | None, timed_out: bool, duration_s: float) -> str:
    """Say what happened in a few words: `passed in 3.2 s`, `failed (exit 1)`."""
    if timed_out:
        return f"timed out after {_seconds(duration_s)}"
    if returncode == 0:
        return f"passed in {_seconds(duration_s)}"
    if returncode is None:
        return "did not finish"
    if returncode < 0:
        return f"failed (killed by {_signal_name(-returncode)})"
    return f"failed (exit {returncode})"


def _summary(name: str, outcome: str, cleaned: str, shown_lines: int, cost_line: str | None) -> str:
    total = len(cleaned.splitlines())
    lines = [f"`{NAME_PREFIX}{name}` {outcome}."]
    if total == 0:
        lines.append("The command printed nothing.")
    elif shown_lines < total:
        lines.append(f"The output has {total:,} lines; the last {shown_lines:,} are shown below.")
    else:
        lines.append(f"The output ({total:,} {'line' if total == 1 else 'lines'}) is shown below.")
    if cost_line:
        lines.append(_valid_unicode(cost_line))
    return "\n\n".join(lines)


def _output_text(cleaned: str) -> tuple[str, int]:
    """Return the tail of the output in a code fence, and how many lines it holds."""
    if not cleaned.strip():
        return "The command printed nothing.", 0
    body = _BACKTICK_RUN.sub("`" * LONGEST_BACKTICK_RUN, cleaned.rstrip("\n"))
    tail = _tail(body, MAX_OUTPUT_BYTES - TEXT_RESERVE_BYTES)
    fence = "`" * max(3, _longest_backtick_run(tail) + 1)
    shown = len(tail.splitlines())
    note = "" if tail == body else f"Output cut: the last {shown:,} lines follow.\n\n"
    return f"{note}{fence}text\n{tail}\n{fence}", shown


def _tail(text: str, limit: int) -> str:
    """Return the end of text within limit bytes, starting at a line boundary when cut."""
    if _size(text) <= limit:
        return text
    tail = text.encode()[-limit:].decode("utf-8", errors="ignore")
    first_break = tail.find("\n")
    return tail[first_break + 1 :] if 0 <= first_break < len(tail) - 1 else tail


def _annotation(line: str, prefix: str) -> dict[str, Any] | None:
    match = _LOCATION.match(line)
    if match is None:
        return None
    path = _relative_path(match["path"], prefix)
    parsed = _classify(match["rest"])
    if path is None or parsed is None:
        return None
    level, title, message = parsed
    row = int(match["line"])
    annotation: dict[str, Any] = {
        "path": path,
        "start_line": row,
        "end_line": row,
        "annotation_level": level,
        "message": fit_head(message, MAX_ANNOTATION_MESSAGE_BYTES),
        "title": fit_title(title),
    }
    if match["col"]:
        annotation["start_column"] = annotation["end_column"] = int(match["col"])
    return annotation


def _classify(rest: str) -> tuple[str, str, str] | None:
    """Return (level, title, message) for a mypy, ruff or pytest message, else None."""
    if mypy := _MYPY.match(rest):
        code = f" [{mypy['code']}]" if mypy["code"] else ""
        return _MYPY_LEVELS[mypy["level"]], f"mypy {mypy['level']}{code}", mypy["message"]
    if ruff := _RUFF.match(rest):
        return "failure", f"ruff {ruff['code']}", ruff["message"]
    if pytest := _PYTEST.match(rest):
        level = "warning" if pytest["code"].endswith("Warning") else "failure"
        return level, pytest["code"], pytest["message"] or pytest["code"]
    return None


def _relative_path(raw: str, prefix: str) -> str | None:
    """Return raw relative to the worktree, or None when it points outside it."""
    path = raw.strip()
    base = prefix.rstrip("/") + "/"
    if path.startswith(base):
        path = path[len(base) :]
    elif path.startswith("/"):
        return None
    parts = PurePosixPath(path.removeprefix("./")).parts
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def _valid_unicode(output: str | bytes) -> str:
    if isinstance(output, bytes):
        return output.decode("utf-8", errors="replace")
    # Lone surrogates (from surrogateescape decoding) become U+FFFD instead of failing later.
    return output.encode("utf-8", errors="surrogatepass").decode("utf-8", errors="replace")


def _one_line(text: str) -> str:
    return " ".join(_CONTROL.sub(" ", clean_output(text)).split())


def _shorten(text: str, limit: int) -> str:
    """Return text, or a prefix of it made unique by a digest, within limit characters."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 9]}-{_digest(text)}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()[:8]


def _seconds(duration_s: float) -> str:
    return f"{duration_s:.1f} s" if duration_s < 10 else f"{duration_s:.0f} s"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


def _size(text: str) -> int:
    return len(text.encode())
