"""Retention under load: W1 while the nodes prune a big old history, against W1 without.

    .venv/bin/python -m bench.retention [--store postgres|sqlite] [--executions 1000000]
        [--tasks 200000] [--rounds 3] [--w1 20000] [--heartbeat 10]

One fresh database gets ``--executions`` ended executions and ``--tasks`` ended one-time
tasks, all finished more than the retention (30 days, the App's default) ago, written
with SQL (bench/retention_data.py). On that same store, rounds alternate (ABAB…) between
W1 with the nodes pruning (``App(retention=30 days)``: the nodes' own Pruner, at start-up
and then every reconciler pass while more is left) and W1 with ``retention=None``.

W1 is bench/tickwork_bench.py's: ``--w1`` due no-op tasks, 2 node processes of
``concurrency=16``, executions per second from node launch to the last start. The nodes
here are that bench's, but for their retention setting and one bench-only probe: in
each node process ``tickwork.store.retention.prune`` is wrapped to time each call (one
batch: one transaction) and each statement in it, commit included, into a log file.

Prints every round, then the ratio of the medians (with pruning / without), the rows
the nodes pruned during the W1 runs, the share of the W1 window they spent pruning, and
the longest single prune statement and call. ``--heartbeat 1`` brings the Pruner back
every second instead of every 10 (a pass is 10 batches), for pruning all through W1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.retention_data import counts, generate
from bench.tickwork_bench import ROOT, Run, Store, drop, fresh_store, schedule
from tickwork import App, Context
from tickwork.model import PruneCounts
from tickwork.store import open_store, retention
from tickwork.store.dialect import Dialect, Row, Session

RETENTION = timedelta(days=30)
"""The App's default, which the nodes that prune run with."""
KINDS = {"postgres": "skip_locked", "sqlite": "sqlite"}


# -- in a node process: the node, and the probe around retention.prune ------------------------


class _TimedSession:
    def __init__(self, session: Session, steps: list[tuple[str, float]]) -> None:
        self.session, self.steps = session, steps

    def _timed(self, name: str, began: float) -> None:
        self.steps.append((name, time.perf_counter() - began))

    def fetch_all(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        began = time.perf_counter()
        rows = self.session.fetch_all(query, params)
        self._timed(query, began)
        return rows

    def fetch_one(self, query: str, params: Mapping[str, Any]) -> Row | None:
        began = time.perf_counter()
        row = self.session.fetch_one(query, params)
        self._timed(query, began)
        return row

    def execute(self, query: str, params: Mapping[str, Any]) -> int:
        began = time.perf_counter()
        count = self.session.execute(query, params)
        self._timed(query, began)
        return count


class _TimedDialect:
    """The node's dialect, for one prune call: its transaction's statements and commit timed."""

    def __init__(self, d: Dialect, steps: list[tuple[str, float]]) -> None:
        self.d, self.steps = d, steps

    def __getattr__(self, name: str) -> Any:
        return getattr(self.d, name)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[_TimedSession]:
        manager = self.d.transaction()
        began = time.perf_counter()
        session = manager.__enter__()  # SQLite: waits here for the file's write lock
        self.steps.append(("begin", time.perf_counter() - began))
        try:
            yield _TimedSession(session, self.steps)
        except BaseException:
            if not manager.__exit__(*sys.exc_info()):
                raise
            return
        began = time.perf_counter()
        manager.__exit__(None, None, None)
        self.steps.append(("commit", time.perf_counter() - began))


def instrument(log: Path) -> None:
    """Time every ``retention.prune`` call of this process into ``log``, one JSON line each."""
    real = retention.prune
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def timed(d: Dialect, older_than: datetime, keep_last: int, limit: int, *, dry_run: bool = False) -> PruneCounts:
        steps: list[tuple[str, float]] = []
        at, began = time.time(), time.perf_counter()
        pruned = real(_TimedDialect(d, steps), older_than, keep_last, limit, dry_run=dry_run)  # type: ignore[arg-type]
        line = {
            "at": at,
            "s": time.perf_counter() - began,
            "steps": steps,
            "executions": pruned.executions,
            "tasks": pruned.tasks,
            "busy": pruned.busy,
        }
        os.write(fd, (json.dumps(line) + "\n").encode())
        return pruned

    retention.prune = timed


def node_main(args: argparse.Namespace) -> None:
    app = App(
        args.node,
        claim=args.claim,
        poll_interval=1.0,
        heartbeat=args.heartbeat,
        retention=None if args.no_prune else RETENTION,
    )
    fd = os.open(args.sink / f"{os.getpid()}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    @app.task(name="bench.noop")
    def noop(ctx: Context, bid: int) -> None:
        os.write(fd, f"{bid} {time.time_ns()}\n".encode())

    instrument(args.prune_log)
    app.run_worker(concurrency=16)


# -- the harness --------------------------------------------------------------------------------


class NodeRun(Run):
    """tickwork_bench's Run, its nodes launched from this module (retention on or off, probed)."""

    def __init__(self, store: Store, folder: Path, *, prune: bool, heartbeat: float) -> None:
        super().__init__(store, folder)
        self.prune, self.heartbeat = prune, heartbeat
        self.log = folder / f"prune-{uuid.uuid4().hex[:8]}.jsonl"

    def start(self, count: int, *, ceiling: bool = False, poll: float = 1.0) -> float:
        launched = time.time()
        for _ in range(count):
            args = ["--node", self.store.url, "--sink", str(self.sink), "--prune-log", str(self.log)]
            args += ["--heartbeat", str(self.heartbeat)] + ([] if self.prune else ["--no-prune"])
            if self.store.claim:
                args += ["--claim", self.store.claim]
            self.procs.append(
                subprocess.Popen([sys.executable, "-m", "bench.retention", *args], cwd=ROOT, stderr=subprocess.DEVNULL)
            )
        return launched

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]


@dataclass
class Round:
    prune: bool
    rate: float
    window: tuple[float, float]
    calls: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pruned(self) -> PruneCounts:
        total = PruneCounts()
        for c in self.calls:
            total += PruneCounts(c["executions"], c["tasks"])
        return total

    def pruning_share(self) -> float:
        """Share of the W1 window spent inside prune calls (their overlap with it)."""
        start, end = self.window
        inside: float = sum(max(0.0, min(end, c["at"] + c["s"]) - max(start, c["at"])) for c in self.calls)
        return inside / (end - start)


def w1_round(store: Store, folder: Path, n: int, *, prune: bool, heartbeat: float) -> Round:
    schedule(store, [datetime.now(UTC) - timedelta(seconds=1)] * n)
    run = NodeRun(store, folder, prune=prune, heartbeat=heartbeat)
    try:
        launched = run.start(2)
        starts = run.wait_for(n)
    finally:
        run.stop()
    started = {b for b, _ in starts}
    if len(started) < n:
        raise RuntimeError(f"W1: only {len(started)} of {n} tasks started")
    last = max(t for _, t in starts)
    return Round(prune, n / (last - launched), (launched, last), run.calls())


def longest(rounds: list[Round]) -> tuple[tuple[str, float], dict[str, Any]]:
    """The longest single statement (name, s) and the longest prune call of the rounds."""
    calls = [c for r in rounds for c in r.calls]
    steps = [(name, s) for c in calls for name, s in c["steps"] if name not in ("begin", "commit")]
    return max(steps, key=lambda x: x[1], default=("-", 0.0)), max(calls, key=lambda c: c["s"], default={})


def breakdown(call: dict[str, Any]) -> str:
    """A call's time: waiting to begin, its statements, its commit (ms)."""
    parts = {"begin": 0.0, "statements": 0.0, "commit": 0.0}
    for name, s in call.get("steps", []):
        parts[name if name in parts else "statements"] += s * 1000
    return f"{call.get('s', 0.0) * 1000:.1f} ms (" + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()) + ")"


def per_step(rounds: list[Round]) -> str:
    times: dict[str, list[float]] = {}
    for c in (c for r in rounds for c in r.calls if not c["busy"]):
        for name, s in c["steps"]:
            times.setdefault(name, []).append(s * 1000)
    parts = []
    for name, values in times.items():
        values.sort()
        p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
        parts.append(f"{name} {statistics.median(values):.1f} / {p95:.1f} / {values[-1]:.1f}")
    return "; ".join(parts)


def describe(i: int, r: Round) -> str:
    text = f"round {i} {'pruning' if r.prune else 'retention=None'}: W1 {r.rate:,.0f} exec/s"
    if not r.prune:
        return text
    real = [c for c in r.calls if not c["busy"]]
    busy = len(r.calls) - len(real)
    pruned = r.pruned
    return (
        f"{text}; pruned {pruned.executions:,} executions + {pruned.tasks:,} tasks in {len(real)} batches"
        f" ({busy} skipped: lock busy), {r.pruning_share():.0%} of the W1 window inside prune calls"
    )


def report(args: argparse.Namespace, rounds: list[Round], before: tuple[int, int], after: tuple[int, int]) -> None:
    on = [r for r in rounds if r.prune]
    off = [r for r in rounds if not r.prune]
    with_prune, without = statistics.median(r.rate for r in on), statistics.median(r.rate for r in off)
    (name, statement), call = longest(on)
    commits = sorted(s for r in on for c in r.calls for n, s in c["steps"] if n == "commit")
    pruned = PruneCounts()
    for r in on:
        pruned += r.pruned
    print(f"command: .venv/bin/python -m bench.retention {' '.join(sys.argv[1:])}")
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}")
    print(f"store before: {before[0]:,} executions, {before[1]:,} tasks", end="; ")
    print(f"after (W1's rows included): {after[0]:,} executions, {after[1]:,} tasks")
    print(
        "| store | W1 retention=None exec/s (median) | W1 while pruning exec/s (median) | pruning / not "
        "| rows pruned during the W1 runs | W1 window inside prune calls | longest prune statement "
        "| longest prune call (waiting to begin, statements, commit) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    share = statistics.median(r.pruning_share() for r in on)
    print(
        f"| {args.store} | {without:,.0f} | {with_prune:,.0f} | {with_prune / without:.2f} "
        f"| {pruned.executions:,} executions + {pruned.tasks:,} tasks | {share:.0%} "
        f"| {statement * 1000:.1f} ms ({name}) | {breakdown(call)} |"
    )
    if commits:
        print(f"prune commits: median {statistics.median(commits) * 1000:.1f} ms, max {commits[-1] * 1000:.1f} ms")
    print("prune steps, ms (median / p95 / max over the batches):", per_step(on))


def measure(args: argparse.Namespace, folder: Path) -> None:
    store = fresh_store(KINDS[args.store], folder)
    try:
        s = open_store(store.url)
        s.migrate()
        s.close()
        took = generate(store.url, args.executions, args.tasks, datetime.now(UTC) - RETENTION - timedelta(days=1))
        before = counts(store.url)
        print(f"# generated {before[0]:,} executions, {before[1]:,} tasks in {took:.1f} s", file=sys.stderr)
        rounds = []
        for i in range(args.rounds):
            for prune in (True, False) if i % 2 == 0 else (False, True):
                rounds.append(w1_round(store, folder, args.w1, prune=prune, heartbeat=args.heartbeat))
                print(f"# {describe(i + 1, rounds[-1])}", file=sys.stderr, flush=True)
        for i, r in enumerate(rounds):
            print(describe(i // 2 + 1, r))
        report(args, rounds, before, counts(store.url))
    finally:
        drop(store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", choices=sorted(KINDS), default="postgres")
    parser.add_argument("--executions", type=int, default=1_000_000)
    parser.add_argument("--tasks", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3, help="pairs of W1 runs, one pruning and one not")
    parser.add_argument("--w1", type=int, default=20_000, help="due tasks per W1 run")
    parser.add_argument("--heartbeat", type=float, default=10.0, help="the nodes' heartbeat (reconciler pass), s")
    parser.add_argument("--node")
    parser.add_argument("--claim")
    parser.add_argument("--no-prune", action="store_true")
    parser.add_argument("--sink", type=Path)
    parser.add_argument("--prune-log", type=Path)
    args = parser.parse_args()
    if args.node:
        return node_main(args)
    with tempfile.TemporaryDirectory() as tmp:
        measure(args, Path(tmp))


if __name__ == "__main__":
    main()
