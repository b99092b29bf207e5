"""The only package that speaks SQL. ``open_store(url)`` picks the store for a URL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from tickwork.clock import utcnow
from tickwork.errors import StoreError
from tickwork.store.base import Claim, NewTask, Outcome, Renewal, Skipping, Store
from tickwork.store.rows import UndecodableRow
from tickwork.store.sql import SQLStore
from tickwork.urls import masked

__all__ = ["Claim", "NewTask", "Outcome", "Renewal", "Skipping", "Store", "UndecodableRow", "open_store"]


def open_store(url: str, *, clock: Callable[[], datetime] = utcnow, claim: str | None = None) -> Store:
    """A store for ``url``. ``claim`` picks the claim strategy (default: the store's
    best); ``clock`` replaces the embedded store's clock in tests (a server database
    always uses its own)."""
    if url.startswith("sqlite:"):
        from tickwork.store.sqlite import SQLiteDialect
        from tickwork.urls import path_from_url

        return SQLStore(SQLiteDialect(path_from_url(url), clock), claim)
    if url.startswith(("postgresql:", "postgres:", "postgresql+psycopg:", "postgres+psycopg:")):
        from tickwork.store.postgres import PostgresDialect

        dialect = PostgresDialect(url)
        try:
            return SQLStore(dialect, claim)
        except Exception:
            dialect.close()
            raise
    scheme = url.split(":", 1)[0] if ":" in url else url
    raise StoreError(
        f"url={masked(url)!r}: unsupported database scheme {scheme!r} (expected sqlite:///PATH or postgresql://...)"
    )
