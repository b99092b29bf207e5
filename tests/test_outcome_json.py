"""The outcome batch's JSON text (encoding.outcome_json, written partly by hand for speed)
says exactly what the encoder says of ``outcome_object``: every field, every kind of
value, text with quotes, control characters and non-ASCII, results that cannot be
stored."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.model import ErrorInfo, ExecutionStatus, Outcome, Status
from tickwork.store.encoding import outcome_json, outcome_object

NOW = datetime(2026, 12, 4, 17, 0, 0, 123456, tzinfo=UTC)


def outcome(**fields: Any) -> Outcome:
    base: dict[str, Any] = {
        "task_id": 7, "fence": 3, "execution_id": 99, "status": ExecutionStatus.COMPLETED,
        "task_status": Status.COMPLETED, "scheduled_at": NOW, "next_run_at": NOW + timedelta(seconds=1),
        "attempt": 0, "triggered": False, "finished_at": NOW + timedelta(seconds=2),
    }  # fmt: skip
    return Outcome(**{**base, **fields})


def same(o: Outcome) -> None:
    assert json.loads(outcome_json(o)) == json.loads(json.dumps(outcome_object(o)))


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
