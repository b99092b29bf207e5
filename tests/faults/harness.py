"""A fault case: its workload, the runs its tasks recorded, and the guarantees every case
checks once the fault is over.

The guarantees (issue 13): no task lost; no run twice, except a run the fault itself
interrupted (counted and reported); never two copies of a task running at once; no
COMPLETED execution twice for one slot; nothing left RUNNING two leases after the fault
ends; the nodes carry on without a restart unless the fault killed them; a clear log line
from a node for each fault it can see, as it starts and as it ends.

A case collects every violation rather than stopping at the first, prints its figures
(visible under ``pytest -s`` and in the captured output of a failure) and fails at the
end with all of them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import redis

from tests.faults.nodes import Fleet, Node
from tickwork import App, ExecutionStatus, Status, TickworkError

RECORD_SLACK_S = 1.0
"""How long after a task returns its node may still be writing the result."""
LEASE = 5.0
HEARTBEAT = 0.5
RESUME_WITHIN = 3.0
"""After a store outage ends, the nodes start runs again within this (seconds): a
heartbeat, a poll and a reconnect, with room for a busy 2-core machine."""

# What a node logs when it finds its store failing, and when the store answers again.
STORE_TROUBLE = re.compile(
    r"store unavailable|cannot renew|could not renew|lease could not be renewed|renewing leases failed|"
    r"claim failed|recording a result failed|result refused by the store|node heartbeat failed|"
    r"listening for notifications failed|read-only|disk is full|database is locked",
    re.IGNORECASE,
)
STORE_BACK = re.compile(
    r"answers again|recorded again|works? again|again after|"
    r"\b(store|database|PostgreSQL|SQLite)\b[^\n]{0,40}\b(back|reachable again|writable again)\b",
    re.IGNORECASE,
)
REDIS_TROUBLE = re.compile(r"Redis unavailable", re.IGNORECASE)
REDIS_BACK = re.compile(r"Redis is back", re.IGNORECASE)


def eventually(condition: Callable[[], object], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``condition`` until it is truthy (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return True
        except (TickworkError, psycopg.Error, sqlite3.Error, redis.RedisError, OSError):
            pass  # the store may still be away: keep asking until the deadline
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def client_for(url: str) -> App:
    """An App on ``url`` that knows the suite's task names (to schedule them)."""
    from tests.faults.app import app as faults_app

    client = App(url, lease=LEASE, heartbeat=HEARTBEAT)
    for definition in faults_app.registry:
        client.registry.add(definition.name, definition.func, definition.options)
    return client


@dataclasses.dataclass
class RunLog:
    """One run as its task recorded it (times: CLOCK_MONOTONIC)."""

    run: str
    task: int
    slot: str
    attempt: int
    execution: int
    node: str
    pid: int
    start: float
    wall: float
    """The node's own wall clock at the start (skewed under libfaketime)."""
    end: float | None = None
    stopped: float | None = None

    @property
    def done(self) -> float | None:
        return self.end if self.end is not None else self.stopped


def read_runs(records: Path) -> list[RunLog]:
    runs: dict[str, RunLog] = {}
    for file in sorted(records.glob("*.log")):
        for line in file.read_text(errors="replace").splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a line cut short by a SIGKILL
            if r["phase"] == "start":
                runs[r["run"]] = RunLog(
                    r["run"],
                    r["task"],
                    r["slot"],
                    r["attempt"],
                    r["execution"],
                    r["node"],
                    r["pid"],
                    r["mono"],
                    r["wall"],
                )
            elif r["run"] in runs:
                setattr(runs[r["run"]], "end" if r["phase"] == "end" else "stopped", r["mono"])
    return sorted(runs.values(), key=lambda r: r.start)


@dataclasses.dataclass
class NodeFault:
    """A fault that hit one node itself: killed (or died) at ``start``, or frozen from
    ``start`` to ``end``. Runs on it meanwhile count as interrupted by the fault."""

    label: str
    kind: str
    start: float
    end: float = math.inf


class Case:
    def __init__(self, name: str, url: str, fleet: Fleet, *, lease: float = LEASE) -> None:
        self.name = name
        self.url = url
        self.fleet = fleet
        self.lease = lease
        self.client = client_for(url)
        self.began = time.monotonic()
        self.fault_start: float | None = None
        self.fault_end: float | None = None
        self.fault_end_wall: datetime | None = None
        self.node_faults: list[NodeFault] = []
        self.due: dict[int, float] = {}
        """One-time tasks of the workload: id -> when due (monotonic)."""
        self.recurring: set[int] = set()
        self.problems: list[str] = []
        self.figures: dict[str, Any] = {}

    def close(self) -> None:
        self.client.close()

    # -- workload -------------------------------------------------------------------

    def stream(
        self,
        count: int,
        *,
        start_in: float,
        over: float,
        seconds: float = 0.05,
        name: str = "faults.work",
        retries: int = 5,
    ) -> list[int]:
        """``count`` one-time tasks due evenly from ``start_in`` to ``start_in + over`` s from now."""
        # The database's clock is read somewhere within this round trip: pair it with the
        # moment before it, so that a due time here is never later than the true one (a
        # start is never judged early because the reply was slow to arrive).
        now_mono = time.monotonic()
        now_db = self.client.store.now()
        offsets = [start_in + over * i / max(1, count - 1) for i in range(count)]
        items = [
            {
                "task": name,
                "kwargs": {"seconds": seconds},
                "at": now_db + timedelta(seconds=offset),
                "max_retries": retries,
                "retry_backoff": 0.1,
            }
            for offset in offsets
        ]
        ids = []
        for start in range(0, len(items), 1000):
            for task, offset in zip(
                self.client.schedule_many(items[start : start + 1000]), offsets[start : start + 1000], strict=True
            ):
                self.due[task.id] = now_mono + offset
                ids.append(task.id)
        return ids

    def recurring_tasks(self, count: int, *, every: float = 1.0, seconds: float = 0.05) -> list[int]:
        ids = [self.client.schedule("faults.tick", every=every, kwargs={"seconds": seconds}).id for _ in range(count)]
        self.recurring.update(ids)
        return ids

    # -- nodes ----------------------------------------------------------------------

    def start_nodes(
        self, count: int, *, url: str | None = None, env: dict[str, str] | None = None, concurrency: int = 4
    ) -> list[Node]:
        """Start ``count`` nodes and wait until each has registered its node row."""
        nodes = [self.fleet.start(url or self.url, concurrency=concurrency, env=env) for _ in range(count)]
        self.wait_registered(nodes)
        return nodes

    def wait_registered(self, nodes: list[Node], timeout: float = 30.0) -> None:
        pids = {n.pid for n in nodes}
        if not eventually(lambda: pids <= {r.pid for r in self.client.nodes()}, timeout, interval=0.1):
            raise AssertionError(f"{self.name}: nodes did not register within {timeout} s\n{self.fleet.tails()}")

    def wait_started(self, ids: Iterable[int], timeout: float = 30.0) -> None:
        """Wait until every one of these tasks has a run going (not a fixed sleep)."""
        wanted = set(ids)

        def going() -> bool:
            return wanted <= {r.task for r in self.runs() if r.done is None}

        if not eventually(going, timeout, interval=0.05):
            raise AssertionError(f"{self.name}: tasks {sorted(wanted)} not all started\n{self.fleet.tails()}")

    def stop_nodes(self, nodes: Iterable[Node], grace: float = 5.0) -> None:
        """Graceful stops: each node exits 0 within its shutdown grace and a margin."""
        for node in nodes:
            if not node.alive():
                continue
            code = node.terminate(grace + 5.0)
            self.check(code == 0, f"node {node.label}: graceful stop ended with {code} (None: still running)")

    # -- the fault ------------------------------------------------------------------

    def fault_begins(self) -> None:
        self.fault_start = time.monotonic()

    def fault_ends(self) -> None:
        self.fault_end = time.monotonic()
        self.fault_end_wall = datetime.now(UTC)
        if self.fault_start is not None:
            self.figure("fault_s", self.fault_end - self.fault_start)

    def node_killed(self, node: Node, kind: str = "killed") -> None:
        self.node_faults.append(NodeFault(node.label, kind, time.monotonic()))

    def node_frozen(self, node: Node, start: float, end: float) -> None:
        self.node_faults.append(NodeFault(node.label, "frozen", start, end))

    # -- verdict --------------------------------------------------------------------

    def check(self, ok: object, problem: str) -> bool:
        if not ok:
            self.problems.append(problem)
        return bool(ok)

    def figure(self, name: str, value: Any) -> None:
        self.figures[name] = round(value, 2) if isinstance(value, float) else value

    def runs(self) -> list[RunLog]:
        return read_runs(self.fleet.records)

    def interrupted(self, run: RunLog) -> bool:
        """Was the run's node killed or frozen by the fault while the run went on? A run
        goes on until its node has written its result, a moment after the task returns:
        a node frozen or killed in that moment interrupted the run as surely (another node
        must then run it again), so the window reaches RECORD_SLACK_S past the task's end."""
        finish = run.done + RECORD_SLACK_S if run.done is not None else math.inf
        return any(f.label == run.node and f.start < finish and f.end > run.start for f in self.node_faults)

    def _death(self, run: RunLog) -> float:
        """When a run without an end of its own stopped: its node's death, else never."""
        deaths = [f.start for f in self.node_faults if f.label == run.node and f.end == math.inf]
        return min(deaths) if deaths else math.inf

    def verify(
        self,
        *,
        alive: Iterable[Node] = (),
        drain_timeout: float = 60.0,
        expect_resume: bool = False,
        final: Status = Status.COMPLETED,
    ) -> None:
        """The guarantees, once the fault has ended (``fault_ends``): every check runs,
        each violation is collected."""
        assert self.fault_end is not None and self.fault_end_wall is not None, "call fault_ends() first"
        alive = list(alive)
        # Nothing left RUNNING two leases after the fault: every RUNNING row from before
        # its end must by then be backed by a run still going on a live node.
        left = self.stale_running()
        deadline = self.fault_end + 2 * self.lease
        if left:
            eventually(lambda: not self.stale_running(), max(0.0, deadline - time.monotonic()))
            left = self.stale_running()
        self.check(
            not left, f"RUNNING two leases after the fault ended, no run behind them: {left[:10]}{self._rows(left)}"
        )
        self.figure("stale_running", len(left))

        # No task lost: every one-time task reaches its final state, every recurring one goes on.
        ids = set(self.due)
        if not eventually(lambda: self._all_final(ids, final), drain_timeout, interval=0.2):
            states = Counter(t.status.value for t in self._tasks(ids))
            self.check(False, f"not all {len(ids)} tasks reached {final.value} within {drain_timeout} s: {states}")
        self.figure("drain_s", time.monotonic() - self.fault_end)
        if self.recurring:
            self.check(
                eventually(self._recurring_went_on, drain_timeout),
                f"recurring tasks did not run after the fault: {sorted(self.recurring - self._recurring_after())}",
            )
        runs = self.runs()
        self._check_runs(runs, ids, expect_resume)
        self._check_executions(runs)
        self._check_nodes(alive)

    def _tasks(self, ids: set[int]) -> list[Any]:
        tasks = self.client.tasks(limit=10_000)
        if len(tasks) == 10_000:
            tasks += self.client.tasks(limit=10_000, offset=10_000)
        return [t for t in tasks if t.id in ids]

    def _all_final(self, ids: set[int], final: Status) -> bool:
        return all(t.status is final for t in self._tasks(ids))

    def _recurring_after(self) -> set[int]:
        assert self.fault_end is not None
        return {r.task for r in self.runs() if r.task in self.recurring and r.start > self.fault_end and r.end}

    def _recurring_went_on(self) -> bool:
        return self._recurring_after() == self.recurring

    def _rows(self, left: list[tuple[int, int]]) -> str:
        """The stored state behind stale RUNNING rows, to tell a wedged claim from a slow one."""
        lines = []
        for task_id, _ in left[:3]:
            task = self.client.get(task_id)
            lines.append(
                f"\n  task {task_id}: {task.status.value} v{task.version} attempt {task.attempt} "
                f"owner {task.lease_owner} lease until {task.lease_expires_at} runs {task.run_count}; executions "
                + ", ".join(f"{e.id} {e.status.value} {e.node} {e.started_at}" for e in self.client.executions(task_id))
            )
        runs = [r for r in self.runs() if r.task in {t for t, _ in left}]
        return "".join(lines) + (f"\n  runs logged by the tasks: {runs}" if runs else "")

    def stale_running(self) -> list[tuple[int, int]]:
        """(task, execution) of RUNNING executions started before the fault ended that no
        run on a live node is still working on."""
        assert self.fault_end_wall is not None
        live = {n.label for n in self.fleet.nodes if n.alive()}
        # A run goes on until its node has written its result, a moment after the task
        # returns (RECORD_SLACK_S, as in ``interrupted``): a row read in that moment is not
        # stale (a read there once failed a case whose rows were COMPLETED 50 ms later).
        now = time.monotonic()
        going = {
            r.execution for r in self.runs() if r.node in live and (r.done is None or now - r.done < RECORD_SLACK_S)
        }
        return [
            (e.task_id, e.id)
            for e in self.client.executions(status="RUNNING", limit=10_000)
            if e.started_at is not None and e.started_at < self.fault_end_wall and e.id not in going
        ]

    def _check_runs(self, runs: list[RunLog], ids: set[int], expect_resume: bool) -> None:
        assert self.fault_end is not None
        by_slot: dict[tuple[int, str], list[RunLog]] = defaultdict(list)
        by_task: dict[int, list[RunLog]] = defaultdict(list)
        for run in runs:
            by_slot[(run.task, run.slot)].append(run)
            by_task[run.task].append(run)
        reruns = twice = 0
        for (task, slot), group in by_slot.items():
            reruns += len(group) - 1
            finished = [r for r in group if r.end is not None and not self.interrupted(r)]
            if len(finished) > 1:
                twice += 1
                self.check(False, f"task {task} slot {slot} ran to its end {len(finished)} times: {finished}")
        overlaps = 0
        for task, group in by_task.items():
            for i, first in enumerate(group):
                finish = first.done if first.done is not None else self._death(first)
                for later in group[i + 1 :]:
                    if later.start < finish and not (self.interrupted(first) or self.interrupted(later)):
                        overlaps += 1
                        if overlaps <= 5:
                            self.check(False, f"task {task}: two copies running at once: {first} and {later}")
        if overlaps > 5:
            self.check(False, f"... {overlaps} overlapping pairs in all")
        missing = sorted(i for i in ids if not any(r.end is not None for r in by_task.get(i, [])))
        self.check(not missing, f"{len(missing)} tasks never ran to their end: {missing[:20]}")
        after = [r.start - self.fault_end for r in runs if r.start >= self.fault_end]
        recover = min(after) if after else None
        late = [r.start - self.due[r.task] for r in runs if r.task in self.due and r.attempt == 1]
        self.figure("tasks", len(ids) + len(self.recurring))
        self.figure("runs", len(runs))
        self.figure("completed_runs", sum(1 for r in runs if r.end is not None))
        self.figure("stopped_runs", sum(1 for r in runs if r.stopped is not None))
        self.figure("interrupted_reruns", reruns)
        self.figure("ran_twice", twice)
        self.figure("overlaps", overlaps)
        self.figure("recover_s", recover)
        self.figure("max_late_s", max(late) if late else None)
        if expect_resume:
            self.check(
                recover is not None and recover <= RESUME_WITHIN,
                f"runs resumed {recover} s after the fault ended (bound {RESUME_WITHIN} s)",
            )

    def _check_executions(self, runs: list[RunLog]) -> None:
        executions = self.client.executions(limit=10_000)
        completed = Counter((e.task_id, e.scheduled_for) for e in executions if e.status is ExecutionStatus.COMPLETED)
        doubles = {k: n for k, n in completed.items() if n > 1}
        self.check(not doubles, f"COMPLETED twice for one slot: {list(doubles.items())[:10]}")
        ended = {r.execution: r for r in runs if r.end is not None}
        lost = [
            (e.task_id, e.id, e.note)
            for e in executions
            if e.note is not None and e.note.startswith("lost") and e.id in ended and not self.interrupted(ended[e.id])
        ]
        self.check(not lost, f"{len(lost)} runs that finished were declared lost: {lost[:10]}")
        self.figure("executions", len(executions))
        self.figure("lost_executions", sum(1 for e in executions if e.note is not None and e.note.startswith("lost")))

    def _check_nodes(self, alive: list[Node]) -> None:
        assert self.fault_end_wall is not None and self.fault_end is not None
        for node in alive:
            if not self.check(node.alive(), f"node {node.label} exited (code {node.proc.returncode})"):
                continue

            def beat(node: Node = node) -> bool:
                return any(r.pid == node.pid and r.heartbeat_at > self.fault_end_wall for r in self.client.nodes())

            self.check(
                eventually(beat, max(0.5, self.fault_end + self.lease - time.monotonic())),
                f"node {node.label}: no heartbeat in its node row within a lease after the fault ended",
            )

    def log_lines(
        self,
        nodes: Iterable[Node],
        *,
        required: bool = True,
        trouble: re.Pattern[str] = STORE_TROUBLE,
        back: re.Pattern[str] = STORE_BACK,
    ) -> None:
        """Each node logged the fault as it began (when ``required``, or if it saw it at
        all) and, after that, as it ended."""
        for node in nodes:
            text = node.output()
            began = trouble.search(text)
            if began is None:
                self.check(not required, f"node {node.label}: no log line as the fault began ({trouble.pattern})")
                continue
            self.check(
                back.search(text, began.end()) is not None,
                f"node {node.label}: logged the fault ({began.group(0)!r}) but no line as it ended ({back.pattern})",
            )

    def finish(self) -> None:
        """Print the figures and fail with every violation found."""
        self.figure("test_s", time.monotonic() - self.began)
        figures = " ".join(f"{k}={v}" for k, v in self.figures.items())
        print(f"\n[faults] {self.name}: {figures}")
        for problem in self.problems:
            print(f"[faults] {self.name}: VIOLATION {problem}")
        if self.problems:
            raise AssertionError(
                f"{self.name}: {len(self.problems)} guarantee(s) violated:\n- "
                + "\n- ".join(self.problems)
                + f"\nfigures: {figures}\n{self.fleet.tails()}"
            )
