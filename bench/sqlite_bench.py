"""Benchmark tickwork on SQLite against a bare claim/finish loop on the same file format.

    .venv/bin/python -m bench.sqlite_bench [--tasks 20000] [--nodes 2] [--spread-tasks 2000]

W1 throughput: N one-time no-op tasks already due, K node processes; executions per
second from node launch to the last finish. The baseline ("bare loop") is K processes
doing only the irreducible work per task with the same durability: claim a batch in
one BEGIN IMMEDIATE transaction, then one transaction per task that marks it done and
inserts its execution row. The ratio tickwork / bare loop is what to read.
W2 lateness: tasks spread evenly over a window, start - scheduled_for p50/p95/p99/max.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tickwork import App, Context

ROOT = Path(__file__).resolve().parent.parent


def make_app(url: str) -> App:
    app = App(url, poll_interval=0.5, heartbeat=5.0, lease=30.0)

    @app.task(name="bench.noop")
    def noop(ctx: Context) -> None:
        return None

    return app


def node_main(url: str) -> None:
    make_app(url).run_worker(concurrency=8)


def bare_main(path: str) -> None:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    while True:
        conn.execute("BEGIN IMMEDIATE")
        ids = [
            r[0]
            for r in conn.execute(
                "UPDATE tickwork_tasks SET status='RUNNING', version=version+1 WHERE id IN "
                "(SELECT id FROM tickwork_tasks WHERE status='PENDING' ORDER BY next_run_at LIMIT 8) RETURNING id"
            )
        ]
        conn.execute("COMMIT")
        if not ids:
            return
        for task_id in ids:
            now = int(time.time() * 1e6)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE tickwork_tasks SET status='COMPLETED' WHERE id=?", (task_id,))
            conn.execute(
                "INSERT INTO tickwork_executions (task_id, attempt, scheduled_for, started_at, finished_at, status) "
                "VALUES (?, 1, ?, ?, ?, 'COMPLETED')",
                (task_id, now, now, now),
            )
            conn.execute("COMMIT")


def fresh_db(folder: Path, name: str) -> tuple[str, App]:
    path = folder / f"{name}.db"
    url = f"sqlite:///{path}"
    return url, make_app(url)


def launch(args: list[str], count: int) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen([sys.executable, "-m", "bench.sqlite_bench", *args], cwd=ROOT, stderr=subprocess.DEVNULL)
        for _ in range(count)
    ]


def completed(path: Path) -> int:
    conn = sqlite3.connect(path, timeout=30)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM tickwork_tasks WHERE status='COMPLETED'").fetchone()[0])
    finally:
        conn.close()


def wait_all(path: Path, total: int, procs: list[subprocess.Popen[bytes]], timeout: float = 600) -> float:
    launched = time.time()
    deadline = launched + timeout
    while completed(path) < total:
        if time.time() > deadline:
            raise SystemExit(f"timed out: {completed(path)}/{total}")
        time.sleep(0.05)
    conn = sqlite3.connect(path, timeout=30)
    last = conn.execute("SELECT MAX(finished_at) FROM tickwork_executions").fetchone()[0] / 1e6
    conn.close()
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(60)
    return last - launched


def w1(folder: Path, tasks: int, nodes: int) -> tuple[float, float]:
    due = datetime.now(UTC) - timedelta(seconds=1)
    results = []
    for name in ("bare", "tickwork"):
        url, app = fresh_db(folder, f"w1-{name}")
        for start in range(0, tasks, 5000):
            app.schedule_many([{"task": "bench.noop", "at": due} for _ in range(start, min(tasks, start + 5000))])
        app.close()
        path = Path(url.removeprefix("sqlite:///"))
        procs = launch(["--bare", str(path)] if name == "bare" else ["--node", url], nodes)
        results.append(tasks / wait_all(path, tasks, procs))
    return results[0], results[1]


def w2(folder: Path, tasks: int, window: float, nodes: int) -> list[float]:
    url, app = fresh_db(folder, "w2")
    start = datetime.now(UTC) + timedelta(seconds=3)  # past node start-up
    step = window / tasks
    app.schedule_many([{"task": "bench.noop", "at": start + timedelta(seconds=i * step)} for i in range(tasks)])
    path = Path(url.removeprefix("sqlite:///"))
    procs = launch(["--node", url], nodes)
    wait_all(path, tasks, procs)
    lateness = sorted(
        (e.started_at - e.scheduled_for).total_seconds() * 1000
        for e in app.executions(limit=10_000)
        if e.started_at is not None
    )
    app.close()
    return lateness


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--spread-tasks", type=int, default=2000)
    parser.add_argument("--spread-seconds", type=float, default=20.0)
    parser.add_argument("--node")
    parser.add_argument("--bare")
    args = parser.parse_args()
    if args.node:
        return node_main(args.node)
    if args.bare:
        return bare_main(args.bare)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        bare, tick = w1(folder, args.tasks, args.nodes)
        lateness = w2(folder, args.spread_tasks, args.spread_seconds, args.nodes)
    q = statistics.quantiles(lateness, n=100)
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}")
    print(f"W1 throughput, {args.tasks} due no-op tasks, {args.nodes} processes:")
    print(f"  bare claim/finish loop   {bare:8.0f} exec/s   (baseline)")
    print(f"  tickwork                 {tick:8.0f} exec/s   ratio {tick / bare:.2f}")
    print(f"W2 lateness, {args.spread_tasks} tasks over {args.spread_seconds:g} s, {args.nodes} processes (ms):")
    print(f"  p50 {q[49]:.1f}  p95 {q[94]:.1f}  p99 {q[98]:.1f}  max {lateness[-1]:.1f}")


if __name__ == "__main__":
    main()
