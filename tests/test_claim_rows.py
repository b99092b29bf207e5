"""Claims decoded by position (tickwork/store/claim_rows.py) are the very claims the
row-by-name decoder makes: the same values of the same types, from the same columns.
Where the fast path cannot be sure (a word it does not know, a time not in UTC, a
schema whose types differ), the row is decoded by name, with the same result or the
same error."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from tickwork.model import Kind, Misfire, OnLost, Overlap, Task
from tickwork.store import NewTask, Store, open_store
from tickwork.store.claim_rows import ClaimRow, Layout, Layouts, decode_claim, same_claim
from tickwork.store.rows import TASK_COLUMNS, Decoder, UndecodableRow

from .test_task_decoding import ROW, PlainDialect

NAMES = (*ROW, "execution_id", "execution_scheduled_for", "lane_due")
CELLS = (*ROW.values(), 77, ROW["scheduled_at"], None)


class Reads(Mapping[str, Any]):
    """A row that remembers which columns were read, in order."""

    def __init__(self, row: Mapping[str, Any]) -> None:
        self.row, self.read = row, list[str]()

    def __getitem__(self, key: str) -> Any:
        self.read.append(key)
        return self.row[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.row)

    def __len__(self) -> int:
        return len(self.row)


def decoder() -> Decoder:
    return Decoder(PlainDialect())  # type: ignore[arg-type]


def row(**changed: Any) -> ClaimRow:
    cells = dict(zip(NAMES, CELLS, strict=True)) | changed
    return ClaimRow(Layouts().get(tuple(name.encode() for name in NAMES)), tuple(cells.values()))


def test_the_positional_columns_are_those_the_decoder_reads_in_task_field_order() -> None:
    reads = Reads(ROW)
    decoder().task(reads)
    assert tuple(dict.fromkeys(reads.read)) == TASK_COLUMNS  # (one is read twice: tested, then decoded)
    assert len(TASK_COLUMNS) == len(dataclasses.fields(Task)) - 1  # all but ``existed``


def test_a_row_decodes_by_position_to_the_claim_the_decoder_makes() -> None:
    r = row()
    first = decode_claim(decoder(), r)  # checks the layout: both ways agree
    assert r.layout.agrees is True
    fast = decode_claim(decoder(), r)
    assert same_claim(fast, first) and same_claim(fast, decoder().claim(dict(r)))
    assert fast.execution_id == 77 and fast.scheduled_for == ROW["scheduled_at"]


def test_a_layout_whose_types_differ_from_ours_decodes_every_row_by_name() -> None:
    r = row(misfire_grace=Decimal("3.5"))  # equal to 3.5, but not a float
    claim = decode_claim(decoder(), r)
    assert r.layout.agrees is False
    assert type(claim.task.misfire_grace) is float and claim.task.misfire_grace == 3.5
    assert r.layout.claim(r.cells) is not None  # the fast path alone would have kept the Decimal
    assert type(decode_claim(decoder(), r).task.misfire_grace) is float


def test_an_unknown_word_falls_back_to_the_decoder_and_its_error() -> None:
    good = row()
    decode_claim(decoder(), good)
    bad = ClaimRow(good.layout, row(status="SLEEPING").cells)
    with pytest.raises(UndecodableRow) as caught:
        decode_claim(decoder(), bad)
    assert caught.value.column == "status" and "SLEEPING" in caught.value.reason


def test_times_not_in_utc_are_decoded_by_name() -> None:
    class Converting(PlainDialect):
        def decode_time(self, value: Any) -> datetime | None:
            return None if value is None else value.astimezone(UTC)

    d = Decoder(Converting())  # type: ignore[arg-type]
    good = row()
    decode_claim(d, good)
    plus2 = timezone(timedelta(hours=2))
    shifted = {c: v.astimezone(plus2) if isinstance(v, datetime) else v for c, v in zip(NAMES, CELLS, strict=True)}
    claim = decode_claim(d, ClaimRow(good.layout, tuple(shifted.values())))
    assert claim.task.next_run_at == ROW["next_run_at"] and claim.task.next_run_at.tzinfo is UTC


def test_a_result_without_a_claims_columns_is_never_read_by_position() -> None:
    layout = Layout(("id", "name"))
    assert layout.agrees is False
    assert dict(ClaimRow(layout, (1, "x"))) == {"id": 1, "name": "x"}


# -- on PostgreSQL, from real claims ---------------------------------------------------------


def varied(now: datetime) -> list[NewTask]:
    """Plain tasks (priority 0, no limit: claimed by the claim statements read by
    position), each with other values in the columns a task may leave empty."""
    base = {"name": "rows.job", "args": [1, "a"], "kwargs": {"k": [1, 2]}, "scheduled_at": now, "next_run_at": now}
    return [
        NewTask(kind=Kind.ONE_TIME, **base),  # type: ignore[arg-type]
        NewTask(kind=Kind.ONE_TIME, key="k-1", timeout=2.5, max_retries=3, retry_backoff=0.5, queue="other",
                on_lost=OnLost.FAIL, max_runtime=9.0, origin="code", declared_at=now, **base),  # type: ignore[arg-type]
        NewTask(kind=Kind.RECURRING, cron="*/5 * * * *", timezone="Europe/Berlin", misfire=Misfire.CATCHUP,
                misfire_grace=1.5, jitter=0.25, max_catchup=7, overlap=Overlap.REPLACE, until=now + timedelta(days=1),
                max_runs=4, max_lost=1, **base),  # type: ignore[arg-type]
        NewTask(kind=Kind.RECURRING, interval=12.5, misfire=Misfire.SKIP, parent_id=None, **base),  # type: ignore[arg-type]
    ]  # fmt: skip


@pytest.mark.parametrize("strategy", ["skip_locked", "optimistic"])
def test_claims_on_postgres_are_the_rows_as_read_back_by_name(pg_url: str, strategy: str) -> None:
    store: Store = open_store(pg_url, claim=strategy)
    try:
        store.migrate()
        store.insert_tasks(varied(store.now() - timedelta(seconds=1)))
        claims = store.claim("node-a", ["rows.job"], 10, 30.0, queues=None)
        assert len(claims) == 4
        for claim in claims:
            stored = store.get_task(claim.task.id)
            assert stored is not None
            assert same_claim(claim, dataclasses.replace(claim, task=stored)), claim.task.id
        layouts = store.dialect.layouts  # type: ignore[attr-defined]
        assert layouts.seen() and all(layout.agrees for layout in layouts.seen())
    finally:
        store.close()


def test_a_postgresql_claim_returns_the_task_columns_in_order_and_its_run() -> None:
    """claim_skip_locked and claim_cas_batch return ``claimed_task`` (postgres.sql): a
    column missing there would leave every claimed row to the slow path, which would then
    refuse it."""
    import re

    from tickwork.store import queries
    from tickwork.store.postgres import PostgresDialect

    texts = queries.load(*PostgresDialect.QUERY_FILES)
    listed = [c.strip() for c in texts["claimed_task"].split(",")]
    assert listed == [f"t.{c}" for c in TASK_COLUMNS] + [
        "t.run_id AS execution_id",
        "t.run_scheduled_for AS execution_scheduled_for",
    ]
    for name in ("claim_skip_locked", "claim_cas_batch"):
        assert re.search(r"RETURNING\s+t\.id, t\.name, t\.args", texts[name]), name
