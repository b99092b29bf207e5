"""JSON as tickwork stores it: arguments and results are plain JSON values, nothing else.

Validation walks the value instead of trusting ``json.dumps``, which silently turns
integer keys into strings and fails late on mixed keys: what is checked here is exactly
what the store will encode, so a bad value is refused before anything is written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from tickwork.errors import InvalidInput


def dumps(value: Any) -> str:
    """Compact, deterministic JSON."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, allow_nan=False)


def check_json(field: str, value: Any) -> None:
    """Raise ``InvalidInput`` naming the path of the first part that is not plain JSON."""
    problem = _find_problem(field, value)
    if problem is not None:
        path, bad, reason = problem
        raise InvalidInput(path, bad, reason)


def json_problem(value: Any) -> str | None:
    """Why ``value`` cannot be stored as JSON, or None when it can."""
    problem = _find_problem("result", value)
    return None if problem is None else f"{problem[0]}: {problem[2]}"


def clean_text(text: str) -> str:
    """Text any store can keep: no NUL characters (PostgreSQL refuses them) and no lone
    surrogates (not encodable as UTF-8). For messages and tracebacks, which come from
    anywhere; arguments and results are refused instead (check_json)."""
    if text.isascii() and "\x00" not in text:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "NUL characters cannot be stored"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "not valid Unicode (a lone surrogate)"
    return None


def _find_problem(path: str, value: Any) -> tuple[str, Any, str] | None:
    if isinstance(value, str):
        reason = _text_problem(value)
        return None if reason is None else (path, value, reason)
    if value is None or isinstance(value, (bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value, "not JSON: NaN and infinities are not allowed")
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            if (found := _find_problem(f"{path}[{index}]", item)) is not None:
                return found
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return (path, key, "not JSON: object keys must be strings")
            if (reason := _text_problem(key)) is not None:
                return (path, key, reason)
            if (found := _find_problem(f"{path}[{key!r}]", item)) is not None:
                return found
        return None
    return (path, value, f"not JSON-serializable: {type(value).__name__}")
