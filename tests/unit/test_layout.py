"""The house plan, drawn from the import graph: what may import what.

`bot/` is the web side and the shared core, `tasks/` the workers, which use `bot/`;
`double/` is the GitHub double and the demo, which use both. The product never imports
the double or the tests, `bot/` never imports `tasks/`, and no modules import each other
in a circle (type-only imports included: they are a circle to a reader too).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bot", "tasks", "double")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(path: Path) -> Iterator[str]:
    """Every module named by an import anywhere in the file, deferred ones too."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def graph() -> dict[str, set[str]]:
    known = modules()
    edges: dict[str, set[str]] = {}
    for name, path in known.items():
        targets = {
            target for target in imports_of(path) if target.split(".")[0] in (*PACKAGES, "tests")
        }
        edges[name] = {t for t in targets if t in known or t.split(".")[0] == "tests"} - {name}
    return edges


def offending(rule) -> list[str]:
    return sorted(
        f"{a} imports {b}" for a, targets in graph().items() for b in targets if rule(a, b)
    )


def top(name: str) -> str:
    return name.split(".")[0]


def test_the_product_never_imports_the_double_or_the_tests() -> None:
    assert (
        offending(lambda a, b: top(a) in ("bot", "tasks") and top(b) in ("double", "tests")) == []
    )


def test_the_web_side_never_imports_the_workers() -> None:
    assert offending(lambda a, b: top(a) == "bot" and top(b) == "tasks") == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    edges = graph()
    circles: list[list[str]] = []

    def visit(node: str, path: list[str], on_path: set[str], done: set[str]) -> None:
        for target in sorted(edges.get(node, ())):
            if target in on_path:
                circles.append([*path[path.index(target) :], target])
            elif target not in done:
                on_path.add(target)
                visit(target, [*path, target], on_path, done)
                on_path.discard(target)
        done.add(node)

    done: set[str] = set()
    for start in sorted(edges):
        if start not in done:
            visit(start, [start], {start}, done)
    assert circles == []
