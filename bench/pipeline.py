"""A node's work per run with its threads taken out: what handing runs between threads
costs, and what the work itself does.

    .venv/bin/python -m bench.pipeline [--store skip_locked|sqlite] [--tasks 20000] [--rounds 3]

One node is built (``App.worker``, not started) over a fresh store of due no-op tasks,
and this thread does what its poll loop, slot threads and recorder do, in turn, batch by
batch: the claim (``store.claim``, 500 at a time, decoded), the runs made and entered in
the node's table, ``Runner.execute`` of each (the misfire decision, the Context, the
task, the outcome), the write of the outcomes (``store.finish``: encoded, sent, read
back) and ``Runner.written`` (the runs forgotten, metrics, logs). Each step's CPU time
(this thread's) per run, median of the rounds, with the collector's threshold as
``run_worker`` sets it. Set beside ``bench.node_cpu``'s CPU per task in the same
sitting, the difference is what the threads cost (hand-offs, waking, the GIL passing
between them); the rest would remain in any node that runs these steps.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.tickwork_bench import drop, fresh_store, schedule
from tickwork import App, Context, gc_young
from tickwork.model import Outcome
from tickwork.node.run import Run

STEPS = ("claim", "runs made", "execute", "write", "written")
BATCH = 500


def one_round(kind: str, folder: Path, n: int) -> dict[str, float]:
    """Microseconds of this thread's CPU per run, by step, over n due tasks."""
    store = fresh_store(kind, folder)
    app = None
    try:
        schedule(store, [datetime.now(UTC) - timedelta(seconds=1)] * n)
        app = App(store.url, claim=store.claim, poll_interval=1.0)

        @app.task(name="bench.noop")
        def noop(ctx: Context, bid: int) -> None:
            pass

        node = app.worker(concurrency=16)
        definition = node.registry.get("bench.noop")
        assert definition is not None
        handed: list[tuple[Run, Outcome]] = []
        node.recorder.submit = lambda item, outcome: handed.append((item, outcome))  # type: ignore[method-assign]
        spent: dict[str, float] = defaultdict(float)
        ran = 0
        with gc_young.raised(gc_young.NODE_THRESHOLD):
            while ran < n:
                began = time.thread_time()
                claims = app.store.claim(node.node_id, node.names, BATCH, node.settings.lease)
                spent["claim"], began = spent["claim"] + time.thread_time() - began, time.thread_time()
                if not claims:
                    raise SystemExit(f"{kind}: {n - ran} tasks were not claimed")
                runs = [Run(claim, definition) for claim in claims]
                node.runs.add_all(runs)
                spent["runs made"], began = spent["runs made"] + time.thread_time() - began, time.thread_time()
                for run in runs:
                    node.runner.execute(run)
                spent["execute"], began = spent["execute"] + time.thread_time() - began, time.thread_time()
                applied = app.store.finish(node.node_id, [outcome for _, outcome in handed])
                spent["write"], began = spent["write"] + time.thread_time() - began, time.thread_time()
                node.runner.written([(run, outcome, ok) for (run, outcome), ok in zip(handed, applied, strict=True)])
                spent["written"] += time.thread_time() - began
                handed.clear()
                ran += len(claims)
        return {step: 1e6 * spent[step] / ran for step in STEPS}
    finally:
        if app is not None:
            app.close()
        drop(store)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="skip_locked", choices=["skip_locked", "sqlite"])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    figures: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            steps = one_round(args.store, Path(tmp), args.tasks)
            for step, us in steps.items():
                figures[step].append(us)
            shown = ", ".join(f"{step} {us:.1f}" for step, us in steps.items())
            print(f"# round {i + 1}: {sum(steps.values()):.1f} us CPU per run ({shown})", flush=True)
    print("| step (one thread, no hand-offs) | CPU µs per run (median) |")
    print("|---|---|")
    for step in STEPS:
        print(f"| {step} | {statistics.median(figures[step]):.1f} |")
    print(f"| all | {sum(statistics.median(v) for v in figures.values()):.1f} |")


if __name__ == "__main__":
    main()
