"""How long a node takes from its process's launch to its first run: the part of W1's
"exec/s from launch" that no claim or write can win back.

    .venv/bin/python -m bench.startup [--rounds 5]

Each round stores one due task, launches one worker process (bench.peers.worker, as
bench.peers does), and measures from the launch to the start the task writes to its
sink. Prints each round and the median, in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.tickwork_bench import ROOT, Run, compile_checkout, drop, fresh_store, make_app


def first_run_ms(run: Run, bid: int) -> float:
    launched = time.time_ns()
    argv = [sys.executable, "-m", "bench.peers.worker", "tickwork", run.store.url, str(run.sink)]
    process = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            started = [at for b, at in run.starts() if b == bid]
            if started:
                return (started[0] * 1e9 - launched) / 1e6
            time.sleep(0.002)
        raise SystemExit("the node did not run its task within 30 s")
    finally:
        process.terminate()
        process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    compile_checkout()
    with tempfile.TemporaryDirectory() as tmp:
        store = fresh_store("skip_locked", Path(tmp))
        try:
            run, app = Run(store, Path(tmp)), make_app(store.url, store.claim, None)
            figures = []
            for i in range(args.rounds):
                app.schedule("bench.noop", kwargs={"bid": i}, at=datetime.now(UTC) - timedelta(seconds=1))
                figures.append(first_run_ms(run, i))
                print(f"# round {i + 1}: {figures[-1]:.0f} ms", file=sys.stderr)
            app.close()
            print(f"launch to first run: median {statistics.median(figures):.0f} ms over {args.rounds} rounds")
        finally:
            drop(store)


if __name__ == "__main__":
    main()
