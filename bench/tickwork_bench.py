"""tickwork's own benchmark: one table for SQLite, PostgreSQL skip_locked and PostgreSQL
optimistic, each beside the ceiling of a bare claim loop on the same database.

    .venv/bin/python -m bench.tickwork_bench [--stores sqlite,skip_locked,optimistic] [--scale 1.0]

Workloads (every task is a no-op that appends "<task id> <start ns>" to its process's
sink file, so runs are counted outside the database too):
  W1 throughput  20,000 one-time tasks already due, 2 node processes: executions per second
                 from node launch to the last start.
  W2 lateness    2,000 tasks spread evenly over 20 s: start - scheduled, p50/p95/p99/max.
  W3 herd        10,000 tasks due at the same instant: drain time (last start - that
                 instant), p50/p99 lateness, peak RSS per node.
  W4 duplicates  4 nodes, 5,000 tasks due just after they are up: how many ran 0, 1, >1 times.
  W5 big herd    100,000 one-time tasks due at the same instant, 2 nodes: runs per task
                 (0/1/>1), drain time, lateness p50/p99, each node's RSS when idle and at
                 its peak, and the queue depth / oldest-age gauges sampled while it drains.
  wake-up        2 idle nodes with poll_interval=30: a task scheduled for now, start - scheduled.
  ceiling        a bare loop on the same store, 2 processes, W1's tasks: claim a batch
                 (PostgreSQL: 500 rows FOR UPDATE SKIP LOCKED), do nothing, write one
                 execution row per task and mark them done in one transaction.
"""

from __future__ import annotations

import argparse
import compileall
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tickwork import App, Context

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
CHUNK = 5000


# -- node and ceiling processes -----------------------------------------------------------


def make_app(url: str, claim: str | None, sink: Path | None, poll: float = 1.0) -> App:
    app = App(url, claim=claim, poll_interval=poll)
    fd = os.open(sink / f"{os.getpid()}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT) if sink else -1

    @app.task(name="bench.noop")
    def noop(ctx: Context, bid: int) -> None:
        os.write(fd, f"{bid} {time.time_ns()}\n".encode())

    return app


def node_main(url: str, claim: str | None, sink: Path, poll: float) -> None:
    make_app(url, claim, sink, poll).run_worker(concurrency=16)


# -- one store's run ------------------------------------------------------------------------


@dataclass
class Store:
    url: str
    claim: str | None
    cleanup: list[str] = field(default_factory=list)


def fresh_store(kind: str, folder: Path) -> Store:
    if kind == "sqlite":
        return Store(f"sqlite:///{folder / f'{uuid.uuid4().hex}.db'}", None)
    import psycopg

    name = f"tickwork_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
    return Store(url, kind, [name])


def drop(store: Store) -> None:
    if not store.cleanup:
        return
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        for name in store.cleanup:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def compile_checkout() -> None:
    """Byte-compile this checkout's modules before processes are started from it, as
    ``pip install`` does for an installed package (the peers are installed): where
    PYTHONDONTWRITEBYTECODE is set, every process would otherwise compile tickwork's
    modules again at its start (~40 ms each on the 2-core machine)."""
    for folder in ("tickwork", "bench"):
        compileall.compile_dir(ROOT / folder, quiet=1)


class Run:
    """Processes of one workload, and what their sink files say."""

    def __init__(self, store: Store, folder: Path) -> None:
        self.store = store
        self.sink = folder / f"sink-{uuid.uuid4().hex[:8]}"
        self.sink.mkdir()
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, count: int, *, ceiling: bool = False, poll: float = 1.0) -> float:
        compile_checkout()
        launched = time.time()
        for _ in range(count):
            if ceiling:  # a process that loads nothing of tickwork's (bench/ceiling.py)
                argv = ["-m", "bench.ceiling", self.store.url, str(self.sink)]
            else:
                argv = ["-m", "bench.tickwork_bench", "--node", self.store.url, "--poll", str(poll)]
                argv += ["--claim", self.store.claim] if self.store.claim else []
                argv += ["--sink", str(self.sink)]
            self.procs.append(subprocess.Popen([sys.executable, *argv], cwd=ROOT, stderr=subprocess.DEVNULL))
        return launched

    def starts(self) -> list[tuple[int, float]]:
        out = []
        for file in self.sink.glob("*.log"):
            for line in file.read_text().split("\n")[:-1]:  # a line being written has no "\n" yet
                bid, ns = line.split()
                out.append((int(bid), int(ns) / 1e9))
        return out

    def wait_for(self, count: int, timeout: float = 300, settle: float = 0.0) -> list[tuple[int, float]]:
        deadline = time.time() + timeout
        while len({b for b, _ in self.starts()}) < count:
            if time.time() > deadline or any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.05)
        if settle:
            time.sleep(settle)  # W4: give late duplicates the chance to show up
        return self.starts()

    def peak_rss_mb(self) -> list[float]:
        return self._status_mb("VmHWM")

    def rss_mb(self) -> list[float]:
        return self._status_mb("VmRSS")

    def _status_mb(self, field: str) -> list[float]:
        values = []
        for p in self.procs:
            try:
                status = Path(f"/proc/{p.pid}/status").read_text()
                kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith(field))
                values.append(kb / 1024)
            except (OSError, StopIteration):
                pass
        return values

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def schedule(store: Store, times: list[datetime]) -> None:
    app = make_app(store.url, store.claim, None)
    for i in range(0, len(times), CHUNK):
        app.schedule_many(
            [{"task": "bench.noop", "kwargs": {"bid": i + j}, "at": t} for j, t in enumerate(times[i : i + CHUNK])]
        )
    app.close()


def w1(
    kind: str, folder: Path, n: int, *, ceiling: bool = False, prepare: Callable[[str], None] | None = None
) -> float:
    """W1; ``prepare(url)`` first fills the fresh store with whatever else it should hold."""
    store = fresh_store(kind, folder)
    try:
        if prepare is not None:
            prepare(store.url)
        due = datetime.now(UTC) - timedelta(seconds=1)
        schedule(store, [due] * n)
        run = Run(store, folder)
        launched = run.start(2, ceiling=ceiling)
        starts = run.wait_for(n)
        run.stop()
        return len({b for b, _ in starts}) / (max(t for _, t in starts) - launched)
    finally:
        drop(store)


def lateness_ms(starts: list[tuple[int, float]], due: dict[int, float]) -> list[float]:
    first: dict[int, float] = {}
    for bid, t in starts:
        first[bid] = min(t, first.get(bid, t))
    return sorted((t - due[bid]) * 1000 for bid, t in first.items())


def pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, max(0, round(p / 100 * len(values)) - 1))]


def w2(kind: str, folder: Path, n: int, span: float) -> dict[str, float]:
    store = fresh_store(kind, folder)
    try:
        first = datetime.now(UTC) + timedelta(seconds=4)
        times = [first + timedelta(seconds=span * i / n) for i in range(n)]
        schedule(store, times)
        run = Run(store, folder)
        run.start(2)
        starts = run.wait_for(n, timeout=span + 60)
        run.stop()
        late = lateness_ms(starts, {i: t.timestamp() for i, t in enumerate(times)})
        return {"p50": pct(late, 50), "p95": pct(late, 95), "p99": pct(late, 99), "max": late[-1]}
    finally:
        drop(store)


def w3(kind: str, folder: Path, n: int) -> dict[str, float]:
    store = fresh_store(kind, folder)
    try:
        instant = datetime.now(UTC) + timedelta(seconds=6)
        schedule(store, [instant] * n)
        run = Run(store, folder)
        run.start(2)
        starts = run.wait_for(n)
        rss = run.peak_rss_mb()
        run.stop()
        late = lateness_ms(starts, dict.fromkeys(range(n), instant.timestamp()))
        return {"drain": late[-1] / 1000, "p50": pct(late, 50), "p99": pct(late, 99), "rss": max(rss, default=0)}
    finally:
        drop(store)


def w4(kind: str, folder: Path, n: int) -> Counter[str]:
    store = fresh_store(kind, folder)
    try:
        due = datetime.now(UTC) + timedelta(seconds=3)  # just after the 4 nodes are up
        schedule(store, [due] * n)
        run = Run(store, folder)
        run.start(4)
        starts = run.wait_for(n, settle=2.0)
        run.stop()
        per_task = Counter(b for b, _ in starts)
        return Counter("0" if per_task[i] == 0 else "1" if per_task[i] == 1 else ">1" for i in range(n))
    finally:
        drop(store)


def w5(kind: str, folder: Path, n: int) -> dict[str, object]:
    store = fresh_store(kind, folder)
    try:
        # Far enough ahead that scheduling (~3,000 tasks/s on a slow 2-core box) and the
        # nodes' start-up are over before it: the herd must meet idle nodes.
        instant = datetime.now(UTC) + timedelta(seconds=10 + n / 2_500)
        schedule(store, [instant] * n)
        probe = make_app(store.url, store.claim, None).store  # what a metrics scrape reads
        run = Run(store, folder)
        run.start(2)
        while len(probe.list_nodes()) < 2:
            time.sleep(0.05)
        if time.time() > instant.timestamp():
            raise RuntimeError("W5: scheduling and start-up took longer than the lead; the herd met no idle nodes")
        time.sleep(max(0.0, instant.timestamp() - time.time() - 1.0))  # the nodes idle until just before
        idle = run.rss_mb()
        trace: list[tuple[float, int, float]] = []  # (s after the instant, depth, oldest age) as a scrape sees it
        while len({b for b, _ in run.starts()}) < n and time.time() < instant.timestamp() + 300:
            depth, oldest = probe.queue_depth()
            age = 0.0 if oldest is None else max(0.0, (probe.now() - oldest).total_seconds())
            trace.append((time.time() - instant.timestamp(), depth, age))
            time.sleep(float(os.environ.get("BENCH_W5_SAMPLE_S", "0.25")))
        starts = run.wait_for(n, settle=1.0)
        depth, oldest = probe.queue_depth()  # drained: the age falls back with the depth
        age = 0.0 if oldest is None else max(0.0, (probe.now() - oldest).total_seconds())
        trace.append((time.time() - instant.timestamp(), depth, age))
        peak = run.peak_rss_mb()
        run.stop()
        probe.close()
        late = lateness_ms(starts, dict.fromkeys(range(n), instant.timestamp()))
        per_task = Counter(b for b, _ in starts)
        return {
            "runs": Counter("0" if per_task[i] == 0 else "1" if per_task[i] == 1 else ">1" for i in range(n)),
            "drain": late[-1] / 1000,
            "p50": pct(late, 50),
            "p99": pct(late, 99),
            "first_s": [sum(1 for x in late if s * 1000 <= x < (s + 1) * 1000) for s in range(8)],
            "idle": idle,
            "peak": peak,
            "trace": [(round(t, 1), d, round(a, 1)) for t, d, a in _thin([x for x in trace if x[0] >= 0], 10)],
        }
    finally:
        drop(store)


def _thin(items: list[tuple[float, int, float]], most: int) -> list[tuple[float, int, float]]:
    """At most ``most`` evenly spaced items, the last one always kept."""
    if len(items) <= most:
        return items
    step = len(items) / (most - 1)
    return [items[int(i * step)] for i in range(most - 1)] + [items[-1]]


def wake(kind: str, folder: Path, samples: int) -> dict[str, float]:
    store = fresh_store(kind, folder)
    try:
        schedule(store, [])
        run = Run(store, folder)
        run.start(2, poll=30.0)
        app = make_app(store.url, store.claim, None)
        delays = []
        time.sleep(2.0)  # let the nodes start and go idle: the measurement needs them asleep
        for i in range(samples):
            before = {b for b, _ in run.starts()}
            task = app.schedule("bench.noop", kwargs={"bid": 1_000_000 + i})
            deadline = time.time() + 35
            while time.time() < deadline:
                new = [t for b, t in run.starts() if b == 1_000_000 + i and b not in before]
                if new:
                    delays.append((new[0] - task.scheduled_at.timestamp()) * 1000)
                    break
                time.sleep(0.002)
        run.stop()
        app.close()
        delays.sort()
        return {"p50": pct(delays, 50), "max": delays[-1]}
    finally:
        drop(store)


LABELS = {
    "sqlite": "SQLite (optimistic)",
    "skip_locked": "PostgreSQL skip_locked",
    "optimistic": "PostgreSQL optimistic",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="sqlite,skip_locked,optimistic")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every N (0.1 for a smoke run)")
    parser.add_argument("--w5-only", action="store_true", help="run only W5 (the 100,000-task herd)")
    parser.add_argument("--node")
    parser.add_argument("--claim")
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--sink", type=Path)
    args = parser.parse_args()
    if args.node:
        return node_main(args.node, args.claim, args.sink, args.poll)

    def n(value: int) -> int:
        return max(10, int(value * args.scale))

    rows = []
    herds = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for kind in args.stores.split(","):
            print(f"# {LABELS[kind]} W5 ...", file=sys.stderr, flush=True)
            herds.append((kind, w5(kind, folder, n(100_000))))
        for kind in [] if args.w5_only else args.stores.split(","):
            print(f"# {LABELS[kind]} ...", file=sys.stderr, flush=True)
            ceiling = 0.0 if kind == "optimistic" else w1(kind, folder, n(20_000), ceiling=True)
            rows.append(
                (
                    kind,
                    ceiling,
                    w1(kind, folder, n(20_000)),
                    w2(kind, folder, n(2_000), 20.0),
                    w3(kind, folder, n(10_000)),
                    w4(kind, folder, n(5_000)),
                    # Without notifications an embedded node finds new work at its next poll.
                    wake(kind, folder, 20) if kind != "sqlite" else None,
                )
            )
    pg_ceiling = next((c for k, c, *_ in rows if k == "skip_locked"), 0.0)
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, scale {args.scale}")
    print("| store | W5 ran 0/1/>1 | drain s | lateness p50/p99 ms | RSS MB idle -> peak per node |")
    print("|---|---|---|---|---|")
    for kind, herd in herds:
        runs = herd["runs"]
        assert isinstance(runs, Counter)
        rss = ", ".join(f"{i:.0f} -> {p:.0f}" for i, p in zip(herd["idle"], herd["peak"], strict=False))  # type: ignore[call-overload]
        print(
            f"| {LABELS[kind]} | {runs['0']} / {runs['1']} / {runs['>1']} | {herd['drain']:.2f} "
            f"| {herd['p50']:.0f} / {herd['p99']:.0f} | {rss} |"
        )
    for kind, herd in herds:
        print(f"{LABELS[kind]} W5 queue (s after the instant, depth, oldest age s): {herd['trace']}")
        print(f"{LABELS[kind]} W5 runs started in each of the first 8 s: {herd['first_s']}")
    if not rows:
        return
    print(
        "| store | ceiling exec/s | W1 exec/s (of ceiling) | W2 lateness p50/p95/p99/max ms "
        "| W3 drain s, p50/p99 ms, peak RSS MB/node | W4 ran 0/1/>1 | wake-up p50/max ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for kind, ceiling, tput, late, herd, dup, wk in rows:
        ceiling = ceiling or pg_ceiling  # both PostgreSQL strategies share one database ceiling
        wake_text = f"{wk['p50']:.1f} / {wk['max']:.1f}" if wk else "n/a (polls)"
        print(
            f"| {LABELS[kind]} | {ceiling:,.0f} | {tput:,.0f} ({tput / ceiling:.2f}) "
            f"| {late['p50']:.1f} / {late['p95']:.1f} / {late['p99']:.1f} / {late['max']:.1f} "
            f"| {herd['drain']:.2f}, {herd['p50']:.0f} / {herd['p99']:.0f}, {herd['rss']:.0f} "
            f"| {dup['0']} / {dup['1']} / {dup['>1']} "
            f"| {wake_text} |"
        )


if __name__ == "__main__":
    main()
