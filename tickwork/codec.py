"""JSON as tickwork stores it: arguments and results are plain JSON values, nothing else.

Validation walks the value instead of trusting ``json.dumps``, which silently turns
integer keys into strings and fails late on mixed keys: what is checked here is exactly
what the store will encode, so a bad value is refused before anything is written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from tickwork.errors import InvalidInput

MAX_DEPTH = 100
"""Deepest nesting accepted in arguments and results (the encoder recurses)."""


_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True, allow_nan=False)


_DECODER = json.JSONDecoder()
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def decode_json_text(text: str) -> Any:
    """``json.loads(text)``, for text a store wrote (no whitespace around the value): the
    decoder's scanner called directly, one call instead of four Python frames (a claim
    decodes two values a row). Anything it does not take whole goes through the decoder
    itself, which reads or names the problem exactly as json.loads would."""
    if text == "[]":
        return []
    if text == "{}":
        return {}
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return _DECODER.decode(text)
    return value if end == len(text) else _DECODER.decode(text)


def dumps(value: Any) -> str:
    """Compact, deterministic JSON (one encoder for every call: ``json.dumps`` with
    options builds a new one each time)."""
    return _ENCODER.encode(value)


def _checked_encoder() -> Callable[[Any], str] | None:
    """``_ENCODER``'s own C encoder, made once: ``JSONEncoder.encode`` makes it again on
    every call (two thirds of encoding a small payload). Made without the check for
    circular values, so only for values ``check_json`` accepted (no cycles: their depth
    is bounded). None where the json module has no C encoder, or one this call does not
    make as ``_ENCODER`` would (a private interface of the json module: checked here, on
    a sample, rather than trusted)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    e = _ENCODER
    try:
        chunks = make(
            None, e.default, json.encoder.encode_basestring_ascii, e.indent,
            e.key_separator, e.item_separator, e.sort_keys, e.skipkeys, e.allow_nan,
        )  # fmt: skip
        sample: dict[str, Any] = {"b": [1, 2.5, None, True], "a": "\u00e9\n"}
        if "".join(chunks(sample, 0)) != e.encode(sample):
            return None
    except Exception:
        return None
    return lambda value: "".join(chunks(value, 0))


_encode_checked = _checked_encoder() or _ENCODER.encode


def dumps_checked(value: list[Any] | dict[str, Any]) -> str:
    """``dumps(value)`` for arguments ``check_json`` has accepted, at a third of its cost:
    a bulk schedule encodes two per task. tests/test_codec.py checks both agree."""
    if not value:
        return "[]" if type(value) is list else "{}"
    return _encode_checked(value)


def check_json(field: str, value: Any) -> None:
    """Raise ``InvalidInput`` naming the path of the first part that is not plain JSON."""
    if _plain(value, 0):
        return
    problem = _find_problem(field, value)
    if problem is not None:
        path, bad, reason = problem
        raise InvalidInput(path, bad, reason)


def check_arguments(field: str, value: list[Any] | dict[str, Any]) -> bool:
    """``check_json(field, value)``, answering ``is_flat(value)``: one pass over a flat
    value of plain scalars (the common case: a bulk schedule checks two per task)."""
    elements = value.values() if type(value) is dict else value
    if (type(value) is list or all(type(key) is str and _plain_text(key) for key in value)) and all(
        _plain_scalar(element) for element in elements
    ):
        return True
    check_json(field, value)
    return is_flat(value)


def _plain_text(text: str) -> bool:
    return text.isascii() and "\x00" not in text


def _plain_scalar(value: Any) -> bool:
    kind = type(value)
    if kind is str:
        return _plain_text(value)
    return kind is int or kind is bool or value is None or (kind is float and math.isfinite(value))


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


_SCALARS = frozenset({str, int, float, bool, type(None)})


def is_flat(value: list[Any] | dict[str, Any]) -> bool:
    """Whether every element of ``value`` is of exactly one of JSON's scalar types: a copy
    of it then equals what decoding its JSON text gives, type for type."""
    elements = value.values() if type(value) is dict else value
    return all(type(element) in _SCALARS for element in elements)


def _plain(value: Any, depth: int) -> bool:
    """The common case, checked quickly: only exact JSON types, text any store keeps,
    finite floats, within ``MAX_DEPTH``. False sends the value to ``_find_problem``,
    which also accepts subclasses and tuples and names what is wrong."""
    kind = type(value)
    if kind is str:
        return (value.isascii() and "\x00" not in value) or _text_problem(value) is None
    if kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if depth >= MAX_DEPTH:
        return False
    if kind is list:
        return all(_plain(element, depth + 1) for element in value)
    if kind is dict:
        return all(
            type(key) is str and _plain(key, depth) and _plain(element, depth + 1) for key, element in value.items()
        )
    return False


def _find_problem(path: str, value: Any) -> tuple[str, Any, str] | None:
    """Walk the value without recursion (deep nesting must not crash the caller)."""
    stack: list[tuple[str, Any, int]] = [(path, value, 0)]
    while stack:
        where, item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return (where, "...", f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, str):
            if (reason := _text_problem(item)) is not None:
                return (where, item, reason)
        elif item is None or isinstance(item, (bool, int)):
            continue
        elif isinstance(item, float):
            if not math.isfinite(item):
                return (where, item, "not JSON: NaN and infinities are not allowed")
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{where}[{i}]", element, depth + 1) for i, element in reversed(list(enumerate(item))))
        elif isinstance(item, dict):
            for key in item:
                if not isinstance(key, str):
                    return (where, key, "not JSON: object keys must be strings")
                if (reason := _text_problem(key)) is not None:
                    return (where, key, reason)
            stack.extend((f"{where}[{k!r}]", element, depth + 1) for k, element in reversed(list(item.items())))
        else:
            return (where, item, f"not JSON-serializable: {type(item).__name__}")
    return None
