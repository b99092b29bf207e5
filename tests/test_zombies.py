"""Zombies, fencing and cancellation with real worker processes and a short lease:
nodes killed with SIGKILL or frozen with SIGSTOP, running runs cancelled in threads,
on the event loop and in child processes, and cancels racing the start of 1,000 runs."""

from __future__ import annotations

import os
import random
import signal
import socket
import threading
import time
import urllib.request
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.workers import Fleet, read_records
from tickwork import App, ExecutionStatus, InvalidState, Status

LEASE = 2.0
HEARTBEAT = 0.5
SHORT_LEASE = {"TICKWORK_TEST_LEASE": str(LEASE), "TICKWORK_TEST_HEARTBEAT": str(HEARTBEAT)}


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    if request.param == "sqlite":
        return sqlite_url
    return str(request.getfixturevalue("pg_url"))


def starts(records: Path, task_id: int) -> list[dict[str, Any]]:
    return [r for r in read_records(records) if r["task_id"] == task_id and r.get("phase") == "start"]


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie child of a worker that was not reaped yet still answers signal 0.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def metric(port: int, name: str) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in body.splitlines() if line.startswith(name)]
    return sum(values)


def test_a_killed_nodes_run_is_rerun_by_another_node_within_lease_plus_heartbeat(
    client: App, fleet: Fleet, records: Path
) -> None:
    """With default settings (no retries): a lost run is run again, not failed."""
    task = client.schedule("test.slow", kwargs={"seconds": 3.0}, retry_backoff=0.01)
    nodes = {}
    for _ in range(2):
        node = fleet.start(env={**SHORT_LEASE, "TICKWORK_TEST_GRACE": "0"})
        nodes[node.proc.pid] = node
    [first] = wait_for(lambda: starts(records, task.id))
    doomed = nodes.pop(first["pid"])
    killed_at = time.time()
    doomed.kill()  # SIGKILL: no clean-up, the lease is left to expire
    [rescuer] = nodes.values()
    rerun = wait_for(lambda: [r for r in starts(records, task.id) if r["execution_id"] != first["execution_id"]])[0]
    assert rerun["pid"] == rescuer.proc.pid and rerun["attempt"] == 1  # the same attempt, run again
    # The lease expires at most LEASE after the kill; the rescuer's reconciler looks every
    # HEARTBEAT. The margin is for the reap, the claim, a thread start and process
    # scheduling on a busy 2-core box.
    assert rerun["at"] - killed_at <= LEASE + HEARTBEAT + 1.0
    wait_for(lambda: client.get(task.id).status is Status.COMPLETED)
    runs = sorted(client.executions(task.id), key=lambda e: e.id)
    assert [(e.attempt, e.status) for e in runs] == [(1, ExecutionStatus.FAILED), (1, ExecutionStatus.COMPLETED)]
    assert runs[0].node is not None
    assert runs[0].note == f"lost by {runs[0].node}; run again (lost run 1 of at most 3 in a row)"
    assert client.get(task.id).run_count == 1
    assert rescuer.terminate() == 0, rescuer.output()


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_frozen_node_wakes_to_find_its_writes_fenced_off(client: App, fleet: Fleet, records: Path) -> None:
    """SIGSTOP for three leases while another node takes the run over and completes it.
    (PostgreSQL: a SQLite node frozen inside its write lock would freeze the file for
    every process, which is what one machine's embedded store is.)"""
    port = free_port()
    frozen = fleet.start(env=SHORT_LEASE, args=("--metrics-port", str(port), "--metrics-host", "127.0.0.1"))
    task = client.schedule("test.slow", kwargs={"seconds": 2.0}, retry_backoff=0.01)
    wait_for(lambda: starts(records, task.id))
    assert metric(port, 'tickwork_stale_results_total{write="result"}') == 0  # served, nothing stale yet
    frozen.proc.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        rescuer = fleet.start(env=SHORT_LEASE)
        wait_for(lambda: client.get(task.id).status is Status.COMPLETED, timeout=30)
        wait_for(lambda: time.monotonic() - stopped_at >= 3 * LEASE, timeout=3 * LEASE)
        before = client.get(task.id)
        runs_before = client.executions(task.id)
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
    # The frozen node's run ends (its loop's deadline passed while it was stopped) and
    # its heartbeat comes due: both writes are fenced off and change nothing.
    wait_for(lambda: "stale result dropped" in frozen.output(), timeout=10)
    assert metric(port, 'tickwork_stale_results_total{write="result"}') >= 1
    after = client.get(task.id)
    assert after == before  # not one field changed, version and updated_at included
    assert client.executions(task.id) == runs_before
    runs = sorted(runs_before, key=lambda e: e.id)
    assert [(e.attempt, e.status) for e in runs] == [(1, ExecutionStatus.FAILED), (1, ExecutionStatus.COMPLETED)]
    assert runs[0].note is not None and runs[0].note.startswith("lost")
    assert runs[1].node != runs[0].node
    assert frozen.terminate() == 0, frozen.output()
    assert rescuer.terminate() == 0, rescuer.output()


def test_running_thread_async_and_process_tasks_are_cancelled_and_never_rerun(
    client: App, fleet: Fleet, records: Path
) -> None:
    heartbeat = 1.0
    node = fleet.start(env={"TICKWORK_TEST_LEASE": "5", "TICKWORK_TEST_HEARTBEAT": str(heartbeat)})
    names = ["test.until_cancelled", "test.async_wait", "test.busy_process", "test.stubborn_process"]
    tasks = {name: client.schedule(name, max_retries=3) for name in names}
    for task in tasks.values():
        wait_for(lambda task=task: starts(records, task.id), timeout=30)
    elapsed: dict[str, float] = {}

    def cancel_and_time(name: str) -> None:
        asked = time.monotonic()
        client.cancel(tasks[name].id)
        wait_for(lambda: client.get(tasks[name].id).status is Status.CANCELLED, timeout=30, interval=0.01)
        elapsed[name] = time.monotonic() - asked

    threads = [threading.Thread(target=cancel_and_time, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    kill_grace = 1.0  # test.stubborn_process's
    for name in ["test.until_cancelled", "test.async_wait", "test.busy_process"]:
        assert elapsed[name] <= 2 * heartbeat, (name, elapsed)
    assert elapsed["test.stubborn_process"] <= 2 * heartbeat + kill_grace, elapsed
    for name, task in tasks.items():
        [run] = client.executions(task.id)
        assert run.status is ExecutionStatus.CANCELLED, (name, run)
    assert any(r.get("phase") == "saw_cancel" for r in read_records(records))  # the thread task saw ctx.cancelled
    assert any(r.get("phase") == "ignored_sigterm" for r in read_records(records))  # SIGTERM came first
    for name in ["test.busy_process", "test.stubborn_process"]:
        [start] = starts(records, tasks[name].id)
        assert start["pid"] != node.proc.pid  # it ran in a child process ...
        assert wait_for(lambda start=start: pid_gone(start["pid"]), timeout=5)  # ... which is gone
    # None runs again: a task scheduled after the cancels runs, the cancelled ones don't.
    marker = client.schedule("test.record")
    wait_for(lambda: client.get(marker.id).status is Status.COMPLETED)
    for name, task in tasks.items():
        assert len(starts(records, task.id)) == 1, name
        assert len(client.executions(task.id)) == 1, name
    assert node.terminate() == 0, node.output()


def test_a_stuck_process_task_times_out_and_is_retried(client: App, fleet: Fleet, records: Path) -> None:
    node = fleet.start(env=SHORT_LEASE)
    task = client.schedule("test.busy_process", timeout=3.0, max_retries=1, retry_backoff=0.01)
    wait_for(lambda: client.get(task.id).status is Status.FAILED, timeout=30)
    runs = sorted(client.executions(task.id), key=lambda e: e.attempt)
    assert [(e.attempt, e.status) for e in runs] == [(1, ExecutionStatus.TIMED_OUT), (2, ExecutionStatus.TIMED_OUT)]
    assert all(e.error is not None and "timeout of 3.0 s" in e.error.message for e in runs), runs
    children = [r["pid"] for r in starts(records, task.id)]
    assert len(children) == 2 and node.proc.pid not in children
    for pid in children:
        assert wait_for(lambda pid=pid: pid_gone(pid), timeout=5)
    assert node.terminate() == 0, node.output()


def test_process_tasks_return_results_fail_with_their_traceback_and_renew_their_lease(
    client: App, fleet: Fleet, records: Path
) -> None:
    node = fleet.start(env=SHORT_LEASE)
    ok = client.schedule("test.process_record", kwargs={"value": ["é", 1]})
    bad = client.schedule("test.process_fail")
    wait_for(lambda: client.get(ok.id).status.is_terminal and client.get(bad.id).status.is_terminal)
    [good] = client.executions(ok.id)
    [start] = starts(records, ok.id)
    assert good.status is ExecutionStatus.COMPLETED
    assert good.result == {"pid": start["pid"], "value": ["é", 1]} and start["pid"] != node.proc.pid
    assert start["renewed"] is True and start["fence"] == good.fence  # ctx.heartbeat() through the node
    [failed] = client.executions(bad.id)
    assert failed.status is ExecutionStatus.FAILED and failed.error is not None
    assert failed.error.type == "ValueError" and "failed in pid" in failed.error.message
    assert "process_fail" in failed.error.traceback  # the child's own traceback
    assert node.terminate() == 0, node.output()


def test_a_run_reaching_max_runtime_is_stopped_by_its_own_node(client: App, fleet: Fleet, records: Path) -> None:
    node = fleet.start(env=SHORT_LEASE)
    task = client.schedule("test.overrun")  # max_runtime=1.0, runs until cancelled
    wait_for(lambda: client.get(task.id).status is Status.FAILED, timeout=30)
    [run] = client.executions(task.id)
    assert run.status is ExecutionStatus.TIMED_OUT and run.note == "max_runtime"
    assert run.error is not None and run.error.type == "MaxRuntimeExceeded"
    assert any(r.get("phase") == "saw_cancel" for r in read_records(records))
    assert node.terminate() == 0, node.output()


def test_a_stuck_thread_past_max_runtime_ends_its_execution_at_the_deadline_and_is_reported(
    client: App, fleet: Fleet, records: Path
) -> None:
    """The thread cannot be stopped: its node ends the execution TIMED_OUT at max_runtime
    while the thread goes on and reports it two heartbeats later; the task stays RUNNING
    (no second copy) until the thread returns, then moves on. (Another node's reconciler
    ends an overrun run whose node does not: tests/test_store_contract.py.)"""
    node = fleet.start(env=SHORT_LEASE)
    task = client.schedule("test.overrun_stuck", kwargs={"seconds": 5.0})
    wait_for(lambda: [e for e in client.executions(task.id) if e.status is ExecutionStatus.TIMED_OUT], timeout=30)
    seen = client.store.now()
    [run] = client.executions(task.id)
    assert run.error is not None and run.error.type == "MaxRuntimeExceeded"
    assert run.finished_at is not None and run.started_at is not None
    assert run.started_at + timedelta(seconds=1.0) <= run.finished_at <= seen
    # Ended by its own node at the deadline ("max_runtime"), not taken over by a reconciler
    # ("max_runtime exceeded on <node>"), which only acts a lease later.
    assert (run.note or "").split(";")[0] == "max_runtime"
    assert not any(r.get("phase") == "end" for r in read_records(records))  # ended while still running
    assert client.get(task.id).status is Status.RUNNING
    wait_for(lambda: "did not stop within 2 heartbeats" in (client.executions(task.id)[0].note or ""), timeout=10)
    assert "did not stop within 2 heartbeats" in node.output()
    wait_for(lambda: client.get(task.id).status is Status.FAILED, timeout=30)
    assert any(r.get("phase") == "end" for r in read_records(records))  # only once the thread let go
    wait_for(lambda: "its thread returned" in node.output(), timeout=10)
    [after] = client.executions(task.id)
    assert (after.status, after.finished_at, after.result) == (run.status, run.finished_at, None)
    assert node.terminate() == 0, node.output()


def test_cancels_racing_the_start_of_1000_runs_never_overwrite_a_state(
    client: App, fleet: Fleet, records: Path
) -> None:
    """Each task is cancelled from 100 ms before its due time to 50 ms after while 2
    nodes claim and run (a claim takes a task up to ``claim_ahead``, 50 ms, before it is
    due): whoever wins, the task's status agrees with its executions."""
    count, spread = 1000, 4.0
    first_due = client.store.now() + timedelta(seconds=3)
    dues = [first_due + timedelta(seconds=spread * i / count) for i in range(count)]
    tasks = client.schedule_many([{"task": "test.record", "at": due} for due in dues])
    for _ in range(2):
        fleet.start(concurrency=8, env=SHORT_LEASE)
    rng = random.Random(5)
    jittered = [due + timedelta(seconds=rng.uniform(-0.1, 0.05)) for due in dues]
    plan = sorted(zip(jittered, [t.id for t in tasks], strict=True))
    too_late = 0
    for at, task_id in plan:
        # approximate_now: the store's clock from its quickest reads. An offset taken as
        # now() - approximate_now() puts the loop late by now()'s return trip, however
        # long it took (the likely cause of a loaded CI run with every cancel after its
        # claim: 0 of 1000 cancelled before running).
        wait = (at - client.store.approximate_now()).total_seconds()
        if wait > 0:
            time.sleep(wait)  # the test's own pacing: cancel at the planned instant
        try:
            client.cancel(task_id)
        except InvalidState:
            too_late += 1  # it had already completed: allowed, and checked below
    ids = [t.id for t in tasks]
    wait_for(lambda: all(client.get(i).status.is_terminal for i in ids), timeout=60)
    by_task: dict[int, list[Any]] = {i: [] for i in ids}
    for run in client.executions(limit=10_000):
        by_task[run.task_id].append(run)
    recorded = Counter(r["task_id"] for r in read_records(records))
    outcomes: Counter[str] = Counter()
    for task_id in ids:
        task, runs = client.get(task_id), by_task[task_id]
        statuses = [r.status for r in runs]
        if task.status is Status.CANCELLED:
            assert ExecutionStatus.COMPLETED not in statuses, (task, runs)
            assert len(runs) <= 1 and set(statuses) <= {ExecutionStatus.CANCELLED}, (task, runs)
            outcomes["cancelled before running" if not runs else "cancelled while running"] += 1
        else:
            assert task.status is Status.COMPLETED, task
            assert statuses == [ExecutionStatus.COMPLETED], (task, runs)
            assert recorded[task_id] == 1
            outcomes["completed"] += 1
        assert recorded[task_id] <= 1  # never run twice
    assert outcomes["completed"] >= too_late
    assert outcomes["cancelled before running"] > 0 and outcomes["completed"] > 0, outcomes


def test_a_child_stuck_in_c_code_dies_with_its_killed_node(client: App, fleet: Fleet, records: Path) -> None:
    node = fleet.start(env={**SHORT_LEASE, "TICKWORK_TEST_GRACE": "0"})
    task = client.schedule("test.c_stuck_process")
    [start] = wait_for(lambda: starts(records, task.id), timeout=30)
    assert start["pid"] != node.proc.pid
    node.kill()  # SIGKILL: the node can do nothing; the child's watchdog must
    assert wait_for(lambda: pid_gone(start["pid"]), timeout=10)


def test_cancelling_a_process_task_stops_what_it_started_and_lets_async_clean_up(
    client: App, fleet: Fleet, records: Path
) -> None:
    node = fleet.start(env={"TICKWORK_TEST_LEASE": "5", "TICKWORK_TEST_HEARTBEAT": "0.3"})
    spawning = client.schedule("test.spawning_process")
    cleaning = client.schedule("test.async_cleanup_process")
    [spawned] = wait_for(lambda: starts(records, spawning.id), timeout=30)
    wait_for(lambda: starts(records, cleaning.id), timeout=30)
    assert spawned["group"] == spawned["pid"]  # the child leads a process group of its own
    client.cancel(spawning.id)
    client.cancel(cleaning.id)
    wait_for(lambda: client.get(spawning.id).status is Status.CANCELLED)
    assert wait_for(lambda: pid_gone(spawned["grandchild"]), timeout=5)  # the task's own process too
    wait_for(lambda: client.get(cleaning.id).status is Status.CANCELLED, timeout=15)
    # Its clean-up outlasted several heartbeats (each repeating the cancel) and was not cut short.
    assert any(r.get("phase") == "cleaned" for r in read_records(records))
    [run] = client.executions(cleaning.id)
    assert run.status is ExecutionStatus.CANCELLED and run.error is None
    assert node.terminate() == 0, node.output()


def test_a_process_task_can_use_multiprocessing(client: App, fleet: Fleet) -> None:
    node = fleet.start(env=SHORT_LEASE)
    task = client.schedule("test.pool_process")
    wait_for(lambda: client.get(task.id).status.is_terminal, timeout=30)
    [run] = client.executions(task.id)
    assert (run.status, run.result) == (ExecutionStatus.COMPLETED, [1, 2, 3]), run
    assert node.terminate() == 0, node.output()
