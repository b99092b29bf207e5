"""How long a worker takes from its process's launch to its first run, and what that
start costs in CPU: the part of W1's "exec/s from launch" that no claim or write can win
back, beside the same for the peers of bench.peers.

    .venv/bin/python -m bench.startup [--systems tickwork,pgqueuer,bare] [--rounds 5]

Each round, for each system in turn (so that a drift of the machine's speed falls on
all alike): a fresh database, one due task stored the system's way, one worker process
launched (bench.peers.worker, as bench.peers does), and, when the task's start appears
in the sink, the time since the launch and the CPU the process had used by then (all
its threads, from ``/proc/PID/task/*/schedstat``: on a machine whose cores are busy, as
in W1 with two workers starting at once, that CPU is what a start costs). Prints each
round and the medians, in milliseconds, and each system's as a ratio to tickwork's.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.peers.systems import System, parse_system
from bench.tickwork_bench import ROOT, Run, compile_checkout, drop, fresh_store


def process_cpu_ms(pid: int) -> float:
    """CPU time of all the process's threads so far (ns precision, unlike /proc/PID/stat's
    ticks); threads that already ended are not counted (a worker's start ends none)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / 1e6


def first_run(system: System, folder: Path) -> tuple[float, float]:
    """Milliseconds from the launch to the first run, and of the process's CPU by then."""
    store = fresh_store("skip_locked", folder)
    try:
        system.enqueue(store.url, [datetime.now(UTC) - timedelta(seconds=1)])
        run = Run(store, folder)
        launched = time.time_ns()
        argv, env = system.command(store.url, run.sink)
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                started = [at for number, at in run.starts() if number == 0]
                if started:
                    return (started[0] * 1e9 - launched) / 1e6, process_cpu_ms(process.pid)
                time.sleep(0.002)
            raise SystemExit(f"{system.name}: the worker did not run its task within 30 s")
        finally:
            process.terminate()
            process.wait(10)
    finally:
        drop(store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", default="tickwork,pgqueuer,bare")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    systems = [parse_system(name) for name in args.systems.split(",")]
    compile_checkout()
    walls: dict[str, list[float]] = defaultdict(list)
    cpus: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for system in systems:
                wall, cpu = first_run(system, Path(tmp))
                walls[system.name].append(wall)
                cpus[system.name].append(cpu)
                print(f"# round {i + 1} {system.name}: {wall:.0f} ms, {cpu:.0f} ms of CPU", file=sys.stderr, flush=True)
    base = systems[0].name
    print(f"| system | launch to first run, ms | its CPU by then, ms | CPU / {base}'s |")
    print("|---|---|---|---|")
    for system in systems:
        wall, cpu = statistics.median(walls[system.name]), statistics.median(cpus[system.name])
        print(f"| {system.name} | {wall:.0f} | {cpu:.0f} | {cpu / statistics.median(cpus[base]):.2f} |")
    print(f"(medians of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
