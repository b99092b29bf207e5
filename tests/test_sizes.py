"""No module of tickwork/ over ~400 lines and no function over ~60, except those that
docs/architecture.md lists with a reason (its "Sizes" section): a new exception is a
decision written down, not an accident."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE_LINES = 400
FUNCTION_LINES = 60
EXCEPTION = re.compile(r"^- `(?P<where>[^`]+)`: \S")


def documented_exceptions() -> set[str]:
    text = (ROOT / "docs" / "architecture.md").read_text("utf-8")
    section = text.split("\n## Sizes\n", 1)[1].split("\n## ", 1)[0]
    return {m["where"] for line in section.splitlines() if (m := EXCEPTION.match(line))}


def oversized() -> set[str]:
    found = set()
    for path in sorted((ROOT / "tickwork").rglob("*.py")):
        source = path.read_text("utf-8")
        name = path.relative_to(ROOT).as_posix()
        if len(source.splitlines()) > MODULE_LINES:
            found.add(name)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                if node.end_lineno - node.lineno + 1 > FUNCTION_LINES:
                    found.add(f"{name}::{node.name}")
    return found


def test_every_oversized_module_or_function_is_a_documented_exception() -> None:
    undocumented = oversized() - documented_exceptions()
    limits = f"over {MODULE_LINES} lines / {FUNCTION_LINES} per function"
    assert not undocumented, f"{limits}, not in docs/architecture.md: {sorted(undocumented)}"


def test_every_documented_exception_is_still_needed() -> None:
    stale = documented_exceptions() - oversized()
    assert not stale, f"listed in docs/architecture.md's Sizes but no longer oversized: {sorted(stale)}"
