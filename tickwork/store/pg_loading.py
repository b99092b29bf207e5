"""How PostgreSQL's values become Python's: jsonb on the fast path, and rows psycopg
cannot load as they are (a timestamptz ``infinity``, which no datetime can hold).

psycopg loads a whole result at once, so one such value would fail the statement's
every row, a claim's included, after the statement has committed. The result is still
in hand then: ``rows_past_infinity`` loads it again with loaders that turn the two
infinities into ``Unbounded`` values, which the row's decoding refuses for that row
alone (``rows.UndecodableRow``, naming the table, column and row). Only ever on that
slow path: the hot path keeps psycopg's own C loaders.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.adapt import AdaptersMap, Buffer, Loader, Transformer
from psycopg.pq import Format
from psycopg.rows import RowMaker, dict_row
from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader

from tickwork.codec import decode_json_text
from tickwork.store.claim_rows import ClaimRow, Layouts
from tickwork.store.dialect import Row

POSITIONAL = frozenset({"claim_skip_locked", "claim_cas_batch"})
"""The statements whose rows are claims, read by position (store/claim_rows.py)."""

# timestamptz's binary form: microseconds since 2000-01-01 as a signed 64-bit integer,
# whose two extremes stand for the infinities.
_BINARY_INFINITIES = {
    (2**63 - 1).to_bytes(8, "big", signed=True): "infinity",
    (-(2**63)).to_bytes(8, "big", signed=True): "-infinity",
}
_TEXT_INFINITIES = {b"infinity": "infinity", b"-infinity": "-infinity"}


def loads_json(data: bytes | bytearray | memoryview | str) -> Any:
    """jsonb values arrive as UTF-8 bytes: decode them directly (json.loads would first
    sniff their encoding)."""
    return decode_json_text(data if isinstance(data, str) else bytes(data).decode())


_JSONB_VERSION = b"\x01"
_EMPTY_JSONB = {_JSONB_VERSION + b"[]": list, _JSONB_VERSION + b"{}": dict}


class JsonbBinaryLoader(Loader):
    """jsonb in binary form (what the hot path's cursors fetch): a version byte, then the
    JSON text. psycopg's own loader calls ``loads`` through two more frames per value."""

    format = Format.BINARY

    def load(self, data: Buffer) -> Any:
        raw = bytes(data)
        empty = _EMPTY_JSONB.get(raw)
        if empty is not None:
            return empty()
        if raw[:1] != _JSONB_VERSION:
            raise psycopg.DataError(f"unknown jsonb binary format: {raw[:1]!r}")
        return decode_json_text(raw[1:].decode())


@dataclasses.dataclass(frozen=True)
class Unbounded:
    """A timestamptz ``infinity`` or ``-infinity``, as loaded on the slow path."""

    text: str
    tzinfo: None = None  # not UTC: the dialect's decode_time leaves its fast path

    def __str__(self) -> str:
        return self.text


class _TextLoader(TimestamptzLoader):
    def load(self, data: Buffer) -> Any:
        infinity = _TEXT_INFINITIES.get(bytes(data))
        return super().load(data) if infinity is None else Unbounded(infinity)


class _BinaryLoader(TimestamptzBinaryLoader):
    def load(self, data: Buffer) -> Any:
        infinity = _BINARY_INFINITIES.get(bytes(data))
        return super().load(data) if infinity is None else Unbounded(infinity)


@dataclasses.dataclass(frozen=True)
class _Context:
    adapters: AdaptersMap
    connection: psycopg.BaseConnection[Any] | None


def rows_past_infinity(cursor: psycopg.Cursor[Any]) -> list[Row]:
    """The rows of ``cursor``'s last result, which psycopg refused to load, with each
    infinite timestamptz as an ``Unbounded`` (anything else still fails)."""
    result = cursor.pgresult
    if result is None:
        raise psycopg.DataError("no result to load again")
    adapters = AdaptersMap(cursor.adapters)
    adapters.register_loader("timestamptz", _TextLoader)
    adapters.register_loader("timestamptz", _BinaryLoader)
    loader = Transformer(_Context(adapters, cursor.connection))
    loader.set_pgresult(result)
    rows: list[Row] = loader.load_rows(0, result.ntuples, dict_row(cursor))
    return rows


def claim_rows(layouts: Layouts) -> Callable[[psycopg.Cursor[Any]], RowMaker[ClaimRow]]:
    """A psycopg row factory making ``ClaimRow`` s: the column names are read once per
    result (not once per row, as ``dict_row`` makes its dicts), its layout found by them."""

    def factory(cursor: psycopg.Cursor[Any]) -> RowMaker[ClaimRow]:
        result = cursor.pgresult
        fields = () if result is None else tuple(map(result.fname, range(result.nfields)))
        return layouts.row_maker(fields)

    return factory
