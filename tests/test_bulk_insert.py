"""Bulk inserts (``Store.insert_tasks``, behind ``schedule_many``): one statement per chunk
of tasks, rows matched back to their tasks by ids taken before the insert. On every real
store: order and ids across chunks, keys repeated inside one batch or already held, the
arguments' text kept exactly, and (PostgreSQL) two writers over the same keys."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from datetime import timedelta, timezone
from typing import Any

import pytest

from tests.conftest import wait_for
from tickwork.model import Encoded, Kind, Misfire, NewTask, OnLost, Overlap, Status
from tickwork.store import Store, inserts, open_store

NAME = "bulk.job"


def new(store: Store, kwargs: dict[str, Any] | None = None, *, key: str | None = None, args: Any = None) -> NewTask:
    at = store.now() + timedelta(hours=1)
    return NewTask(NAME, list(args or []), dict(kwargs or {}), Kind.ONE_TIME, at, at, key=key)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(inserts, "INSERT_CHUNK", 4)
    yield


def test_a_batch_of_several_chunks_comes_back_in_order_with_rising_ids(store: Store, small_chunks: None) -> None:
    tasks = [new(store, {"i": i}) for i in range(10)]
    stored = store.insert_tasks(tasks)
    assert [t.kwargs for t in stored] == [{"i": i} for i in range(10)]
    ids = [t.id for t in stored]
    assert ids == sorted(ids) and len(set(ids)) == 10
    assert all(not t.existed and t.status is Status.PENDING for t in stored)
    for task in stored:
        assert store.get_task(task.id) == task


def test_what_an_insert_returns_is_what_the_store_reads_back_for_every_option(store: Store) -> None:
    """The returned tasks are built from what was inserted, not read back: every column
    set away from its default (times given in another zone) must read back the same."""
    plus5 = timezone(timedelta(hours=5))
    at = (store.now() + timedelta(days=1)).astimezone(plus5)
    full = NewTask(
        NAME, [1, "two", {"3": [4.5]}], {"k": None}, Kind.RECURRING, at, at + timedelta(seconds=7), key="full",
        cron="0 9 * * 1-5", timezone="Europe/Berlin", interval=None, misfire=Misfire.SKIP, misfire_grace=12.5,
        jitter=7.0, timeout=3.25, max_retries=4, retry_backoff=2.5, priority=3, max_catchup=9,
        overlap=Overlap.REPLACE, parent_id=None, on_lost=OnLost.FAIL, max_runtime=99.0,
        until=at + timedelta(days=30), max_runs=12, origin="code", declared_at=at - timedelta(hours=1), max_lost=6,
        queue="reports", lock="db", max_running=2, rate_limit="10/m",
    )  # fmt: skip
    every = NewTask(NAME, [], {}, Kind.RECURRING, at, at, interval=0.25)
    keyless = dataclasses.replace(full, key=None)  # streamed in (copy_rows), not through insert_tasks
    alone = store.insert_tasks([dataclasses.replace(full, key="alone")])  # schedule()'s one-statement path
    for task in [*store.insert_tasks([full, every, keyless]), *alone]:
        assert store.get_task(task.id) == task
        assert task.scheduled_at.utcoffset() == timedelta(0)


def test_a_key_repeated_in_one_batch_stores_its_first_task_only(store: Store, small_chunks: None) -> None:
    tasks = [new(store, {"n": 1}, key="k"), new(store, {"n": 2}), new(store, {"n": 3}, key="k")]
    tasks += [new(store, {"n": 4}, key="other"), new(store, {"n": 5}, key="k")]  # the last in another chunk
    first, plain, again, other, later = store.insert_tasks(tasks)
    assert not first.existed and not plain.existed and not other.existed
    assert again.existed and later.existed
    assert again.id == later.id == first.id and again.kwargs == later.kwargs == {"n": 1}
    assert len({first.id, plain.id, other.id}) == 3


def test_a_key_a_live_task_holds_returns_that_task(store: Store) -> None:
    [held] = store.insert_tasks([new(store, {"n": 1}, key="k")])
    [again] = store.insert_tasks([new(store, {"n": 2}, key="k")])  # alone, as schedule() inserts
    assert again.existed and again.id == held.id and again.kwargs == {"n": 1}
    before, after = new(store, {"n": 2}), new(store, {"n": 3})
    got = store.insert_tasks([before, new(store, {"n": 9}, key="k"), after])
    assert [t.existed for t in got] == [False, True, False]
    assert got[1].id == held.id and got[1].kwargs == {"n": 1}
    assert store.get_task(held.id) == held  # untouched


ARGUMENTS = [
    ["ünïcødé ✓ 𝄞", 'quote " backslash \\ newline \n tab \t', "\u2028"],
    [2**63 - 1, -(2**62), 0.1, 2.5, 1e-7, True, None],
    [{"nested": [{"deep": [1, [2, [3]]]}], "empty": {}, "list": []}],
]


@pytest.mark.parametrize("args", ARGUMENTS, ids=["text", "numbers", "nested"])
def test_arguments_come_back_exactly_as_given(store: Store, args: list[Any]) -> None:
    [task] = store.insert_tasks([new(store, {"same": args}, args=args)])
    again = store.get_task(task.id)
    assert again is not None and again.args == args and again.kwargs == {"same": args}
    assert task.args == args


def test_a_copy_given_other_arguments_stores_those_not_the_text_checked_before(store: Store) -> None:
    original = new(store, {"old": 1}, args=["old"])
    checked = dataclasses.replace(original, encoded=Encoded(original.args, original.kwargs, ('["old"]', '{"old":1}')))
    changed = dataclasses.replace(checked, args=["new"], kwargs={"new": 2})
    [kept, replaced] = store.insert_tasks([checked, changed])
    assert (kept.args, kept.kwargs) == (["old"], {"old": 1})
    assert (replaced.args, replaced.kwargs) == (["new"], {"new": 2})


def test_a_batch_takes_its_keys_in_key_order_so_two_batches_never_deadlock(pg_url: str) -> None:
    """PostgreSQL waits on a key another open transaction inserted. Were a batch's rows
    inserted in the batch's order, a batch [b, a] holding b while it waits on a, and
    another writer holding a that then inserts b, would wait on each other. In key order
    the batch waits on a before it holds b: the other writer's b goes in at once."""
    import psycopg

    store = open_store(pg_url)
    try:
        at = store.now()
        other = psycopg.connect(pg_url)
        insert = (
            "INSERT INTO tickwork_tasks (name, key, kind, scheduled_at, next_run_at, status, created_at, updated_at) "
            "VALUES (%s, %s, 'ONE_TIME', %s, %s, 'PENDING', %s, %s)"
        )
        other.execute(insert, (NAME, "a", at, at, at, at))  # held open: the batch waits on "a"
        outcome: list[Any] = []
        batch = threading.Thread(
            target=lambda: outcome.append(store.insert_tasks([new(store, key="b"), new(store, key="a")]))
        )
        batch.start()
        waiting = (
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        with psycopg.connect(pg_url, autocommit=True) as watcher:
            assert wait_for(lambda: watcher.execute(waiting).fetchone()[0] == 1, timeout=10)  # type: ignore[index]
        other.execute("SET statement_timeout = '5s'")
        other.execute(insert, (NAME, "b", at, at, at, at))  # a deadlock would be detected here, within 1 s
        other.commit()
        other.close()
        batch.join(10)
        [got] = outcome
        assert [t.existed for t in got] == [True, True]
        assert {t.key for t in got} == {"a", "b"}
    finally:
        store.close()


def test_keyed_and_keyless_tasks_in_one_chunk_keep_their_order_and_ids(store: Store) -> None:
    """Keyless tasks and keyed ones go in by different statements: each result still
    sits at its item's place, a held key still answers with its holder."""
    [held] = store.insert_tasks([new(store, {"n": 0}, key="held")])
    batch = [new(store, {"n": 1}), new(store, {"n": 2}, key="held"), new(store, {"n": 3}, key="fresh")]
    batch += [new(store, {"n": 4})]
    got = store.insert_tasks(batch)
    assert [t.existed for t in got] == [False, True, False, False]
    assert [t.kwargs for t in got] == [{"n": 1}, {"n": 0}, {"n": 3}, {"n": 4}]
    assert got[1].id == held.id
    fresh = [got[0].id, got[2].id, got[3].id]
    assert fresh == sorted(fresh) and held.id not in fresh
    for task in (got[0], got[2], got[3]):
        assert store.get_task(task.id) == task


Scalar = (str, int, float, bool, type(None))


@pytest.mark.parametrize("given", [[1, "two", 3.5, True, None], [(1, 2)], [{"inner": [1]}], [[1], {"a": "b"}]])
def test_schedule_many_returns_the_arguments_as_stored_never_the_callers_objects(store_url: str, given: Any) -> None:
    """Flat arguments are returned as checked, without decoding their text; anything
    nested comes back decoded (tuples as lists), never an object the caller still holds."""
    from tickwork import App

    app = App(store_url)
    try:

        @app.task(name=NAME)
        def job(*args: Any, **kwargs: Any) -> None: ...

        kwargs = {f"k{i}": value for i, value in enumerate(given)}
        [task] = app.schedule_many([{"task": NAME, "args": given, "kwargs": kwargs, "delay": 3600}])
        stored = app.get(task.id)
        assert task.args == stored.args and task.kwargs == stored.kwargs
        assert task.args is not given and task.kwargs is not kwargs
        containers = [(mine, got) for mine, got in zip(given, task.args, strict=True) if not isinstance(got, Scalar)]
        assert all(got is not mine for mine, got in containers)
        assert all(task.kwargs[key] is not kwargs[key] for key in kwargs if not isinstance(kwargs[key], Scalar))
    finally:
        app.close()
