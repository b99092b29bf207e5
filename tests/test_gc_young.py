"""The collector's young threshold while a node owns its process (tickwork/gc_young.py):
raised by ``run_worker`` and ``tickwork worker`` while the node runs, never lowered, put
back at the end; ``App.worker()`` (an embedded node) leaves it alone."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.cli_support import worker_options
from tests.http_support import wait_until
from tickwork import App, Context, gc_young
from tickwork.cli import main
from tickwork.errors import InvalidInput
from tickwork.node.worker import Worker

DEFAULT = (700, 10, 10)


@pytest.fixture(autouse=True)
def thresholds() -> Iterator[None]:
    """Each test starts from CPython's default thresholds and no holder, and leaves the
    process's own thresholds (and no holder) behind."""
    before = gc.get_threshold()
    gc.set_threshold(*DEFAULT)
    try:
        yield
        assert gc_young._holders == 0
    finally:
        gc.set_threshold(*before)
        gc_young._holders, gc_young._before, gc_young._set = 0, None, None


def test_raised_inside_and_put_back_after() -> None:
    with gc_young.raised(10_000):
        assert gc.get_threshold() == (10_000, 10, 10)
    assert gc.get_threshold() == DEFAULT


def test_a_higher_threshold_of_the_program_is_kept() -> None:
    gc.set_threshold(50_000, 5, 5)
    with gc_young.raised(10_000):
        assert gc.get_threshold() == (50_000, 5, 5)
    assert gc.get_threshold() == (50_000, 5, 5)


def test_automatic_collection_turned_off_stays_off() -> None:
    gc.set_threshold(0)
    with gc_young.raised(10_000):
        assert gc.get_threshold()[0] == 0
    assert gc.get_threshold()[0] == 0


def test_none_leaves_the_collector_alone() -> None:
    with gc_young.raised(None):
        assert gc.get_threshold() == DEFAULT


def test_put_back_only_when_the_last_holder_leaves() -> None:
    with contextlib.ExitStack() as first:
        first.enter_context(gc_young.raised(10_000))
        with contextlib.ExitStack() as second:
            second.enter_context(gc_young.raised(20_000))
            assert gc.get_threshold()[0] == 20_000
            first.close()
            assert gc.get_threshold()[0] == 20_000  # the second node still runs
    assert gc.get_threshold() == DEFAULT


def test_nodes_on_two_threads_in_any_order() -> None:
    entered, leave_first, first_left = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with gc_young.raised(10_000):
            entered.set()
            leave_first.wait(10)
        first_left.set()

    thread = threading.Thread(target=first)
    thread.start()
    assert entered.wait(10)
    with gc_young.raised(10_000):
        leave_first.set()
        assert first_left.wait(10)
        assert gc.get_threshold()[0] == 10_000  # the first node left, this one still runs
    thread.join(10)
    assert gc.get_threshold() == DEFAULT


def test_a_threshold_the_program_set_meanwhile_is_not_overwritten() -> None:
    with gc_young.raised(10_000):
        gc.set_threshold(3_000, 10, 10)
    assert gc.get_threshold() == (3_000, 10, 10)


def test_older_generations_the_program_set_meanwhile_are_kept() -> None:
    with gc_young.raised(10_000):
        gc.set_threshold(10_000, 100, 100)
    assert gc.get_threshold() == (10_000, 100, 100)


def test_what_the_program_set_meanwhile_is_what_a_later_node_puts_back() -> None:
    with contextlib.ExitStack() as first:
        first.enter_context(gc_young.raised(10_000))
        gc.set_threshold(5_000, 10, 10)  # the program's own, lower than the nodes'
        with gc_young.raised(10_000):
            assert gc.get_threshold()[0] == 10_000
    assert gc.get_threshold() == (5_000, 10, 10)


def test_a_bad_value_changes_nothing() -> None:
    with pytest.raises(InvalidInput), gc_young.raised(2**31):
        pass
    assert gc.get_threshold() == DEFAULT and gc_young._before is None and gc_young._holders == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_child_forked_while_a_node_runs_gets_the_programs_threshold() -> None:
    read, write = os.pipe()
    with gc_young.raised(10_000):
        pid = os.fork()
        if pid == 0:  # the child: report, then leave without pytest's clean-up
            os.write(write, repr((gc.get_threshold(), gc_young._holders)).encode())
            os._exit(0)
        os.close(write)
        seen = os.read(read, 200).decode()
        os.close(read)
        os.waitpid(pid, 0)
        assert gc.get_threshold()[0] == 10_000  # the parent's node still runs
    assert seen == repr((DEFAULT, 0))


def test_put_back_after_an_error_inside() -> None:
    with pytest.raises(RuntimeError), gc_young.raised(10_000):
        raise RuntimeError("the node failed")
    assert gc.get_threshold() == DEFAULT


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10000", 2**31, 10**400, pytest.param(10**5000, id="10**5000")])
def test_run_worker_refuses_a_bad_threshold_before_anything(bad: Any, tmp_path: Path) -> None:
    app = App(f"sqlite:///{tmp_path / 'gc.db'}")

    @app.task(name="gc.noop")
    def noop(ctx: Context) -> None:
        pass

    with pytest.raises(InvalidInput) as caught:
        app.run_worker(concurrency=1, install_signals=False, gc_threshold=bad)
    assert caught.value.field == "gc_threshold" and "gc_threshold=" in str(caught.value)
    assert not (tmp_path / "gc.db").exists()  # refused before the store was opened
    assert gc.get_threshold() == DEFAULT


def _run_until_ran(app: App, monkeypatch: pytest.MonkeyPatch, seen: list[tuple[int, int, int]], **options: Any) -> None:
    """run_worker on a thread until its one task ran, then stopped."""
    made: list[Worker] = []
    build = App.worker

    def worker(self: App, **kwargs: Any) -> Worker:
        made.append(build(self, **kwargs))
        return made[-1]

    monkeypatch.setattr(App, "worker", worker)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            app.run_worker(concurrency=1, install_signals=False, **options)
        except BaseException as exc:  # told below, not lost on the thread
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: seen or failed or not thread.is_alive())
    finally:
        if made:
            made[0].stop()
        thread.join(30)
    assert not failed and not thread.is_alive()


def _recording_app(tmp_path: Path, seen: list[tuple[int, int, int]]) -> App:
    app = App(f"sqlite:///{tmp_path / 'gc.db'}")

    @app.task(name="gc.look")
    def look(ctx: Context) -> None:
        seen.append(gc.get_threshold())

    app.schedule("gc.look")
    return app


def test_run_worker_raises_it_from_the_nodes_start_until_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening the store, the start-up sync and building the node import and make most
    of a worker's long-lived objects: the collector is held to the node's threshold
    through them too, while the node runs, and put back after."""
    seen: list[tuple[int, int, int]] = []
    at_sync: list[tuple[int, int, int]] = []
    sync = App.sync_schedules

    def recording_sync(self: App, *args: Any, **kwargs: Any) -> Any:
        at_sync.append(gc.get_threshold())
        return sync(self, *args, **kwargs)

    monkeypatch.setattr(App, "sync_schedules", recording_sync)
    app = _recording_app(tmp_path, seen)
    try:
        _run_until_ran(app, monkeypatch, seen)
    finally:
        app.close()
    assert at_sync == [(gc_young.NODE_THRESHOLD, 10, 10)]
    assert seen == [(gc_young.NODE_THRESHOLD, 10, 10)]
    assert gc.get_threshold() == DEFAULT


def test_run_worker_with_none_leaves_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int, int]] = []
    app = _recording_app(tmp_path, seen)
    try:
        _run_until_ran(app, monkeypatch, seen, gc_threshold=None)
    finally:
        app.close()
    assert seen == [DEFAULT]


def test_an_embedded_node_leaves_it(tmp_path: Path) -> None:
    seen: list[tuple[int, int, int]] = []
    app = _recording_app(tmp_path, seen)
    worker = app.worker(concurrency=1)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: seen)
    finally:
        worker.stop()
        thread.join(30)
        app.close()
    assert seen == [DEFAULT]


@pytest.mark.parametrize(
    ("given", "expected"),
    [([], gc_young.NODE_THRESHOLD), (["--gc-threshold", "0"], None), (["--gc-threshold", "50000"], 50_000)],
)
def test_the_cli_passes_its_threshold_to_the_node(
    given: list[str], expected: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert worker_options(monkeypatch, *given)["gc_threshold"] == expected


@pytest.mark.parametrize("bad", ["-1", "x", "1.5", str(2**31), "9" * 400])
def test_the_cli_rejects_a_bad_threshold(bad: str) -> None:
    result = CliRunner().invoke(main, ["worker", "tests.apps.basic:app", "--gc-threshold", bad])
    assert result.exit_code == 2 and "--gc-threshold" in result.output
    assert "Traceback" not in result.output
