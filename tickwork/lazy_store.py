"""The App's store: opened and migrated on first use, so that building an App (and
importing the module that builds it) never touches the database, and ``tickwork --db``
can still choose the URL of an App imported before the command line was read."""

from __future__ import annotations

import os
import threading

from tickwork.clock import Clock
from tickwork.store import Store, open_store

DEFAULT_URL = "sqlite:///tickwork.db"


def resolve_url(given: str | None) -> str:
    """The URL a store opened now would use: the one given, else ``TICKWORK_DB``, else
    the default file."""
    return given or os.environ.get("TICKWORK_DB") or DEFAULT_URL


class LazyStore:
    def __init__(self, url: str | None) -> None:
        self._url = url
        self._opened_url: str | None = None
        self._store: Store | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """The URL of the open store; before it is open, the one it would open."""
        return self._opened_url or resolve_url(self._url)

    def get(self, *, clock: Clock, claim: str | None) -> Store:
        """The store, opened and migrated by the first caller (the others wait for it)."""
        with self._lock:
            if self._store is None:
                url = self.url
                store = open_store(url, clock=clock, claim=claim)
                store.migrate()
                self._store, self._opened_url = store, url
            return self._store

    def close(self) -> None:
        """Close the store if it is open; the next ``get`` opens it again, reading
        ``TICKWORK_DB`` afresh."""
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store, self._opened_url = None, None
