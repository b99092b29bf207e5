"""The outcome batches' JSON text (encoding.outcome_json and outcome_text_json, written
partly by hand for speed) says exactly what the encoder says of ``outcome_object``: every
field, every kind of value, text with quotes, control characters and non-ASCII, results
that cannot be stored; outcome_json with its times as whole microseconds since 1970,
within the years a float8 carries them exactly, and nothing outside them."""

from __future__ import annotations

import calendar
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.model import ErrorInfo, ExecutionStatus, Outcome, Status
from tickwork.store.encoding import EXACT_MICROSECONDS, outcome_json, outcome_object, outcome_text_json

NOW = datetime(2026, 12, 4, 17, 0, 0, 123456, tzinfo=UTC)


def outcome(**fields: Any) -> Outcome:
    base: dict[str, Any] = {
        "task_id": 7, "fence": 3, "execution_id": 99, "status": ExecutionStatus.COMPLETED,
        "task_status": Status.COMPLETED, "scheduled_at": NOW, "next_run_at": NOW + timedelta(seconds=1),
        "attempt": 0, "triggered": False, "finished_at": NOW + timedelta(seconds=2),
    }  # fmt: skip
    return Outcome(**{**base, **fields})


MICROSECOND_KEYS = {
    "scheduled_at": "sa", "next_run_at": "na", "finished_at": "fa", "started_at": "ba", "skipped_last": "la",
}  # fmt: skip


def micros(t: datetime) -> int:
    """Whole microseconds since 1970, computed another way than the encoder does."""
    return calendar.timegm(t.utctimetuple()) * 1_000_000 + t.microsecond


def same(o: Outcome) -> None:
    expected = json.loads(json.dumps(outcome_object(o)))
    assert json.loads(outcome_text_json(o)) == expected
    for key, short in MICROSECOND_KEYS.items():
        if key in expected:
            expected[short] = micros(getattr(o, key))
            del expected[key]
    text = outcome_json(o)
    assert text is not None
    assert json.loads(text) == expected


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"started_at": NOW, "triggered": True, "counts": False, "lost_runs": 2, "attempt": 3},
        {
            "status": ExecutionStatus.FAILED,
            "task_status": Status.PENDING,
            "error": ErrorInfo('Bad"Thing', 'a "quoted"\nmessage \\ é ☃ \x01', "Traceback\n  line\t2"),
        },
        {"result": {"a": [1, 2.5, None, 'x"y'], "b": "ünïcode"}},
        {"result": "text"},
        {"result": float("nan")},  # cannot be stored: left out, with a note
        {"note": 'given back\n"twice"'},
        {"status": ExecutionStatus.SKIPPED, "skipped": 4, "skipped_last": NOW, "decision": "skip: 4 slots"},
        {"decision": "catch up"},
    ],
)
def test_the_text_says_what_the_encoder_says(fields: dict[str, Any]) -> None:
    same(outcome(**fields))


@given(
    message=st.text(),
    note=st.one_of(st.none(), st.text()),
    result=st.one_of(st.none(), st.integers(), st.text(), st.dictionaries(st.text(), st.integers())),
    fence=st.integers(min_value=0, max_value=2**62),
)
def test_any_text_or_result_says_the_same(message: str, note: str | None, result: Any, fence: int) -> None:
    same(outcome(fence=fence, error=ErrorInfo("E", message, ""), note=note, result=result))


@pytest.mark.parametrize("field", ["scheduled_at", "next_run_at", "finished_at", "started_at", "skipped_last"])
def test_a_time_outside_the_exact_years_leaves_the_outcome_to_the_text_batch(field: str) -> None:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    last = epoch + timedelta(microseconds=EXACT_MICROSECONDS - 1)
    first = epoch - timedelta(microseconds=EXACT_MICROSECONDS - 1)
    for inside in (last, first, NOW):
        text = outcome_json(outcome(**{field: inside}))
        assert text is not None and json.loads(text)[MICROSECOND_KEYS[field]] == micros(inside)
    for outside in (
        last + timedelta(microseconds=1),
        first - timedelta(microseconds=1),
        datetime.max.replace(tzinfo=UTC),
    ):
        assert outcome_json(outcome(**{field: outside})) is None
        assert json.loads(outcome_text_json(outcome(**{field: outside})))[field] == outside.isoformat()
    assert last.year == 2255 and first.year == 1684
