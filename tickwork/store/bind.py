"""Named queries that live beside the store instead of in ``queries.sql``.

Features built outside ``SQLStore`` (for now: signed-out sessions, tolerant task
listings) keep their SQL in their own ``.sql`` files, in the same ``-- name:`` format,
and add it to an SQL store's dialect with ``bind``. Their queries are portable (``CAST``
rather than ``::``), so one text serves SQLite and, with placeholders translated,
PostgreSQL.
"""

from __future__ import annotations

import threading
from typing import Any

from tickwork.errors import StoreError
from tickwork.store import queries
from tickwork.store.base import Store
from tickwork.store.sql import Dialect, SQLStore

_lock = threading.Lock()


def dialect_of(store: Store) -> Dialect:
    """The dialect of an SQL store (every store tickwork opens is one)."""
    if not isinstance(store, SQLStore):
        raise StoreError(f"{type(store).__name__} is not an SQL store")
    return store.dialect


def bind(dialect: Dialect, file: str) -> None:
    """Make the queries of ``file`` (in ``tickwork.store``) runnable by name in
    ``dialect``'s sessions. Idempotent and safe from many threads."""
    texts: dict[str, str] = queries.load(file)
    current: dict[str, str] = getattr(dialect, "texts")  # noqa: B009  # not part of the Dialect protocol
    if all(name in current for name in texts):
        return
    if type(dialect).__name__ == "PostgresDialect":
        from tickwork.store.postgres import translate

        texts = {name: translate(sql) for name, sql in texts.items()}
    with _lock:
        current = getattr(dialect, "texts")  # noqa: B009
        merged: dict[str, Any] = {**current, **texts}
        # A new dict, never the loader's cached one: sessions take the dialect's texts
        # when they begin, so a running transaction keeps the set it started with.
        dialect.texts = merged  # type: ignore[attr-defined]
