"""Where the database's CPU goes per run: tickwork's claim and its result write, each
alone, beside the two bare loops that bound them (PostgreSQL on this machine).

    .venv/bin/python -m bench.db_cost [--tasks 20000] [--rounds 3]

Each round, on fresh databases, one process in turn:
* ``bare``: the loop of ``bench.peers``'s bare ceiling (tables made only for it);
* ``ceiling``: the bare loop on tickwork's own tables (``bench.tickwork_bench``);
* ``claim``: ``Store.claim`` of 500 at a time until nothing is due, as a node claims;
* ``write``: ``Store.finish`` of those claims' outcomes (each run COMPLETED), 500 at a time,
  as the recorder writes them.
For each, the CPU all of the local PostgreSQL's processes spent per task (and this
process's own, the client's), from ``/proc``: what the statements cost the server, with
no node's threads, waits or harness beside them. ``claim`` + ``write`` is what a node's
statements cost where ``ceiling`` is the floor of the same tables.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.ceiling import postgres_ceiling
from bench.peers import bare
from bench.pg_cpu import database_cpu
from bench.tickwork_bench import drop, fresh_store, schedule
from tickwork import App
from tickwork.model import Claim, ExecutionStatus, Outcome
from tickwork.schedules import outcome_of
from tickwork.store.base import Store

BATCH = 500
NODE = "bench-db-cost"


def timed(n: int, work: Callable[[], Any]) -> tuple[Any, float, float]:
    """``work()``'s result, and the database's and this process's CPU µs per task."""
    database = database_cpu()
    client = time.process_time()
    result = work()
    client_after = time.process_time()
    database_after = database_cpu()  # after the client's reading: reading /proc costs CPU too
    if database is None or database_after is None:
        raise SystemExit("no PostgreSQL runs on this machine: its CPU cannot be read here")
    return result, 1e6 * (database_after - database) / n, 1e6 * (client_after - client) / n


def bare_loop(folder: Path, n: int) -> tuple[float, float]:
    store = fresh_store("skip_locked", folder)  # for its fresh database only
    try:
        bare.store(store.url, [datetime.now(UTC) - timedelta(seconds=1)] * n)
        sink = folder / "sink"
        sink.mkdir(exist_ok=True)
        _, database_us, client_us = timed(n, lambda: bare.work(store.url, sink))
        return database_us, client_us
    finally:
        drop(store)


def ceiling_loop(folder: Path, n: int) -> tuple[float, float]:
    store = fresh_store("skip_locked", folder)
    try:
        schedule(store, [datetime.now(UTC) - timedelta(seconds=1)] * n)
        fd = os.open(os.devnull, os.O_WRONLY)
        try:
            _, database_us, client_us = timed(n, lambda: postgres_ceiling(store.url, fd))
        finally:
            os.close(fd)
        return database_us, client_us
    finally:
        drop(store)


def claim_all(tasks: Store) -> list[list[Claim]]:
    """Every due task claimed, ``BATCH`` at a time, as a node claims them."""
    batches = []
    while claims := tasks.claim(NODE, ["bench.noop"], BATCH, 30.0):
        batches.append(claims)
    return batches


def completed(tasks: Store, batches: list[list[Claim]]) -> list[list[Outcome]]:
    """Each claimed run's outcome as if it COMPLETED now, batch by batch."""
    now = tasks.approximate_now()
    return [[outcome_of(c, ExecutionStatus.COMPLETED, now, started_at=now) for c in b] for b in batches]


def claim_and_write(folder: Path, n: int) -> dict[str, tuple[float, float]]:
    store = fresh_store("skip_locked", folder)
    try:
        schedule(store, [datetime.now(UTC) - timedelta(seconds=1)] * n)
        app = App(store.url, claim="skip_locked")
        try:
            tasks = app.store
            tasks.claim(NODE, ["nothing.due"], 1, 30.0)  # the pool and the clock, outside the figures

            batches, claim_db, claim_client = timed(n, lambda: claim_all(tasks))
            outcomes = completed(tasks, batches)
            written, write_db, write_client = timed(n, lambda: sum(sum(tasks.finish(NODE, o)) for o in outcomes))
            if written != n:
                raise SystemExit(f"{written} of {n} results written")
            return {"claim": (claim_db, claim_client), "write": (write_db, write_client)}
        finally:
            app.close()
    finally:
        drop(store)


def arguments(doc: str | None) -> argparse.Namespace:
    """--tasks and --rounds, as these database benches take them."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    return parser.parse_args()


def print_medians(heading: str, figures: dict[str, list[tuple[float, float]]]) -> None:
    """The median database and client CPU per task of each measured thing, as a table."""
    print(f"| {heading} | database CPU µs/task | client CPU µs/task |")
    print("|---|---|---|")
    for name, pairs in figures.items():
        db, client = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
        print(f"| {name} | {db:.1f} | {client:.1f} |")


def main() -> None:
    args = arguments(__doc__)
    figures: dict[str, list[tuple[float, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for i in range(args.rounds):
            this = {"bare": bare_loop(folder, args.tasks), "ceiling": ceiling_loop(folder, args.tasks)}
            this.update(claim_and_write(folder, args.tasks))
            shown = ", ".join(f"{name} {db:.1f} ({client:.1f})" for name, (db, client) in this.items())
            print(f"# round {i + 1}, database (client) CPU us per task: {shown}", flush=True)
            for name, pair in this.items():
                figures[name].append(pair)
    print_medians("phase", figures)


if __name__ == "__main__":
    main()
