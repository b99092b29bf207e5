"""SQLite's claims decoded by position (claim_rows.StoredLayout) are the very claims the
row-by-name decoder makes from the same rows: every column, its value and its type,
whatever the row holds; a value the decoder refuses is refused the same way."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tickwork.model import Kind, Task
from tickwork.store import NewTask, Store, open_store
from tickwork.store.claim_rows import ClaimRow, StoredLayout, decode_claim, same_claim
from tickwork.store.rows import Decoder, UndecodableRow

NODE = "node-a"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"sqlite:///{tmp_path / 'claims.db'}")
    s.migrate()
    yield s
    s.close()


def due_task(store: Store, name: str = "t", **fields: object) -> Task:
    due = store.now() - timedelta(seconds=1)
    new = NewTask(name=name, args=[1, "a"], kwargs={"k": [2]}, kind=Kind.ONE_TIME, scheduled_at=due, next_run_at=due)
    [task] = store.insert_tasks([new])
    if fields:
        path = store.dialect.path  # type: ignore[attr-defined]
        with sqlite3.connect(path) as conn:
            conn.execute(f"UPDATE tickwork_tasks SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?",
                         [*fields.values(), task.id])  # fmt: skip
    return task


def claimed_rows(store: Store) -> list[ClaimRow]:
    """The rows a node's claim reads, as the hot path hands them to the decoder."""
    d = store.dialect  # type: ignore[attr-defined]
    now = d.approximate_now()
    params = {"node": NODE, "now": d.encode_time(now), "lease_until": d.encode_time(now + timedelta(seconds=30))}
    with d.transaction() as s:
        candidates = s.fetch_all(
            "list_tasks", {"status": "PENDING", "name": None, "kind": None, "queue": None, "limit": 100, "offset": 0}
        )
        rows = d.hot_path.compare_and_set(s, [{"id": c["id"], "version": c["version"]} for c in candidates], params)
    assert rows and all(type(r) is ClaimRow for r in rows)
    return rows


def both_ways(store: Store, row: ClaimRow) -> tuple[object, object]:
    layout = row.layout
    assert isinstance(layout, StoredLayout)
    return layout.claim(row.cells), Decoder(store.dialect).claim(row)  # type: ignore[attr-defined]


def test_a_plain_claim_decodes_by_position_to_the_decoders_claim(store: Store) -> None:
    due_task(store)
    [row] = claimed_rows(store)
    fast, slow = both_ways(store, row)
    assert same_claim(fast, slow)  # type: ignore[arg-type]
    assert decode_claim(Decoder(store.dialect), row) == slow  # type: ignore[attr-defined]


def test_every_converted_column_set_decodes_the_same_both_ways(store: Store) -> None:
    """Each column the decoder converts holds a value here (REALs stored as whole numbers,
    booleans as 1, every optional time set), so a conversion missing or different on
    either side shows as a difference of value or type."""
    at = store.dialect.encode_time(store.now())  # type: ignore[attr-defined]
    due_task(
        store, interval_seconds=60, misfire_grace=5, jitter=0, timeout=30, retry_backoff=2, max_runtime=9,
        cancel_requested=1, triggered=1, cancel_run_only=1, last_status="FAILED", until_at=at + 10**9,
        max_runs=4, declared_at=at, removed_at=at, replan_at=at, replan_run_at=at, max_running=3,
        lease_expires_at=at, cron=None, key="k1", origin="code", lock="L", rate_limit="2/s", max_catchup=7,
        last_decision="d", lost_runs=1, max_lost=5, revision=3, parent_id=None,
    )  # fmt: skip
    [row] = claimed_rows(store)
    fast, slow = both_ways(store, row)
    assert same_claim(fast, slow)  # type: ignore[arg-type]
    task = slow.task  # type: ignore[attr-defined]
    assert type(task.jitter) is float and task.cancel_requested is True and task.max_runs == 4


def test_a_value_the_decoder_refuses_is_refused_by_position_too(store: Store) -> None:
    """An unknown word: the positional path gives up on the row, and the decoder's error
    names the column."""
    due_task(store, overlap="sideways")
    [row] = claimed_rows(store)
    fast = row.layout.claim(row.cells)
    assert fast is None
    with pytest.raises(UndecodableRow) as raised:
        decode_claim(Decoder(store.dialect), row)  # type: ignore[attr-defined]
    assert raised.value.column == "overlap"


def test_a_claim_on_sqlite_goes_by_position_and_gives_the_tasks_as_stored(store: Store) -> None:
    """A store's claim: its layout agreed with the decoder on the first row (so every row
    after it went by position), and each claimed task is the row read back by name."""
    for _ in range(3):
        due_task(store)
    claims = store.claim(NODE, ["t"], 10, 30)
    assert len(claims) == 3
    layouts = store.dialect.hot_path._layouts.seen()  # type: ignore[attr-defined]
    assert layouts and all(isinstance(layout, StoredLayout) and layout.agrees for layout in layouts)
    assert [c.task for c in claims] == [store.get_task(c.task.id) for c in claims]
    assert all(c.task.status.value == "RUNNING" and c.task.lease_owner == NODE for c in claims)
