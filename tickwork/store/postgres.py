"""The PostgreSQL dialect: a psycopg 3 connection pool, server-side time, LISTEN/NOTIFY.

Queries are the portable ones with ``:name`` placeholders, translated to psycopg's
``%(name)s`` when loaded, and ``:now`` to ``now()``: the database clock decides what is
due and when a lease ends. Batches go in one round trip (a pipelined ``executemany``,
or one statement over arrays).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb, set_json_loads
from psycopg_pool import ConnectionPool

from tickwork.clock import utcnow
from tickwork.codec import dumps
from tickwork.errors import StoreError
from tickwork.store import pg_copy, queries
from tickwork.store.claim_rows import Layouts
from tickwork.store.dialect import Election, HotPath, iter_statements
from tickwork.store.hot import SetBased
from tickwork.store.pg_idle import closed_by_server
from tickwork.store.pg_listen import Listener
from tickwork.store.pg_loading import JsonbBinaryLoader, claim_rows, loads_json
from tickwork.store.pg_session import PgSession
from tickwork.urls import masked, scrubbed

log = logging.getLogger("tickwork.store.postgres")

STATEMENT_TIMEOUT_MS = 30_000
LOCK_TIMEOUT_MS = 5_000
# A pool can hold several connections the server dropped at once: try that many + 1.
BEGIN_ATTEMPTS = 12
# How often the estimate of the database clock is refreshed (see PostgresDialect.now).
CLOCK_REFRESH_S = 30.0
OFFSET_SAMPLES = 3
_PLACEHOLDER = re.compile(r"(?<![:\w]):(?!:)(\w+)")
_MIGRATION = re.compile(r"^(\d{4})_\w+\.sql$")
# Taken by every migrating process so that exactly one applies each migration.
_MIGRATION_LOCK = 0x7469636B  # "tick"

# How long a caller waits for a pooled connection before its operation fails (and is
# retried by its caller): a claim, a renewal or a result never queues for half a minute.
CONNECTION_WAIT_S = 2.0
# How long the pool keeps re-trying a connection that broke before it gives up on it; a
# later request then connects at once. Short, so that a node resumes within about a
# second of the server answering again, rather than at the end of a growing back-off.
RECONNECT_GIVE_UP_S = 1.0
# SQLSTATE classes of errors that pass: connection trouble, transaction rollbacks
# (deadlock, serialization), insufficient resources (a full disk), operator intervention
# (shutdown, restart, crash recovery), a read-only server (a standby, or read-only mode),
# a lock or statement timeout.
_TRANSIENT_CLASSES = ("08", "40", "53", "57")
_TRANSIENT_STATES = ("25006", "55P03", "57014")

CONNECT_KWARGS: dict[str, Any] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


def translate(sql: str) -> str:
    """``:name`` → ``%(name)s`` and ``:now`` → ``now()``, leaving ``::type`` casts alone."""

    def placeholder(match: re.Match[str]) -> str:
        name = match.group(1)
        return "now()" if name == "now" else f"%({name})s"

    return _PLACEHOLDER.sub(placeholder, sql)


def _already_encoded(text: Any) -> str:
    return str(text)


SESSION_SETTINGS = {
    "statement_timeout": str(STATEMENT_TIMEOUT_MS),
    # A lock held for longer than this fails the waiting statement, which its caller
    # retries: a claim or renewal never sits out a lease behind one.
    "lock_timeout": str(LOCK_TIMEOUT_MS),
    "TimeZone": "UTC",
    # The limits' claim (store/limits.py) reads its counts after taking its keys, in a
    # statement of its own: under READ COMMITTED that statement sees every claim the
    # keys' previous holders committed. Pinned, whatever the database's default.
    "default_transaction_isolation": "read committed",
    # Every query of ours is an index walk in index order. With statistics that lag a
    # burst of inserts (a herd of tasks due at once), the planner would otherwise pick a
    # bitmap scan and sort every due row on every claim.
    "enable_bitmapscan": "off",
    # A plan the planner costs high (a generic plan guesses a LIMIT parameter at a tenth
    # of the table) is JIT-compiled first: 30 ms to claim 32 rows of a 1,000,000-row
    # table, where the walk itself takes under 1 ms. Nothing of ours runs long enough to
    # repay a compilation.
    "jit": "off",
}


HOT_PATH_SETTINGS = {
    # The hot path's statements (claims, renewals, outcomes) are index walks whatever their
    # parameters, and psycopg prepares each after a few runs. Left to choose, PostgreSQL
    # keeps planning a claim's LATERAL walk of its queues afresh on every run (a custom
    # plan each time: its estimate for an array parameter is never beaten by the generic
    # plan's), which costs more than the walk itself. Only the autocommit pool's
    # connections, which run nothing else but the poll loop's one-statement reads (the
    # clock, the due times: index walks too): the listings' optional filters need custom plans.
    "plan_cache_mode": "force_generic_plan",
}


def session_options(url: str, extra: dict[str, str] | None = None) -> str:
    """Our session settings (and ``extra``) as libpq ``options`` (set at connect, no
    round trip), after any options the URL already carries."""
    given = conninfo_to_dict(url).get("options") or ""
    settings = {**SESSION_SETTINGS, **(extra or {})}
    escaped = {name: value.replace(" ", "\\ ") for name, value in settings.items()}  # libpq's escape
    ours = " ".join(f"-c {name}={value}" for name, value in escaped.items())
    return f"{given} {ours}".strip()


def normalize_url(url: str) -> str:
    for prefix in ("postgresql+psycopg://", "postgres+psycopg://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


class PostgresDialect:
    notifies = True
    QUERY_FILES = (
        "queries.sql", "retention.sql", "edits.sql", "insights.sql", "queues.sql", "limits.sql", "postgres.sql",
        "postgres_retention.sql", "postgres_edits.sql", "postgres_insights.sql",
    )  # fmt: skip
    """The portable query files, then this dialect's, which override them by name."""
    strategies: tuple[str, ...] = ("skip_locked", "optimistic")

    def __init__(self, url: str, *, pool_size: int = 6) -> None:
        self.url = normalize_url(url)
        try:
            options = session_options(self.url)
        except psycopg.Error as exc:  # a malformed URL: the driver's message quotes it whole
            raise StoreError(f"url={masked(url)!r}: not a valid PostgreSQL URL: {scrubbed(str(exc), url)}") from None
        self.connect_kwargs = {**CONNECT_KWARGS, "options": options}
        self.hot_path_options = session_options(self.url, HOT_PATH_SETTINGS)
        texts = queries.load(*self.QUERY_FILES)
        self.texts = {name: translate(sql) for name, sql in texts.items()}
        self.copy_types: dict[str, list[int]] = {}
        """Each COPY statement's column types, read from its table once (pg_copy)."""
        self.layouts = Layouts()
        self.claim_rows = claim_rows(self.layouts)
        # Claims, renewals and outcomes as one set-based statement each, committing itself.
        self.hot_path: HotPath = SetBased(self)
        self._offset = timedelta(0)
        self._offset_at = -CLOCK_REFRESH_S
        self._offset_lock = threading.Lock()
        # A node's hot path (claims, results, renewals) uses the autocommit pool, one
        # connection per loop; transactions are for clients and the node's bookkeeping.
        # Small pools: PostgreSQL's default of 100 connections must serve many nodes.
        self.pool = self._pool(max(2, pool_size // 2), autocommit=False)
        # single() statements commit themselves: connections that never toggle modes.
        self.autocommit_pool = self._pool(pool_size, autocommit=True)
        try:
            # One direct connection first: a server that refuses is reported at once,
            # not after the pools' patient retries.
            psycopg.connect(self.url, **self.connect_kwargs).close()
            self.pool.open(wait=True, timeout=15)
            self.autocommit_pool.open(wait=True, timeout=15)
        except Exception as exc:
            self.close()
            raise StoreError(f"url={masked(url)!r}: cannot connect to PostgreSQL: {scrubbed(str(exc), url)}") from None

    def _pool(self, size: int, *, autocommit: bool) -> ConnectionPool[psycopg.Connection[Any]]:
        return ConnectionPool(
            self.url,
            min_size=1,
            max_size=size,
            kwargs={
                **self.connect_kwargs,
                "autocommit": autocommit,
                # The hot path's statements are prepared at their first run (psycopg's
                # default waits for the fifth): unprepared, each pooled connection's first
                # claims were parsed and planned afresh, ~3 ms in the server each.
                **({"options": self.hot_path_options, "prepare_threshold": 0} if autocommit else {}),
            },
            configure=self._configure,
            timeout=CONNECTION_WAIT_S,
            reconnect_timeout=RECONNECT_GIVE_UP_S,
            name="tickwork-autocommit" if autocommit else "tickwork",
            open=False,
        )

    @staticmethod
    def _configure(conn: psycopg.Connection[Any]) -> None:
        set_json_loads(loads_json, conn)
        conn.adapters.register_loader("jsonb", JsonbBinaryLoader)
        pg_copy.register(conn)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[PgSession]:
        """A transaction on a pooled connection. A connection the server dropped (a
        restart, a failover, an idle timeout) fails at BEGIN, before anything was sent:
        it is discarded and the transaction starts again on a fresh one."""
        for attempt in range(1, BEGIN_ATTEMPTS + 1):
            stack = contextlib.ExitStack()
            try:
                conn = stack.enter_context(self.pool.connection())
                stack.enter_context(conn.transaction())
            except psycopg.OperationalError:
                stack.close()  # the pool discards the broken connection
                if attempt == BEGIN_ATTEMPTS:
                    raise
                continue
            with stack:
                yield self._session(conn.cursor(row_factory=dict_row))
            return

    @contextlib.contextmanager
    def single(self) -> Iterator[PgSession]:
        """Autocommit, for one statement that is atomic by itself: one round trip, no
        BEGIN or COMMIT of its own."""
        with self._autocommit_connection() as conn:
            yield self._session(conn.cursor(row_factory=dict_row, binary=True))

    @contextlib.contextmanager
    def _autocommit_connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled autocommit connection. One the server has closed since it was last
        used is discarded before anything is sent on it (store/pg_idle.py)."""
        for attempt in range(1, BEGIN_ATTEMPTS + 1):
            with self.autocommit_pool.connection() as conn:
                if attempt < BEGIN_ATTEMPTS and closed_by_server(conn):
                    conn.close()  # the pool discards it; the next one may be alive
                    continue
                yield conn
                return

    reader = transaction
    single_read = single

    def _session(self, cursor: psycopg.Cursor[Any]) -> PgSession:
        return PgSession(cursor, self.texts, self.copy_types, self.claim_rows)

    def migrate(self) -> int:
        package = resources.files("tickwork.store").joinpath("migrations/postgres")
        migrations = sorted(
            (int(m.group(1)), entry.name) for entry in package.iterdir() if (m := _MIGRATION.match(entry.name))
        )
        latest = migrations[-1][0] if migrations else 0
        if self._schema_version() == latest:
            return latest  # the usual case: no lock, one round trip
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS tickwork_schema (version INTEGER NOT NULL)")
            row = conn.execute("SELECT MAX(version) FROM tickwork_schema").fetchone()
            current = int(row[0] or 0) if row else 0
            if current > latest:
                raise StoreError(
                    f"schema version {current} is newer than this tickwork knows ({latest}): upgrade tickwork"
                )
            for number, name in migrations:
                if number <= current:
                    continue
                script = package.joinpath(name).read_text("utf-8")
                for statement in iter_statements(script):
                    conn.execute(statement.encode())
                conn.execute("INSERT INTO tickwork_schema (version) VALUES (%s)", (number,))
                current = number
        return current

    def _schema_version(self) -> int | None:
        try:
            with self._autocommit_connection() as conn:
                row = conn.execute("SELECT MAX(version) FROM tickwork_schema").fetchone()
        except psycopg.errors.UndefinedTable:
            return None
        return int(row[0]) if row and row[0] is not None else None

    def now(self) -> datetime:
        """The database clock, read from the database."""
        with self.transaction() as s:
            row = s.fetch_one("clock", {})
        assert row is not None
        clock: datetime = row["now"]
        return clock.astimezone(UTC)

    def approximate_now(self) -> datetime:
        """The database clock without a round trip: the local clock plus an offset
        measured every CLOCK_REFRESH_S, off by about half a round trip. For values a
        node computes (retry times, sleeps); what is due and when leases end is decided
        by now() in SQL."""
        if time.monotonic() - self._offset_at > CLOCK_REFRESH_S and self._offset_lock.acquire(blocking=False):
            try:
                self._refresh_offset()
            finally:
                self._offset_lock.release()
        return utcnow() + self._offset

    def _refresh_offset(self) -> None:
        """The offset from the quickest of a few reads of the clock, each timed around its
        statement alone on an open connection: timed around a pool checkout as well, the
        estimate ran ahead of the database by however long the checkout waited, and a
        node then passed over due times the database had not reached."""
        try:
            samples = []
            with self.single() as s:
                for _ in range(OFFSET_SAMPLES):
                    before = utcnow()
                    row = s.fetch_one("clock", {})
                    after = utcnow()
                    if row is not None:
                        database = row["now"].astimezone(UTC)
                        samples.append((after - before, database - (before + (after - before) / 2)))
            if samples:
                self._offset = min(samples, key=lambda sample: sample[0])[1]
        except Exception:
            log.warning("could not read the database clock; keeping the last offset", exc_info=True)
        self._offset_at = time.monotonic()

    def encode_time(self, value: datetime | None) -> datetime | None:
        return value

    def decode_time(self, value: Any) -> datetime | None:
        moment: datetime | None = value
        if moment is None or moment.tzinfo is UTC:  # sessions run in UTC: the usual case
            return moment
        if not isinstance(moment, datetime):  # an Unbounded: PostgreSQL's +/-infinity
            raise ValueError("an infinite time, which no datetime can hold")
        return moment.astimezone(UTC)

    def encode_json(self, value: Any) -> Jsonb:
        # Encode now, once: a value that cannot be encoded fails here, for its own
        # outcome, not later inside a whole batch's round trip.
        text = dumps(value)
        return Jsonb(text, dumps=_already_encoded)

    def decode_json(self, value: Any) -> Any:
        return value

    def encode_names(self, names: Sequence[str]) -> list[str]:
        return list(names)

    def encode_ids(self, ids: Sequence[int]) -> list[int]:
        return [int(i) for i in ids]

    def is_transient(self, exc: BaseException) -> bool:
        # Connection and server-side availability errors (and pool timeouts, a subclass),
        # and every error that a later try can get past (see _TRANSIENT_CLASSES).
        if isinstance(exc, (psycopg.OperationalError, psycopg.errors.TransactionRollback)):
            return True
        state = getattr(exc, "sqlstate", None) or ""
        return state.startswith(_TRANSIENT_CLASSES) or state in _TRANSIENT_STATES

    def listen(self, on_notify: Callable[[str], None], stop: threading.Event, elect: Election | None = None) -> None:
        Listener(self.url, self.connect_kwargs, self.texts["take_keeper"]).run(on_notify, stop, elect)

    def close(self) -> None:
        self.pool.close()
        self.autocommit_pool.close()
