"""JSON as the stores load it (codec.decode_json_text; jsonb through store/pg_loading.py):
the decoder's scanner called directly, with the same values and errors as json.loads."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from tickwork.codec import decode_json_text
from tickwork.store.pg_loading import JsonbBinaryLoader, loads_json

VALUES: list[Any] = [
    [], {}, [1, "two", None, True, 2.5], {"bid": 12345}, {"nested": {"a": [1, {"b": "ü→"}]}}, "text", 0, -1.5e300,
    None, {"big": 10**40}, [[[]]], {"": ""},
]  # fmt: skip


@pytest.mark.parametrize("value", VALUES)
def test_values_decode_as_json_loads_decodes_them(value: Any) -> None:
    text = json.dumps(value)
    assert decode_json_text(text) == json.loads(text)
    assert loads_json(text.encode()) == json.loads(text)
    loaded = JsonbBinaryLoader(3802).load(b"\x01" + text.encode())
    assert loaded == value and type(loaded) is type(value)


@pytest.mark.parametrize("text", ["", "[1,", '{"a" 1}', "[1] x", "nul", "[1]]"])
def test_bad_text_fails_as_json_loads_fails(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as got:
        decode_json_text(text)
    assert str(got.value) == str(expected.value)


def test_whitespace_around_the_value_is_read_as_json_loads_reads_it() -> None:
    assert decode_json_text(' {"a": 1} ') == {"a": 1}


def test_an_unknown_jsonb_version_is_refused() -> None:
    with pytest.raises(psycopg.DataError, match="unknown jsonb binary format"):
        JsonbBinaryLoader(3802).load(b"\x02[]")


def test_empty_containers_are_fresh_objects() -> None:
    loader = JsonbBinaryLoader(3802)
    first = loader.load(b"\x01[]")
    first.append(1)
    assert loader.load(b"\x01[]") == []
