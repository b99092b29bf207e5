"""Signed-out dashboard sessions, kept in the database: every ``tickwork serve`` on it
refuses a cookie once its session signed out, however the cookie was copied.

A dashboard cookie is a signed session id (tickwork/web/auth.py), valid until it
expires; signing out adds the id (its SHA-256: the table holds nothing a cookie could
be made from) to ``tickwork_revoked_sessions`` until then. Reading a session costs one
primary-key lookup.

The table and its queries (sessions.sql) stand beside ``SQLStore`` for now; ``Revocations``
is the contract a store offers, and ``revocations(store)`` uses a store's own methods
when it has them.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Protocol, cast

from tickwork.store.base import Store
from tickwork.store.bind import bind, dialect_of
from tickwork.store.sql import Dialect


class Revocations(Protocol):
    def revoke_session(self, session_id: str, expires_at: datetime) -> None:
        """Refuse ``session_id`` from now on, at least until ``expires_at`` (after which
        no cookie of it is valid anyway); forget sessions whose time has passed."""
        ...

    def session_revoked(self, session_id: str) -> bool:
        """Whether ``session_id`` signed out."""
        ...


def revocations(store: Store) -> Revocations:
    if hasattr(store, "revoke_session") and hasattr(store, "session_revoked"):
        return cast(Revocations, store)
    return SQLRevocations(dialect_of(store))


def session_key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class SQLRevocations:
    def __init__(self, dialect: Dialect) -> None:
        bind(dialect, "sessions.sql")
        self.dialect = dialect

    def revoke_session(self, session_id: str, expires_at: datetime) -> None:
        d = self.dialect
        with d.transaction() as s:
            s.execute("revoke_session", {"id": session_key(session_id), "expires_at": d.encode_time(expires_at)})
            s.execute("prune_revoked_sessions", {"now": d.encode_time(d.approximate_now())})

    def session_revoked(self, session_id: str) -> bool:
        with self.dialect.reader() as s:
            return s.fetch_one("session_revoked", {"id": session_key(session_id)}) is not None
