"""Is the database there? One quick, independent connection, for callers that must
answer fast (the web layer while the database is away) instead of waiting out a pool.
"""

from __future__ import annotations

import math
from pathlib import Path

from tickwork.errors import StoreError
from tickwork.urls import masked, scrubbed

PG_PREFIXES = ("postgresql:", "postgres:", "postgresql+psycopg:", "postgres+psycopg:")


def probe(url: str, timeout: float = 2.0) -> None:
    """Return if a connection to ``url``'s database can be made (and answers) within
    about ``timeout`` seconds; raise ``StoreError`` (the URL masked) otherwise.

    An embedded SQLite file is there when its directory is."""
    if url.startswith("sqlite:"):
        from tickwork.urls import path_from_url

        path = path_from_url(url)
        if not Path(path).parent.exists():
            raise StoreError(f"url={masked(url)!r}: directory {str(Path(path).parent)!r} does not exist")
        return
    if not url.startswith(PG_PREFIXES):
        raise StoreError(f"url={masked(url)!r}: unsupported database scheme")
    import psycopg

    from tickwork.store.postgres import normalize_url

    try:
        # libpq counts whole seconds, and treats less than 2 as 2.
        with psycopg.connect(normalize_url(url), connect_timeout=max(2, math.ceil(timeout)), autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        reason = " ".join(scrubbed(str(exc), url).split())
        raise StoreError(f"url={masked(url)!r}: cannot connect to PostgreSQL: {reason}") from None
