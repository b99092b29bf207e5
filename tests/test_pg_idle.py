"""A pooled connection the server has closed is found before a statement is sent on it
(store/pg_idle.py): after an outage that ended every session, the first claim on each
dead pooled connection used to fail and pause its node, so nodes resumed seconds late.
And what else a hot-path connection promises: its statements are prepared at once."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.conftest import wait_for
from tickwork.store.pg_idle import closed_by_server
from tickwork.store.postgres import PostgresDialect


def terminate(url: str, pid: int) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def terminate_and_wait(url: str, pid: int) -> None:
    """End the session ``pid`` and return once the server has let it go."""
    terminate(url, pid)

    def ended() -> bool:
        with psycopg.connect(url, autocommit=True) as admin:
            return admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() is None

    wait_for(ended, timeout=10)


def test_an_idle_connection_the_server_ended_is_told_without_a_round_trip(pg_url: str) -> None:
    conn: psycopg.Connection[Any] = psycopg.connect(pg_url, autocommit=True)
    try:
        conn.execute("SELECT 1")
        assert not closed_by_server(conn)  # live and idle: nothing to read
        terminate(pg_url, conn.info.backend_pid)
        wait_for(lambda: closed_by_server(conn), timeout=10)
    finally:
        conn.close()
    assert closed_by_server(conn)  # closed here too


def test_a_statement_after_the_server_ended_the_pooled_connection_goes_through(pg_url: str) -> None:
    d = PostgresDialect(pg_url, pool_size=1)
    try:
        with d.single() as s:
            before = s.fetch_one("clock", {})
        assert before is not None
        with d.autocommit_pool.connection() as conn:  # the pool's one connection, idle again after
            pid = conn.info.backend_pid
        terminate_and_wait(pg_url, pid)
        with d.single() as s:  # before pg_idle: "terminating connection due to administrator command"
            after = s.fetch_one("clock", {})
        assert after is not None
        with d.autocommit_pool.connection() as conn:
            assert conn.info.backend_pid != pid
    finally:
        d.close()


def test_the_schema_check_after_the_server_ended_the_pooled_connection_goes_through(pg_url: str) -> None:
    """``migrate`` reads the schema's version first, and ``/healthz`` calls it on every
    probe: on a pooled connection the server had ended (a restart), it failed once, so
    the server answered 503 just after the database was back (tests/test_http_outage.py)."""
    d = PostgresDialect(pg_url, pool_size=1)
    try:
        version = d.migrate()
        with d.autocommit_pool.connection() as conn:  # the pool's one connection, idle again after
            pid = conn.info.backend_pid
        terminate_and_wait(pg_url, pid)
        assert d.migrate() == version  # before: "terminating connection due to administrator command"
        with d.autocommit_pool.connection() as conn:
            assert conn.info.backend_pid != pid
    finally:
        d.close()


def test_a_hot_path_statement_is_prepared_at_its_first_run(pg_url: str) -> None:
    """Unprepared, each pooled connection's first claims were parsed and planned afresh
    (psycopg's default prepares at the fifth run): the server lists it after one run."""
    d = PostgresDialect(pg_url, pool_size=1)
    try:
        with d.single() as s:
            assert s.fetch_one("clock", {}) is not None
        with d.autocommit_pool.connection() as conn:  # the pool's one connection
            prepared = conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()
        assert any("clock_timestamp()" in statement for (statement,) in prepared), prepared
    finally:
        d.close()


def test_the_due_times_are_read_without_a_transaction_of_their_own(pg_url: str) -> None:
    """An idle node reads its next due times every poll interval: in a transaction, its
    BEGIN and COMMIT were two more round trips (and thread wake-ups) than the statement."""
    from datetime import UTC, datetime, timedelta

    from tickwork import App

    app = App(pg_url)

    @app.task(name="t.later", context=False)
    def later() -> None:
        pass

    at = datetime.now(UTC) + timedelta(hours=1)
    app.schedule("t.later", at=at)
    store: Any = app.store
    dialect = store.dialect

    def no_transaction() -> None:
        raise AssertionError("the due-time read opened a transaction")

    try:
        dialect.transaction = dialect.reader = no_transaction
        [due] = store.upcoming_due(["t.later"])
        assert due.at == at and due.early
    finally:
        del dialect.transaction, dialect.reader
        app.close()
