"""Task code that misbehaves: raises SystemExit, KeyboardInterrupt or another
BaseException (in a thread, on the event loop, in a child process), calls os._exit,
leaks a non-daemon thread, returns something that is not JSON or 10 MB, or segfaults
under ``isolation="process"``. The run ends as it should and is recorded, its slot is
freed, the node stays up and still stops gracefully (unless the fault killed it)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.app import RAISES
from tests.faults.harness import Case, eventually
from tests.faults.nodes import Node
from tickwork import ExecutionStatus, Status

pytestmark = pytest.mark.faults

ENDED_WITHIN_S = 15.0


def ended(case: Case, ids: list[int]) -> bool:
    return all(case.client.get(i).status.is_terminal for i in ids)


def slots_free(case: Case, node: Node, slots: int) -> None:
    """As many 1.5 s tasks as the node has slots all run at the same time on it."""
    probes = case.stream(slots, start_in=0.0, over=0.0, seconds=1.5)
    if not case.check(eventually(lambda: ended(case, probes), ENDED_WITHIN_S), "the probe tasks did not all run"):
        return
    runs = [r for r in case.runs() if r.task in probes and r.end is not None]
    together = len(runs) == slots and all(
        a.start < b.end and b.start < a.end for a, b in itertools.combinations(runs, 2) if a.end and b.end
    )
    case.check(together, f"the node did not run {slots} tasks at once afterwards: a slot stayed taken ({runs})")


def sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tickwork.db'}"


@pytest.mark.parametrize("flavour", ["thread", "async", "process"])
@pytest.mark.timeout(120)
def test_task_code_raising_systemexit_keyboardinterrupt_or_baseexception(
    tmp_path: Path, make_case: Callable[..., Case], flavour: str
) -> None:
    name = {"thread": "faults.raise", "async": "faults.raise_async", "process": "faults.raise_process"}[flavour]
    case = make_case(f"base-exceptions-{flavour}", sqlite(tmp_path))
    [node] = case.start_nodes(1, concurrency=len(RAISES))
    case.fault_begins()
    tasks = {kind: case.client.schedule(name, kwargs={"kind": kind}).id for kind in RAISES}
    case.check(eventually(lambda: ended(case, list(tasks.values())), ENDED_WITHIN_S), "not every run ended")
    case.fault_ends()
    for kind, task_id in tasks.items():
        task, runs = case.client.get(task_id), case.client.executions(task_id)
        statuses = [(e.status.value, e.error.type if e.error else None) for e in runs]
        case.check(
            task.status is Status.FAILED and statuses == [("FAILED", kind)],
            f"{kind}: task {task.status.value}, runs {statuses} (expected FAILED with the {kind} recorded)",
        )
        case.check(
            all(e.error is None or f"{kind} raised by task" in e.error.message for e in runs),
            f"{kind}: the exception's message is not recorded: {[e.error for e in runs]}",
        )
    case.figure("faulty_tasks", len(tasks))
    case.figure("faulty_ended", sum(case.client.get(i).status.is_terminal for i in tasks.values()))
    slots_free(case, node, len(RAISES))
    case.verify(alive=[node], drain_timeout=20.0)
    case.stop_nodes([node])
    case.finish()


@pytest.mark.timeout(120)
def test_task_code_calling_os_exit_in_a_thread_kills_only_its_node(
    tmp_path: Path, make_case: Callable[..., Case]
) -> None:
    """The node dies with the process; another node takes the run as lost and runs it
    again (at-least-once), which kills that node too: max_lost=1 lets one lost run run
    again, then the next counts as a failure (no retry left: FAILED), so the poison task
    takes two nodes, not the cluster, and the third carries on with the other work."""
    case = make_case("os-exit-thread", sqlite(tmp_path))
    nodes = case.start_nodes(3)
    case.fault_begins()
    doomed = case.client.schedule("faults.os_exit", kwargs={"code": 3})
    case.check(eventually(lambda: len(case.fleet.alive()) < 2, 2 * ENDED_WITHIN_S), "the rerun killed no node")
    dead = [n for n in nodes if not n.alive()]
    for node in dead:
        case.node_killed(node, kind="died")
        case.check(node.proc.returncode == 3, f"the node exited with {node.proc.returncode}, not the task's 3")
    [survivor] = [n for n in nodes if n not in dead][:1]
    case.stream(20, start_in=0.0, over=2.0)
    case.fault_ends()
    case.check(eventually(lambda: case.client.get(doomed.id).status is Status.FAILED, 30.0), "run not taken as lost")
    runs = sorted(case.client.executions(doomed.id), key=lambda e: e.id)
    notes = [e.note or "" for e in runs]
    case.check(
        [e.status for e in runs] == [ExecutionStatus.FAILED] * 2
        and "run again (lost run 1 of at most 1" in notes[0]
        and "counted as a failure" in notes[1],
        f"the dead nodes' runs: {runs}",
    )
    case.verify(alive=[survivor], drain_timeout=20.0)
    case.stop_nodes([survivor])
    case.finish()


@pytest.mark.timeout(120)
def test_a_process_task_that_calls_os_exit_or_segfaults(tmp_path: Path, make_case: Callable[..., Case]) -> None:
    case = make_case("process-os-exit-and-segfault", sqlite(tmp_path))
    [node] = case.start_nodes(1, concurrency=2)
    case.fault_begins()
    exits = case.client.schedule("faults.os_exit_process", kwargs={"code": 3}).id
    crash = case.client.schedule("faults.segfault").id
    case.check(eventually(lambda: ended(case, [exits, crash]), ENDED_WITHIN_S), "not every run ended")
    case.fault_ends()
    for task_id, expected in ((exits, ["exit code 3"]), (crash, ["-11", "SIGSEGV"])):
        runs = case.client.executions(task_id)
        error = runs[0].error if runs else None
        case.check(
            [e.status for e in runs] == [ExecutionStatus.FAILED]
            and error is not None
            and any(text in error.message for text in expected),
            f"task {task_id}: runs {[(e.status.value, e.error) for e in runs]}, expected FAILED saying {expected}",
        )
    slots_free(case, node, 2)
    case.verify(alive=[node], drain_timeout=20.0)
    case.stop_nodes([node])
    case.finish()


@pytest.mark.timeout(120)
def test_a_task_that_leaks_a_thread_does_not_keep_its_node_from_stopping(
    tmp_path: Path, make_case: Callable[..., Case]
) -> None:
    case = make_case("leaked-thread", sqlite(tmp_path))
    [node] = case.start_nodes(1, concurrency=2)
    case.fault_begins()
    leak = case.client.schedule("faults.leak_thread").id
    case.check(eventually(lambda: ended(case, [leak]), ENDED_WITHIN_S), "the run did not end")
    case.fault_ends()
    case.check(case.client.get(leak).status is Status.COMPLETED, f"task {case.client.get(leak).status.value}")
    slots_free(case, node, 2)
    case.verify(alive=[node], drain_timeout=20.0)
    case.stop_nodes([node])  # the leaked thread is not a daemon: it must not hold the exit
    case.finish()


@pytest.mark.timeout(120)
def test_results_that_are_not_json_or_10_mb(tmp_path: Path, make_case: Callable[..., Case]) -> None:
    """The run completes; the result is left out with a note saying why."""
    case = make_case("odd-results", sqlite(tmp_path))
    [node] = case.start_nodes(1, concurrency=3)
    case.fault_begins()
    names = ["faults.non_json", "faults.big_result", "faults.big_result_process"]
    tasks = {name: case.client.schedule(name).id for name in names}
    case.check(eventually(lambda: ended(case, list(tasks.values())), ENDED_WITHIN_S), "not every run ended")
    case.fault_ends()
    for name, task_id in tasks.items():
        runs = case.client.executions(task_id)
        case.check(
            [(e.status, e.result) for e in runs] == [(ExecutionStatus.COMPLETED, None)]
            and "result not stored" in (runs[0].note or ""),
            f"{name}: {[(e.status.value, e.note, e.error) for e in runs]}",
        )
    slots_free(case, node, 3)
    case.verify(alive=[node], drain_timeout=20.0)
    case.stop_nodes([node])
    case.finish()
