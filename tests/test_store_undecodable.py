"""Rows the store cannot decode (written by a program that is not tickwork, or by a
version that knows values this one does not): a ``StoreError`` that names the table,
the column and the row, shows a clipped value and never task data; a claim fails such
a row and goes on with the others. PostgreSQL's infinite timestamps are such values."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

import pytest

from tickwork.errors import StoreError
from tickwork.model import ExecutionStatus, Kind, Status
from tickwork.schedules import outcome_of
from tickwork.store import NewTask, Store, UndecodableRow, open_store
from tickwork.store.rows import SHOWN

NAME = "undecodable.job"

# (column, SQL value, what the error shows of it) per store kind.
TASK_CORRUPTIONS = {
    "sqlite": [
        ("status", "'WEIRD'", "'WEIRD'"),
        ("scheduled_at", "'yesterday'", "'yesterday'"),
        ("next_run_at", "'soon'", "'soon'"),
        ("args", "'not json'", "8 characters, not shown"),
    ],
    "postgres": [
        ("misfire", "'SOMETIMES'", "'SOMETIMES'"),
        ("last_status", "'LOST'", "'LOST'"),
        ("scheduled_at", "'infinity'", "infinity"),
        ("next_run_at", "'-infinity'", "-infinity"),
    ],
}


def kind_of(url: str) -> str:
    return "sqlite" if url.startswith("sqlite:") else "postgres"


def corrupt(url: str, table: str, row_id: int, column: str, value: str) -> None:
    """A raw UPDATE, as a program that is not tickwork would write it."""
    statement = f"UPDATE {table} SET {column} = {value} WHERE id = {row_id}"
    if kind_of(url) == "sqlite":
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute("PRAGMA ignore_check_constraints = ON")
            assert conn.execute(statement).rowcount == 1
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute(statement).rowcount == 1


def due(store: Store, name: str = NAME) -> NewTask:
    slot = store.now() - timedelta(seconds=10)
    return NewTask(name=name, args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=slot, next_run_at=slot)


def test_an_undecodable_task_names_its_table_column_and_row(store: Store, store_url: str) -> None:
    for column, value, shown in TASK_CORRUPTIONS[kind_of(store_url)]:
        name = f"{NAME}.{column}"
        good, bad = store.insert_tasks([due(store, name), due(store, name)])
        corrupt(store_url, "tickwork_tasks", bad.id, column, value)
        with pytest.raises(UndecodableRow) as raised:
            store.get_task(bad.id)
        error = raised.value
        assert isinstance(error, StoreError) and isinstance(error, ValueError)
        assert (error.table, error.column, error.row_id) == ("tickwork_tasks", column, bad.id)
        assert str(error).startswith(f"tickwork_tasks.{column} of row id={bad.id}: cannot be decoded: ")
        assert str(error).endswith(f"(stored: {shown})"), str(error)
        with pytest.raises(UndecodableRow, match=f"tickwork_tasks.{column} of row id={bad.id}"):
            store.list_tasks(name=name)
        assert store.get_task(good.id) == good  # the other rows read as ever
        assert store.task_header(bad.id) is not None


def test_a_claim_fails_an_undecodable_row_and_claims_the_others(store_url: str) -> None:
    column, value, _ = TASK_CORRUPTIONS[kind_of(store_url)][-1]  # next_run_at: still due
    if kind_of(store_url) == "sqlite":
        column, value = "misfire", "'FROM_THE_FUTURE'"  # text sorts after every time in SQLite
    probe = open_store(store_url)
    probe.migrate()
    strategies = probe.dialect.strategies  # type: ignore[attr-defined]
    probe.close()
    for strategy in strategies:
        store = open_store(store_url, claim=strategy)
        first, bad, last = store.insert_tasks([due(store), due(store), due(store)])
        corrupt(store_url, "tickwork_tasks", bad.id, column, value)
        claims = store.claim("node", [NAME], 10, 30.0)
        assert sorted(c.task.id for c in claims) == [first.id, last.id], strategy
        [run] = store.list_executions(task_id=bad.id)
        assert run.status is ExecutionStatus.FAILED and run.error is not None
        assert run.error.type == "UndecodableTask"
        assert store.claim("node", [NAME], 10, 30.0) == []  # no longer in line
        header = store.task_header(bad.id)
        assert header is not None and header.status == Status.FAILED.value
        store.close()


def test_an_undecodable_execution_names_its_table_column_and_row(store: Store, store_url: str) -> None:
    task = store.insert_tasks([due(store)])[0]
    [claim] = store.claim("node", [NAME], 1, 30.0)
    # its row, written when it ended (PostgreSQL writes none while a run goes on)
    assert store.finish("node", [outcome_of(claim, ExecutionStatus.COMPLETED, store.now())]) == [True]
    if kind_of(store_url) == "sqlite":
        column, value, shown = "status", "'MAYBE'", "'MAYBE'"
    else:
        column, value, shown = "started_at", "'-infinity'", "-infinity"
    corrupt(store_url, "tickwork_executions", claim.execution_id, column, value)
    with pytest.raises(UndecodableRow) as raised:
        store.list_executions(task_id=task.id)
    assert (raised.value.table, raised.value.column, raised.value.row_id) == (
        "tickwork_executions",
        column,
        claim.execution_id,
    )
    assert str(raised.value).endswith(f"(stored: {shown})")


def test_a_long_value_is_clipped(store: Store, store_url: str) -> None:
    task = store.insert_tasks([due(store)])[0]
    corrupt(store_url, "tickwork_tasks", task.id, "misfire", "'" + "W" * 5000 + "'")
    with pytest.raises(UndecodableRow) as raised:
        store.get_task(task.id)
    shown = str(raised.value).split("(stored: ")[1]
    assert len(shown) <= SHOWN + 1 and shown.endswith("...)")
    assert len(str(raised.value)) < 400


def test_task_data_is_never_quoted(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    store.migrate()
    task = store.insert_tasks([due(store)])[0]
    corrupt(sqlite_url, "tickwork_tasks", task.id, "kwargs", '\'{"password": "hunter2"\'')
    with pytest.raises(UndecodableRow) as raised:
        store.get_task(task.id)
    assert raised.value.column == "kwargs"
    assert "hunter2" not in str(raised.value) and "password" not in str(raised.value)
    assert "JSONDecodeError" in str(raised.value)
    store.close()


def test_failing_an_undecodable_claim_is_fenced_by_that_claim(store: Store) -> None:
    """The claim is decoded after its transaction: by the time an undecodable row is
    failed the task may have moved on (its lease lost and claimed again). Only the claim
    that read it, by its version and lease owner, sets it FAILED."""
    store.insert_tasks([due(store)])
    [claim] = store.claim("node", [NAME], 1, 30.0)
    runs = store._runs  # type: ignore[attr-defined]
    row = {"id": claim.task.id, "version": claim.fence, "execution_id": claim.execution_id}
    runs._fail_undecodable("node", [{**row, "version": claim.fence - 1}])  # an earlier claim's
    runs._fail_undecodable("other", [row])  # another node's
    header = store.task_header(claim.task.id)
    assert header is not None and header.status == Status.RUNNING.value
    [run] = store.list_executions(task_id=claim.task.id)
    assert run.status is ExecutionStatus.RUNNING
    runs._fail_undecodable("node", [row])  # the claim's own
    header = store.task_header(claim.task.id)
    assert header is not None and header.status == Status.FAILED.value
    [run] = store.list_executions(task_id=claim.task.id)
    assert run.status is ExecutionStatus.FAILED
