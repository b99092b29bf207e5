"""The web layer's way to the database: no request waits for a database that is away.

A watcher thread opens the store when the server starts (start-up never waits for it)
and, while the store cannot be used, tries again every second or so, until it can: no
restart is needed. Meanwhile every request that needs the store is answered 503 with
Retry-After within ``patience`` seconds, all of them in parallel (none queues behind
another's connection attempt).

Route functions run through ``Database.run`` (or the ``guard`` decorator), on a pool of
threads of its own: a call that takes longer than ``patience`` makes the server ask
whether the database is there at all (``tickwork.store.probe``: one quick connection,
shared by every waiting request); if it is not, the request is answered 503 at once and
the call is left to end by itself, while the watcher takes over.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime
from typing import ParamSpec, TypeVar

from tickwork.app import App
from tickwork.clock import utcnow
from tickwork.errors import StoreError, TickworkError
from tickwork.redact import REDACTOR
from tickwork.store import Store
from tickwork.store.probe import probe
from tickwork.urls import scrubbed

log = logging.getLogger("tickwork.web")

P = ParamSpec("P")
R = TypeVar("R")

PATIENCE_S = 1.0
"""How long a request waits for the store before the server asks whether it is there."""
RETRY_AFTER_S = 2
PROBE_TIMEOUT_S = 2.0
RECHECK_S = 1.0
"""How often the watcher tries a store that cannot be used (doubling up to MAX_RECHECK_S)."""
MAX_RECHECK_S = 5.0
WORKERS = 32


class DatabaseUnavailable(TickworkError):
    """The database cannot be used now: answered 503 with Retry-After."""

    def __init__(self, reason: str, retry_after: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class Database:
    def __init__(
        self,
        app: App,
        *,
        patience: float = PATIENCE_S,
        retry_after: int = RETRY_AFTER_S,
        probe_timeout: float = PROBE_TIMEOUT_S,
        recheck: float = RECHECK_S,
    ) -> None:
        self.app = app
        self.patience = patience
        self.retry_after = retry_after
        self.probe_timeout = probe_timeout
        self.recheck = recheck
        self._on_open: list[Callable[[], None]] = []
        self._up = threading.Event()
        self._trouble = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._store: Store | None = None
        self._probe_lock = threading.Lock()
        self._probed: tuple[float, bool] = (-RECHECK_S, False)
        self.state = "starting"
        """starting (not opened yet), up, or down."""
        self.reason = "the database has not been opened yet"
        """Why it cannot be used, with every secret masked (for the log, not for clients)."""
        self.since: datetime = utcnow()

    # -- life --------------------------------------------------------------------------

    def start(self) -> None:
        """Start watching (and opening) the store; returns at once. Idempotent; a
        stopped Database starts again (a server's lifespan may run more than once)."""
        with self._lock:
            if self._thread is not None:
                return
            self._stopping = stopping = threading.Event()
            self._trouble.clear()
            self._executor = ThreadPoolExecutor(WORKERS, thread_name_prefix="tickwork-web-db")
            self._thread = threading.Thread(target=self._watch, args=(stopping,), name="tickwork-db-watch", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop watching; calls still running end by themselves."""
        with self._lock:
            thread, executor = self._thread, self._executor
            self._thread, self._executor = None, None
            self._stopping.set()
            self._trouble.set()
            self._up.clear()  # nothing is served until started again
        if thread is not None:
            thread.join(self.probe_timeout + 1.0)
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def on_open(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the watcher's thread) once the store first opens."""
        self._on_open.append(callback)

    @property
    def available(self) -> bool:
        return self._up.is_set()

    def wait_available(self, timeout: float) -> bool:
        self.start()
        return self._up.wait(timeout)

    # -- the request path --------------------------------------------------------------

    def store(self) -> Store:
        """The store, if it can be used now (or, while it is being opened, within
        ``patience`` seconds); else ``DatabaseUnavailable``, never a wait for a connection."""
        self.start()
        if not self._up.is_set() and (self.state == "down" or not self._up.wait(self.patience)):
            raise self.unavailable()
        return self.app.store

    def current(self) -> Store:
        """The store if it can be used now, without waiting (for metrics scrapes)."""
        if not self._up.is_set():
            raise self.unavailable()
        return self.app.store

    def now(self) -> datetime:
        """The store's approximate clock while it is up, else this host's."""
        return self.app.store.approximate_now() if self._up.is_set() else utcnow()

    def unavailable(self) -> DatabaseUnavailable:
        return DatabaseUnavailable(f"the database cannot be used: {self.reason}", self.retry_after)

    def run(self, call: Callable[[], R]) -> R:
        """``call()`` (which uses the store), answered within about ``patience`` seconds
        when the database is away: then ``DatabaseUnavailable``."""
        self.store()
        executor = self._executor
        if executor is None:
            raise self.unavailable()
        try:
            future: Future[R] = executor.submit(call)
        except RuntimeError:  # shut down: the server is stopping
            raise self.unavailable() from None
        while True:
            try:
                return future.result(timeout=self.patience)
            except FutureTimeout:
                if not self._reachable():
                    raise self.unavailable() from None
            except TickworkError:
                raise
            except Exception as exc:
                if self.is_transient(exc):
                    self._down(_describe(exc, self.app.url))
                    raise self.unavailable() from exc
                raise

    def guard(self, func: Callable[P, R]) -> Callable[P, R]:
        """A route function run through ``run`` (FastAPI still sees its signature)."""

        @functools.wraps(func)
        def route(*args: P.args, **kwargs: P.kwargs) -> R:
            return self.run(functools.partial(func, *args, **kwargs))

        return route

    def is_transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the database is away (503), not that a request hit a bug."""
        if isinstance(exc, DatabaseUnavailable):
            return True
        store = self._store
        try:
            return store is not None and store.is_transient(exc)
        except Exception:
            return False

    def _reachable(self) -> bool:
        """Whether a fresh connection can be made now: one probe at a time, its answer
        shared for ``recheck`` seconds."""
        with self._probe_lock:
            at, ok = self._probed
            if time.monotonic() - at < self.recheck:
                return ok
            try:
                probe(self.app.url, self.probe_timeout)
                ok = True
            except StoreError as exc:
                ok = False
                self._down(_describe(exc, self.app.url))
            self._probed = (time.monotonic(), ok)
            return ok

    # -- the watcher -------------------------------------------------------------------

    def _watch(self, stopping: threading.Event) -> None:
        delay = self.recheck
        while not stopping.is_set():
            if self._up.is_set():
                self._trouble.wait()
                self._trouble.clear()
                continue
            try:
                self._check()
            except Exception as exc:
                self._down(_describe(exc, self.app.url))
                stopping.wait(delay)
                delay = min(delay * 2, MAX_RECHECK_S)
                continue
            delay = self.recheck
            if not stopping.is_set():
                self._mark_up()
            if self._on_open:
                callbacks, self._on_open = self._on_open, []
                for callback in callbacks:
                    callback()

    def _check(self) -> None:
        """Return once the store answers a real read; raise why it cannot."""
        probe(self.app.url, self.probe_timeout)  # fails fast, without the pools' patience
        store = self.app.store  # opened and migrated on first use
        store.due_count(1)
        self._store = store

    def _mark_up(self) -> None:
        with self._lock:
            was = self.state
            self.state, self.since = "up", utcnow()
            self._probed = (time.monotonic(), True)
            self._up.set()
        if was == "down":
            log.warning("the database is back: serving again")
        else:
            log.info("database opened")

    def _down(self, reason: str) -> None:
        with self._lock:
            was, self.reason = self.state, reason
            if was == "down":
                return
            self.state, self.since = "down", utcnow()
            self._up.clear()
            self._probed = (time.monotonic(), False)
        log.warning("the database cannot be used (%s): answering 503 until it can, trying again", reason)
        self._trouble.set()


def _describe(exc: BaseException, url: str) -> str:
    """One line about ``exc``, with the URL's secrets (and any the process knows) masked."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if not isinstance(exc, TickworkError):
        text = f"{type(exc).__name__}: {text}"
    return REDACTOR.scrub(scrubbed(text, url))[:500]
