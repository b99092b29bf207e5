"""The listening connection (store/pg_listen.py) waits on its socket, not in psycopg's
0.1 s steps: what it must still do is deliver every NOTIFY, whether the thread was
waiting on the socket or busy with the keeper query when it came, see a stop, and come
back after its session is ended."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.conftest import wait_for
from tickwork.store import pg_listen
from tickwork.store.dialect import Election
from tickwork.store.pg_listen import CHANNEL, LISTEN_TURN_S, Listener

TAKE_KEEPER = "SELECT pg_try_advisory_lock(4242, hashtext(%(group)s)) AS took"


class Heard:
    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, payload: str) -> None:
        with self.lock:
            self.payloads.append(payload)

    def seen(self) -> list[str]:
        with self.lock:
            return list(self.payloads)

    def has(self, payload: str) -> bool:
        return payload in self.seen()


@pytest.fixture
def listening(pg_url: str) -> Iterator[tuple[Heard, threading.Event, threading.Thread]]:
    heard, stop = Heard(), threading.Event()
    listener = Listener(pg_url, {}, TAKE_KEEPER)
    thread = threading.Thread(target=listener.run, args=(heard, stop, None), daemon=True)
    thread.start()
    wait_for(lambda: "" in heard.seen(), timeout=10)  # listening: told once at the start
    yield heard, stop, thread
    stop.set()
    thread.join(10)
    assert not thread.is_alive()


def notify(url: str, *payloads: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for payload in payloads:
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))


def session(url: str, where: str, *params: object) -> tuple[Any, ...] | None:
    """The pid of this database's newest other session matching ``where`` (a fixed
    condition of this file, its values as ``params``), or None."""
    with psycopg.connect(url, autocommit=True) as conn:
        query = (
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND " + where + " ORDER BY backend_start DESC LIMIT 1"
        )
        return conn.execute(query, params).fetchone()


def listener_pid(url: str) -> int:
    """The listening session: the newest of this database whose LISTEN has finished (a
    previous test's may linger a moment after its close)."""

    def pid() -> int | None:
        row = session(url, "query = %s AND state = 'idle'", f"LISTEN {CHANNEL}")
        return None if row is None else int(row[0])

    found = wait_for(pid, timeout=10)
    assert isinstance(found, int)
    return found


def test_each_notify_is_heard_in_order_while_the_listener_waits(
    pg_url: str, listening: tuple[Heard, threading.Event, threading.Thread]
) -> None:
    heard, _, _ = listening
    notify(pg_url, "one", "two")
    notify(pg_url, "three")
    wait_for(lambda: heard.seen()[-3:] == ["one", "two", "three"], timeout=5)
    assert [p for p in heard.seen() if p] == ["one", "two", "three"]


def test_a_stop_ends_the_listener(listening: tuple[Heard, threading.Event, threading.Thread]) -> None:
    _, stop, thread = listening
    stop.set()
    thread.join(LISTEN_TURN_S + 10)  # it looks at the stop once a turn
    assert not thread.is_alive()


def test_the_listener_reads_its_connection_only_without_waiting(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, listening: tuple[Heard, threading.Event, threading.Thread]
) -> None:
    """It waits on the socket, not in ``notifies(timeout=...)``: that wait wakes every
    0.1 s (psycopg looks for a KeyboardInterrupt), ten times a second on an idle node."""
    heard, _, _ = listening
    timeouts: list[float | None] = []
    notifies = psycopg.Connection.notifies

    def spied(self: psycopg.Connection[Any], **kwargs: Any) -> Any:
        timeouts.append(kwargs.get("timeout"))
        return notifies(self, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "notifies", spied)
    for i in range(3):  # each read after the spy is in place
        notify(pg_url, f"spied{i}")
        wait_for(functools.partial(heard.has, f"spied{i}"), timeout=5)
    assert timeouts and set(timeouts) == {0}


def test_an_ended_session_is_replaced_and_heard_from_again(
    pg_url: str, listening: tuple[Heard, threading.Event, threading.Thread]
) -> None:
    heard, _, _ = listening
    pid = listener_pid(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    # Told again (""): notifications sent while it was away are lost, the node must look.
    wait_for(lambda: heard.seen().count("") >= 2, timeout=15)
    wait_for(lambda: listener_pid(pg_url) != pid, timeout=10)
    notify(pg_url, "after")
    wait_for(lambda: "after" in heard.seen(), timeout=5)


HELD = 4243
"""An advisory lock the test holds, which the slow keeper query waits for: the test
sends its NOTIFY while the query waits, then lets it finish."""


def keeper_query_waits(url: str) -> bool:
    return session(url, "wait_event = 'advisory' AND query LIKE %s", f"%pg_advisory_xact_lock({HELD})%") is not None


def test_a_notify_that_came_with_the_keeper_query_is_heard(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A NOTIFY that arrives while a keeper retry runs is read with its result, not
    from the socket: it must be heard then, not when something next comes on the socket
    (here nothing comes, and the next retry is a minute away)."""
    group = "listen-test"
    holder: psycopg.Connection[Any] = psycopg.connect(pg_url, autocommit=True)
    try:
        holder.execute(TAKE_KEEPER, {"group": group})  # another node is keeper: we retry
        roles: list[bool | None] = []
        heard, stop = Heard(), threading.Event()
        waiting_keeper = f"SELECT took FROM ({TAKE_KEEPER}) AS t, (SELECT pg_advisory_xact_lock({HELD})) AS w"
        listener = Listener(pg_url, {}, waiting_keeper)
        election = Election(group, roles.append)
        thread = threading.Thread(target=listener.run, args=(heard, stop, election), daemon=True)
        thread.start()
        try:
            wait_for(lambda: roles == [False], timeout=10)  # the first try, at the start
            holder.execute("SELECT pg_advisory_lock(%s)", (HELD,))
            wait_for(lambda: keeper_query_waits(pg_url), timeout=10)  # the first retry, held
            monkeypatch.setattr(pg_listen, "KEEPER_RETRY_S", 60.0)
            notify(pg_url, "during")  # reaches the listener before the query's result
            holder.execute("SELECT pg_advisory_unlock(%s)", (HELD,))
            wait_for(lambda: "during" in heard.seen(), timeout=10)
            assert set(roles) == {False}
        finally:
            stop.set()
            thread.join(10)
    finally:
        holder.close()
