"""``schedule_many`` holds the cyclic garbage collector off while it builds its batch
(tickwork/gc_pause.py) and always gives it back as it found it."""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tickwork import App, Context, gc_pause
from tickwork.errors import InvalidInput


class Watching(Mapping[str, Any]):
    """A schedule_many item that notes whether the collector ran while it was read."""

    def __init__(self, seen: list[bool], **fields: Any) -> None:
        self._fields, self._seen = fields, seen

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        self._seen.append(gc.isenabled())
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


@pytest.fixture
def app(sqlite_url: str) -> Iterator[App]:
    app = App(sqlite_url)

    @app.task(name="t.job")
    def job(ctx: Context, n: int) -> None: ...

    yield app
    app.close()


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_the_collector_waits_while_a_batch_is_built_and_runs_again_after(app: App) -> None:
    seen: list[bool] = []
    stored = app.schedule_many([Watching(seen, task="t.job", kwargs={"n": i}) for i in range(3)])
    assert len(stored) == 3
    assert seen and not any(seen)  # every item was read with the collector held off
    assert gc.isenabled()


def test_a_refused_batch_gives_the_collector_back_too(app: App) -> None:
    seen: list[bool] = []
    with pytest.raises(InvalidInput) as refused:
        app.schedule_many([Watching(seen, task="t.job", kwargs={"n": 1}), {"task": "t.job", "kwargs": {"m": 1}}])
    assert refused.value.field.startswith("items[1]")
    assert seen == [False]
    assert gc.isenabled()


def test_a_program_that_turned_the_collector_off_keeps_it_off(app: App) -> None:
    gc.disable()
    app.schedule_many([{"task": "t.job", "kwargs": {"n": 1}}])
    assert not gc.isenabled()


def test_overlapping_pauses_end_with_the_last_of_them() -> None:
    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with gc_pause.paused():
            inside.set()
            assert leave.wait(10)

    other = threading.Thread(target=hold)
    with gc_pause.paused():
        other.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # the other thread still holds it off
    leave.set()
    other.join(10)
    assert not other.is_alive()
    assert gc.isenabled()


def test_a_child_forked_during_a_pause_runs_its_collector() -> None:
    with gc_pause.paused():
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report and leave at once
            os.write(write, b"1" if gc.isenabled() else b"0")
            os._exit(0)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        assert os.read(read, 1) == b"1"
        os.close(read)
        assert status == 0
        assert not gc.isenabled()  # the parent's pause goes on
    assert gc.isenabled()
