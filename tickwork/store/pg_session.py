"""One PostgreSQL session of a store: its statements, by name, on one pooled connection."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg.rows import RowFactory

from tickwork.store import pg_copy
from tickwork.store.dialect import Row
from tickwork.store.pg_loading import POSITIONAL, rows_past_infinity


class PgSession:
    """Statements on one cursor; a claim's on a second one, whose rows are read by
    position (store/claim_rows.py), made the first time a claim runs in the session."""

    def __init__(
        self,
        cursor: psycopg.Cursor[Any],
        texts: Mapping[str, str],
        copy_types: dict[str, list[int]],
        claim_rows: RowFactory[Any],
    ) -> None:
        self._cur = cursor
        self._texts = texts
        self._copy_types = copy_types
        self._claim_rows = claim_rows
        self._claims: psycopg.Cursor[Any] | None = None

    def _cursor(self, query: str) -> psycopg.Cursor[Any]:
        if query not in POSITIONAL:
            return self._cur
        if self._claims is None:
            binary = self._cur.format == pq.Format.BINARY
            self._claims = self._cur.connection.cursor(row_factory=self._claim_rows, binary=binary)
        return self._claims

    def fetch_all(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        cur = self._cursor(query)
        cur.execute(self._texts[query], params)
        try:
            rows: list[Row] = list(cur.fetchall())
        except psycopg.DataError:  # a value no Python type holds: each row decoded alone
            rows = rows_past_infinity(cur)
        return rows

    def fetch_one(self, query: str, params: Mapping[str, Any]) -> Row | None:
        rows = self.fetch_all(query, params)
        return rows[0] if rows else None

    def fetch_many(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[list[Row]]:
        if not params:
            return []
        self._cur.executemany(self._texts[query], params, returning=True)
        results: list[list[Row]] = [list(self._cur.fetchall())]
        while self._cur.nextset():
            results.append(list(self._cur.fetchall()))
        return results

    def execute(self, query: str, params: Mapping[str, Any]) -> int:
        self._cur.execute(self._texts[query], params)
        return self._cur.rowcount

    def insert_rows(self, query: str, rows: Sequence[Mapping[str, Any]]) -> int:
        self._cur.execute(self._texts[query], {"rows": json.dumps(rows, separators=(",", ":"))})
        return self._cur.rowcount

    def copy_rows(self, query: str, rows: Iterable[Sequence[Any]]) -> None:
        pg_copy.copy_rows(self._cur, self._texts[query], rows, self._copy_types)
