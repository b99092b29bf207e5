"""The JSON checks behind every stored argument: the quick path (``codec._plain``) may
only accept what the full walk (``codec._find_problem``) accepts, and a flat value
(``codec.is_flat``) must equal its decoded text type for type."""

from __future__ import annotations

import enum
import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork import codec
from tickwork.errors import InvalidInput


class Level(enum.IntEnum):
    LOW = 1


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and the infinities included
    st.text(),  # NUL characters and lone surrogates included
    st.sampled_from([math.nan, math.inf, -math.inf, "\x00", "a\x00b", "\ud800", "é ✓", Level.LOW]),
    st.binary(max_size=3),  # not JSON
)
keys = st.one_of(st.text(max_size=5), st.integers(), st.none())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(keys, inner, max_size=4),
    ),
    max_leaves=20,
)


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@settings(max_examples=500)
@given(values)
def test_the_quick_check_accepts_only_what_the_full_walk_accepts(value: Any) -> None:
    walked = codec._find_problem("args", value)
    if codec._plain(value, 0):
        assert walked is None
    try:
        codec.check_json("args", value)
    except InvalidInput as exc:
        assert walked is not None and (exc.field, exc.reason) == (walked[0], walked[2])
    else:
        assert walked is None


def test_nesting_is_refused_past_max_depth_on_both_paths() -> None:
    codec.check_json("args", nested(codec.MAX_DEPTH))
    for too_deep in (nested(codec.MAX_DEPTH + 1), [nested(codec.MAX_DEPTH)]):
        assert not codec._plain(too_deep, 0)
        try:
            codec.check_json("args", too_deep)
        except InvalidInput as exc:
            assert "nested deeper" in exc.reason
        else:
            raise AssertionError("accepted a value nested too deep")


@given(st.one_of(st.lists(scalars, max_size=6), st.dictionaries(st.text(max_size=5), scalars, max_size=6)))
def test_a_flat_value_equals_its_decoded_text_type_for_type(value: Any) -> None:
    if not codec.is_flat(value) or codec._find_problem("args", value) is not None:
        return
    decoded = json.loads(codec.dumps(value))
    assert decoded == value
    pairs = zip(decoded, value, strict=True) if isinstance(value, list) else ((decoded[k], value[k]) for k in value)
    assert all(type(a) is type(b) for a, b in pairs)


@settings(max_examples=500)
@given(st.one_of(st.lists(values, max_size=4), st.dictionaries(st.text(max_size=5), values, max_size=4)))
def test_accepted_arguments_encode_alike_on_the_quick_encoder(value: Any) -> None:
    try:
        codec.check_json("args", value)
    except InvalidInput:
        return
    assert codec.dumps_checked(value) == codec.dumps(value)


def test_the_quick_encoder_keeps_the_stored_form_of_empty_and_nested_values() -> None:
    for value in ([], {}, [[]], {"a": {}}, nested(codec.MAX_DEPTH), {"b": 1, "a": [1.5, None, "é"]}):
        assert codec.dumps_checked(value) == codec.dumps(value)
    assert codec.dumps_checked({"b": 1, "a": "é"}) == '{"a":"\\u00e9","b":1}'


@settings(max_examples=500)
@given(st.one_of(st.lists(values, max_size=4), st.dictionaries(keys, values, max_size=4)))
def test_the_one_pass_check_of_arguments_agrees_with_the_check_and_the_flatness(value: Any) -> None:
    try:
        codec.check_json("args", value)
    except InvalidInput as exc:
        expected: Any = (exc.field, exc.reason)
    else:
        expected = codec.is_flat(value)
    try:
        got: Any = codec.check_arguments("args", value)
    except InvalidInput as exc:
        got = (exc.field, exc.reason)
    assert got == expected
