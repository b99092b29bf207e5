"""``App.prune()``: retention on demand from Python, on both stores."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.conftest import wait_for
from tickwork import App, Context, ExecutionStatus, InvalidInput
from tickwork.schedules import outcome_of


@pytest.fixture
def app(store_url: str) -> Iterator[App]:
    app = App(store_url)

    @app.task(name="p.job")
    def job(ctx: Context) -> None: ...

    yield app
    app.close()


def ended(app: App, n: int) -> list[int]:
    ids = []
    for _ in range(n):
        task = app.schedule("p.job")
        [claim] = app.store.claim("node-x", ["p.job"], 1, 30.0)
        assert app.store.finish("node-x", [outcome_of(claim, ExecutionStatus.COMPLETED, app.store.now())]) == [True]
        ids.append(task.id)
    return ids


def test_prune_deletes_ended_history_older_than_asked_and_a_dry_run_only_counts(app: App) -> None:
    ids = ended(app, 3)
    live = app.schedule("p.job", delay=3600)
    assert app.prune(timedelta(days=1)).rows == 0  # all of it is younger than a day
    first = app.store.now()
    wait_for(lambda: app.store.now() > first)
    counted = app.prune(0, dry_run=True)
    assert (counted.tasks, counted.executions) == (3, 3)
    assert all(app.store.get_task(i) is not None for i in ids)  # a dry run deletes nothing
    done = app.prune(0)
    assert (done.tasks, done.executions) == (3, 3)
    assert all(app.store.get_task(i) is None for i in ids)
    assert app.get(live.id).id == live.id  # a live task is never pruned


def test_prune_refuses_bad_input_by_name(store_url: str) -> None:
    keeper = App(store_url, retention=None)
    with pytest.raises(InvalidInput, match="older_than"):
        keeper.prune()  # retention=None keeps everything unless told
    for bad in (-1, float("nan"), "7d"):
        with pytest.raises(InvalidInput) as caught:
            keeper.prune(bad)  # type: ignore[arg-type]
        assert caught.value.field == "older_than"
    with pytest.raises(InvalidInput) as caught:
        keeper.prune(0, keep_last=-1)
    assert caught.value.field == "keep_last"
    keeper.close()
