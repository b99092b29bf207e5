"""W2 with the workers' CPU: what sparse work costs the nodes.

    .venv/bin/python -m bench.sparse [--store skip_locked] [--rounds 2]

2,000 one-time tasks due evenly over 20 s, 2 nodes (bench/tickwork_bench.py's W2): the
lateness percentiles, and the CPU time (user + system, from /proc) the two node
processes used from 3 s after their launch until the last task started.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.tickwork_bench import Run, drop, fresh_store, lateness_ms, pct, schedule


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sparse(kind: str, folder: Path, n: int = 2000, span: float = 20.0) -> str:
    store = fresh_store(kind, folder)
    try:
        first = datetime.now(UTC) + timedelta(seconds=5)
        times = [first + timedelta(seconds=span * i / n) for i in range(n)]
        schedule(store, times)
        run = Run(store, folder)
        run.start(2)
        time.sleep(3)  # start-up is not sparse work
        before = [cpu_seconds(p.pid) for p in run.procs]
        starts = run.wait_for(n, timeout=span + 60)
        used = [cpu_seconds(p.pid) - b for p, b in zip(run.procs, before, strict=True)]
        run.stop()
        late = lateness_ms(starts, {i: t.timestamp() for i, t in enumerate(times)})
        return (
            f"| {kind} | {pct(late, 50):.1f} / {pct(late, 99):.1f} / {late[-1]:.1f} | "
            f"{' + '.join(f'{u:.2f}' for u in used)} = {sum(used):.2f} |"
        )
    finally:
        drop(store)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="skip_locked")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print("| store | lateness p50 / p99 / max ms | worker CPU s |")
    print("|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            print(sparse(args.store, Path(tmp)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
