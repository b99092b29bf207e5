"""Rows streamed into PostgreSQL with ``COPY ... (FORMAT BINARY)``.

In COPY's text format psycopg looks up and runs a dumper per value: ~10 µs of client
CPU for a task's 35 columns, a third of what scheduling one in bulk cost. Told each
column's type first (``Copy.set_types``), the binary format packs the same row in ~1.3
µs. The types are read from the table itself, once per dialect, so the schema stays
the one place that says them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.adapt import Dumper
from psycopg.pq import Format

JSONB_OID = 3802
_COPY = re.compile(r"^\s*COPY\s+(\w+)\s*\(([^)]*)\)\s+FROM\s+STDIN\s*\(\s*FORMAT\s+BINARY\s*\)", re.IGNORECASE)


class JsonTextBinaryDumper(Dumper):
    """A jsonb value in the binary format from JSON text encoded already (``codec.dumps``,
    ASCII only): the format's version byte, then the text. Registered by oid alone, so
    only a COPY told its columns' types uses it, never a query's parameter."""

    oid = JSONB_OID
    format = Format.BINARY

    def dump(self, obj: str) -> bytes:
        return b"\x01" + obj.encode()


def register(conn: psycopg.Connection[Any]) -> None:
    conn.adapters.register_dumper(None, JsonTextBinaryDumper)


def copy_rows(
    cursor: psycopg.Cursor[Any], statement: str, rows: Iterable[Sequence[Any]], types: dict[str, list[int]]
) -> None:
    """Stream ``rows`` with ``statement`` (``COPY table (columns) FROM STDIN (FORMAT
    BINARY)``); ``types`` caches each statement's column types (type oids)."""
    column_types = types.get(statement)
    if column_types is None:
        column_types = types[statement] = _column_types(cursor, statement)
    with cursor.copy(statement) as copy:
        copy.set_types(column_types)
        for row in rows:
            copy.write_row(row)


def _column_types(cursor: psycopg.Cursor[Any], statement: str) -> list[int]:
    """The type of each column the COPY names, as the table declares it: from the
    description of a read of those columns that returns no row."""
    found = _COPY.match(statement)
    if found is None:
        raise ValueError(f"not a binary COPY of named columns: {statement[:80]!r}")
    table, columns = found.group(1), [c.strip() for c in found.group(2).split(",")]
    query = sql.SQL("SELECT {} FROM {} LIMIT 0").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in columns), sql.Identifier(table)
    )
    cursor.execute(query)
    if cursor.description is None or len(cursor.description) != len(columns):
        raise ValueError(f"cannot read the column types of {table}")
    return [column.type_code for column in cursor.description]
