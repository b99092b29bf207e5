"""Load named queries: ``-- name: x`` headers in .sql files beside this module.

The portable file is read first; a dialect file overrides queries by name, so each
store reviews as plain SQL and the Python around it stays free of query text. A query
may name another as ``{{name}}`` (a fragment: common table expressions several
queries share), replaced by its text once every file is read.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*(?P<name>\w+)\s*$", re.MULTILINE)
_FRAGMENT = re.compile(r"\{\{(?P<name>\w+)\}\}")
_DEPTH = 8


def parse(text: str) -> dict[str, str]:
    queries: dict[str, str] = {}
    matches = list(_HEADER.finditer(text))
    ends = [m.start() for m in matches[1:]] + ([len(text)] if matches else [])
    for match, end in zip(matches, ends, strict=True):
        body = text[match.end() : end]
        lines = (_code(line) for line in body.splitlines())
        queries[match["name"]] = "\n".join(line for line in lines if line).rstrip(";")
    return queries


def _code(line: str) -> str:
    """A line without its comment and indentation: the text a driver scans on every run
    is shorter (psycopg caches what it makes of a query only under 4 KB: the outcome
    batch's, comments and all, was over it). ``--`` inside a quoted literal stays. Read at
    every process start: the usual line (no comment, or no literal) skips the walk."""
    if "--" not in line:
        return line.strip()
    if "'" not in line:
        return line[: line.index("--")].strip()
    quoted = False
    for i, char in enumerate(line):
        if char == "'":
            quoted = not quoted
        elif char == "-" and not quoted and line.startswith("--", i):
            return line[:i].strip()
    return line.strip()


@cache
def load(*files: str) -> dict[str, str]:
    """Queries from ``files`` (in this package), later files overriding earlier ones."""
    queries: dict[str, str] = {}
    for file in files:
        queries.update(parse(resources.files(__package__).joinpath(file).read_text("utf-8")))
    for name, text in queries.items():
        for _ in range(_DEPTH):
            if not _FRAGMENT.search(text):
                break
            text = _FRAGMENT.sub(lambda m: queries[m["name"]], text)
        else:
            raise ValueError(f"query {name}: fragments nested deeper than {_DEPTH} (a cycle?)")
        queries[name] = text
    if "claim_candidates" in queries and "lane_candidates" in queries:
        # One round trip for both kinds of candidate of an optimistic claim (limits.sql).
        queries["claim_candidates_and_lane"] = (
            f"SELECT * FROM ({queries['claim_candidates']}) AS main"
            f" UNION ALL SELECT * FROM ({queries['lane_candidates']}) AS lane"
        )
    return queries
