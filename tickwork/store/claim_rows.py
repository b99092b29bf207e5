"""Claimed rows read by position: the node's claim, without a dict per row.

A claim returns a task row (~50 columns) per run, and a node decodes tens of thousands
a second. Through psycopg's ``dict_row`` and ``Decoder.claim`` that costs a dict per
row, a lookup and a conversion per column (~7 µs a row); PostgreSQL's driver already
hands over each value in its final type, so all a claim needs is the values in Task's
field order (one ``itemgetter`` call), the stored enum words turned into members, and a
check that the times came in UTC.

``ClaimRow`` keeps a row's values as the driver made them, beside its statement's
``Layout`` (its column names, read once per result). It is still a read-only mapping,
so every other reader of the row (the claim's own bookkeeping, the slow path, the
error that names an undecodable column) works as with any row. ``decode_claim`` takes
the fast path where it applies and ``Decoder.claim`` everywhere else: a row loaded
past an infinite time (pg_loading), a value the fast path does not expect, and every
row of a layout whose first row did not decode the same both ways (a schema whose
types differ from ours: ``Layout`` checks this once, on the first row it sees).

SQLite's driver hands values over as stored (times as integer microseconds, JSON as
text, booleans as 0/1): its claims go through ``StoredLayout``, which applies the very
conversions ``Decoder`` applies by name, by position, with the same first-row check.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC
from typing import Any

from tickwork.model import Claim, Task
from tickwork.store.dialect import Dialect
from tickwork.store.rows import ENUM_COLUMNS, TASK_COLUMNS, Decoder, build_task, stored_converters

log = logging.getLogger("tickwork.store")

_TIME_PROBE = "next_run_at"
"""A time column every task row holds: all of a result's times share its session's
time zone, so one tells whether they came in UTC."""


class Layout:
    """One result shape of a claim statement: its column names, where each Task field
    sits among them, and whether positional decoding is known to agree with Decoder."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.index = {name: i for i, name in enumerate(names)}
        self._lock = threading.Lock()
        self.agrees: bool | None = None
        """None until the first row is checked; then whether the fast path may be used."""
        try:
            self._getter = operator.itemgetter(*(self.index[c] for c in TASK_COLUMNS))
            self._enums = [(TASK_COLUMNS.index(c), members) for c, members in ENUM_COLUMNS.items()]
            self._probe = TASK_COLUMNS.index(_TIME_PROBE)
            self._execution_id = self.index["execution_id"]
            self._scheduled_for = self.index["execution_scheduled_for"]
        except (KeyError, ValueError):  # not a claim's columns: every row the slow way
            self.agrees = False

    def claim(self, values: Sequence[Any]) -> Claim | None:
        """The row's Claim, or None where the fast path does not apply (the caller then
        decodes it the slow way, which also names what is wrong with it)."""
        try:
            v = list(self._getter(values))
            for i, members in self._enums:
                if (word := v[i]) is not None:
                    v[i] = members[word]
            if v[self._probe].tzinfo is not UTC:
                return None
            return Claim(build_task(*v, False), values[self._execution_id], values[self._scheduled_for])
        except Exception:
            return None

    def check(self, row: ClaimRow, decoder: Decoder) -> Claim:
        """The first row of this layout, decoded both ways: the fast path is used from
        then on only if it made the very same claim, value and type."""
        slow = decoder.claim(row)  # raises for an undecodable row: nothing learned
        with self._lock:
            if self.agrees is None:
                self.agrees = same_claim(self.claim(row.cells), slow)
                if not self.agrees:
                    log.warning("claimed rows of this store are decoded the slow way: their types differ from ours")
        return slow


class StoredLayout(Layout):
    """A claim's columns as a driver hands them over unconverted (SQLite's), decoded by
    position with ``Decoder._task``'s own conversions (rows.stored_converters): ~4 µs a
    row where copying it into a dict and decoding that by name took ~10."""

    def __init__(self, names: tuple[str, ...], dialect: Dialect) -> None:
        super().__init__(names)
        self._converters = stored_converters(dialect)
        self._time = dialect.decode_time

    def claim(self, values: Sequence[Any]) -> Claim | None:
        try:
            v = list(self._getter(values))
            for i, convert in self._converters:
                v[i] = convert(v[i])
            scheduled_for = self._time(values[self._scheduled_for])
            if scheduled_for is None:
                return None
            return Claim(build_task(*v, False), int(values[self._execution_id]), scheduled_for)
        except Exception:
            return None


class ClaimRow(Mapping[str, Any]):
    """One claimed row: the driver's values and its statement's layout."""

    __slots__ = ("cells", "layout")

    def __init__(self, layout: Layout, values: Sequence[Any]) -> None:
        self.layout = layout
        self.cells = values

    def __getitem__(self, key: str) -> Any:
        return self.cells[self.layout.index[key]]

    def __iter__(self) -> Iterator[str]:
        return iter(self.layout.names)

    def __len__(self) -> int:
        return len(self.layout.names)


def decode_claim(decoder: Decoder, row: Mapping[str, Any]) -> Claim:
    """``decoder.claim(row)``, by position where that is known to give the same claim."""
    if type(row) is ClaimRow:
        layout = row.layout
        if layout.agrees:
            claim = layout.claim(row.cells)
            if claim is not None:
                return claim
        elif layout.agrees is None:
            return layout.check(row, decoder)
    return decoder.claim(row)


class Layouts:
    """The layouts seen so far, by column names (a claim statement has one or two).

    A result's names arrive as the driver's bytes (``PGresult.fname``): a claim looks
    its layout up by them as they are, and decodes them only the first time."""

    def __init__(self, make: Callable[[tuple[str, ...]], Layout] = Layout) -> None:
        self._by_fields: dict[tuple[bytes | None, ...], Layout] = {}
        self._by_names: dict[tuple[str, ...], Layout] = {}
        self._make = make

    def get(self, fields: tuple[bytes | None, ...]) -> Layout:
        layout = self._by_fields.get(fields)
        if layout is None:
            names = tuple((name or b"").decode() for name in fields)
            layout = self._by_fields.setdefault(fields, self._make(names))
        return layout

    def named(self, names: tuple[str, ...]) -> Layout:
        """The layout of a result whose column names come as text (SQLite's)."""
        layout = self._by_names.get(names)
        if layout is None:
            layout = self._by_names.setdefault(names, self._make(names))
        return layout

    def seen(self) -> list[Layout]:
        return [*self._by_fields.values(), *self._by_names.values()]

    def row_maker(self, fields: tuple[bytes | None, ...]) -> Callable[[Sequence[Any]], ClaimRow]:
        """What makes each row of a result with these columns."""
        layout = self.get(fields)
        return lambda values: ClaimRow(layout, values)


def same_claim(fast: Claim | None, slow: Claim) -> bool:
    """Whether two claims hold equal values of the same types, field by field."""
    if fast is None or type(fast.task) is not Task:
        return False
    pairs = [(getattr(fast.task, f), getattr(slow.task, f)) for f in _TASK_FIELDS]
    pairs += [(fast.execution_id, slow.execution_id), (fast.scheduled_for, slow.scheduled_for)]
    return all(type(a) is type(b) and a == b for a, b in pairs)


_TASK_FIELDS = [f.name for f in dataclasses.fields(Task)]
