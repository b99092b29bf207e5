"""tickwork's modules form no import cycle.

Two checks, since each misses what the other sees:

- every module is imported first in an interpreter of its own: a cycle that breaks at
  run time (a name taken from a module that is still half-initialised) fails only for
  some orders of import, and the tests import modules in one order only;
- a walk of every ``import`` statement (those inside functions and under TYPE_CHECKING
  too) finds no cycle at all: a cycle that happens to work today, held together by a
  function-level import, still ties the modules into one and breaks on the next move.

An import of ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``. The walk leaves
those implicit edges out (every module would otherwise "cycle" through the root package,
which re-exports the public API); the first check is what catches the harm they can do.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tickwork"


def modules() -> dict[str, Path]:
    """Every module of tickwork by dotted name (a package by its ``__init__.py``)."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, str | None]]:
    """(module, name imported from it or None) for every import in ``tree``, at any depth."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                yield source, alias.name


def import_graph() -> dict[str, set[str]]:
    """Module -> the tickwork modules it imports (``from pkg import sub`` counts as ``sub``)."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text("utf-8"), filename=str(path))
        for source, imported in _imported_names(tree, name, path.name == "__init__.py"):
            target = f"{source}.{imported}" if imported and f"{source}.{imported}" in known else source
            while target and target not in known:  # import tickwork.x.y where y is a name
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle through each strongly connected group of modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while (member := stack.pop()) != node:
                group.add(member)
            groups.append(group | {node})

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_shortest_cycle(graph, group) for group in groups if len(group) > 1]


def _shortest_cycle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & group):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(group)}")


def test_the_cycle_finder_finds_and_prints_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": {"e"}}
    assert sorted(cycles(graph)) == [["a", "b", "c", "a"], ["e", "e2", "e"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_walk_sees_imports_in_functions_and_under_type_checking() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tickwork.model import Task\n"
        "def f():\n    from . import sibling\n    from ..store import sql\n    import tickwork.codec\n"
    )
    found = set(_imported_names(ast.parse(source), "tickwork.cli.tasks", is_package=False))
    assert {("tickwork.model", "Task"), ("tickwork.cli", "sibling"), ("tickwork.store", "sql")} <= found
    assert ("tickwork.codec", None) in found
    graph = import_graph()
    assert "tickwork.cli.common" in graph["tickwork.cli.tasks"]  # from tickwork.cli import common
    assert "tickwork.web.server" in graph["tickwork.cli.serve"]  # inside the command's function
    assert all(target in graph for targets in graph.values() for target in targets)


def test_no_import_cycle_among_tickwork_modules() -> None:
    found = cycles(import_graph())
    for cycle in found:
        print("import cycle: " + " -> ".join(cycle))
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


# Run in a fresh interpreter. The third-party modules tickwork imports are loaded first
# (they cannot take part in a cycle of tickwork's, and loading them once keeps the test
# short); then each tickwork module is the first one imported in a child forked off it.
_FORK_EACH = """
import importlib, json, os, sys, traceback
names, preload = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for name in preload:
    try:
        importlib.import_module(name)
    except Exception:
        pass
assert not any(m == "tickwork" or m.startswith("tickwork.") for m in sys.modules), "preloaded tickwork"
failures, running = {}, {}
def reap():
    pid, status = os.wait()
    name, reader = running.pop(pid)
    text = os.read(reader, 1 << 20).decode(errors="replace")
    os.close(reader)
    if status:
        failures[name] = text or f"exit status {status}"
for name in names:
    if len(running) >= max(2, os.cpu_count() or 2):
        reap()
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        try:
            importlib.import_module(name)
        except BaseException:
            os.write(writer, traceback.format_exc()[-4000:].encode())
            os._exit(1)
        os._exit(0)
    os.close(writer)
    running[pid] = (name, reader)
while running:
    reap()
print(json.dumps(failures))
"""


def _third_party() -> list[str]:
    """The modules outside tickwork that tickwork imports, by dotted name."""
    names: set[str] = set()
    for name, path in modules().items():
        tree = ast.parse(path.read_text("utf-8"))
        for source, _ in _imported_names(tree, name, path.name == "__init__.py"):
            if source and source.split(".")[0] != "tickwork":
                names.add(source)
    return sorted(names)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks a child per module")
def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    names = [name for name in modules() if not name.endswith("__main__")]
    result = subprocess.run(
        [sys.executable, "-c", _FORK_EACH, json.dumps(names), json.dumps(_third_party())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    failures = json.loads(result.stdout.strip().splitlines()[-1])
    assert not failures, "\n\n".join(f"import {name} failed:\n{text}" for name, text in failures.items())


def test_python_dash_m_tickwork_cli_runs_the_command_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tickwork.cli", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "Usage: python -m tickwork.cli" in result.stdout and "serve" in result.stdout
