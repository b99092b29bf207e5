"""In-node autoscaling: the decision rule with a driven clock, then a real node growing
under a backlog and shrinking back once idle."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from tests.cli_support import worker_options
from tests.conftest import wait_for
from tickwork import App, Context, Status
from tickwork.cli import main
from tickwork.node.autoscale import Autoscaler


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_grows_only_while_every_slot_is_busy_and_the_queue_is_old() -> None:
    clock = Clock()
    scaler = Autoscaler(2, 10, scale_up_age=5.0, scale_down_after=30.0, step=2, clock=clock)
    assert scaler.decide(2, 2, None) == 2  # busy, nothing due
    assert scaler.decide(2, 2, 4.9) == 2  # busy, queue young
    assert scaler.decide(2, 1, 60.0) == 2  # queue old, but a slot is free: the node is not the bottleneck
    assert scaler.decide(2, 2, 5.0) == 4
    assert scaler.decide(8, 8, 9.0) == 10
    assert scaler.decide(10, 10, 9.0) == 10  # capped at MAX


def test_shrinks_one_step_per_idle_period_never_below_min_or_the_busy_slots() -> None:
    clock = Clock()
    scaler = Autoscaler(2, 10, scale_up_age=5.0, scale_down_after=30.0, step=3, clock=clock)
    assert scaler.decide(10, 1, None) == 10  # idle starts now
    clock.now = 29.0
    assert scaler.decide(10, 1, None) == 10
    clock.now = 30.0
    assert scaler.decide(10, 1, None) == 7
    clock.now = 45.0
    assert scaler.decide(7, 6, 1.0) == 7  # still idle slots, but not for long enough
    clock.now = 60.0
    assert scaler.decide(7, 6, 1.0) == 6  # not below the runs it holds
    assert scaler.decide(6, 6, None) == 6  # busy again: the idle period resets
    clock.now = 200.0
    assert scaler.decide(6, 0, None) == 6
    clock.now = 230.0
    assert scaler.decide(6, 0, None) == 3
    clock.now = 260.0
    assert scaler.decide(3, 0, None) == 2  # MIN


def test_rejects_a_min_above_max() -> None:
    with pytest.raises(ValueError, match="1 <= MIN <= MAX"):
        Autoscaler(5, 2)


@pytest.fixture
def app(sqlite_url: str) -> Iterator[App]:
    app = App(sqlite_url, lease=5.0, heartbeat=0.2, poll_interval=0.05)
    yield app
    app.close()


def test_a_node_grows_to_max_under_a_backlog_and_returns_to_min_when_idle(app: App) -> None:
    gate = threading.Event()
    inside = 0
    most_inside = 0
    count_lock = threading.Lock()

    @app.task(name="t.blocked")
    def blocked(ctx: Context) -> None:
        nonlocal inside, most_inside
        with count_lock:
            inside += 1
            most_inside = max(most_inside, inside)
        gate.wait(30)
        with count_lock:
            inside -= 1

    tasks = app.schedule_many([{"task": "t.blocked"} for _ in range(40)])
    worker = app.worker(prefetch=0, autoscaler=Autoscaler(2, 8, scale_up_age=0.2, scale_down_after=0.3, step=2))
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    try:
        assert worker.started.wait(10)
        wait_for(lambda: worker.concurrency == 8, timeout=15)
        wait_for(lambda: most_inside == 8)  # eight runs really going at once, not just claimed
        gate.set()
        wait_for(lambda: all(app.get(t.id).status is Status.COMPLETED for t in tasks), timeout=30)
        wait_for(lambda: worker.concurrency == 2, timeout=15)
    finally:
        gate.set()
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()


@pytest.mark.parametrize("bad", ["0", "4,2", "a,b", "1,2,3", "2,100000"])
def test_the_cli_rejects_bad_concurrency(bad: str) -> None:
    result = CliRunner().invoke(main, ["worker", "tests.apps.basic:app", "--concurrency", bad])
    assert result.exit_code != 0 and "--concurrency" in result.output and "MIN,MAX" in result.output


@pytest.mark.parametrize("bad", ["-1", "x", "1.5"])
def test_the_cli_rejects_a_bad_prefetch(bad: str) -> None:
    result = CliRunner().invoke(main, ["worker", "tests.apps.basic:app", "--prefetch", bad])
    assert result.exit_code != 0 and "--prefetch" in result.output and bad in result.output


@pytest.mark.parametrize(("given", "expected"), [([], None), (["--prefetch", "0"], 0), (["--prefetch", "500"], 500)])
def test_the_cli_passes_its_prefetch_to_the_node(
    given: list[str], expected: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert worker_options(monkeypatch, *given)["prefetch"] == expected
