"""The embedded SQLite store under two nodes: another process holding the write lock for
20 s, and the file's disk filling up (a small tmpfs) and being freed again."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.harness import Case
from tests.faults.servers import SqliteWriteLock
from tickwork import TickworkError

pytestmark = pytest.mark.faults


def sqlite_workload(case: Case, *, fault_for: float) -> list[int]:
    case.stream(100, start_in=0.5, over=3.0 + fault_for + 4.0, seconds=0.05)
    case.recurring_tasks(2, every=1.0)
    return case.stream(4, start_in=0.0, over=0.3, seconds=3.0)


@pytest.mark.timeout(150)
def test_a_sqlite_write_lock_held_20s_by_another_process(
    tmp_path: Path, make_case: Callable[..., Case], sqlite_write_lock: Callable[[str], SqliteWriteLock]
) -> None:
    path = tmp_path / "tickwork.db"
    case = make_case("sqlite-write-lock-20s", f"sqlite:///{path}")
    nodes = case.start_nodes(2)
    long_runs = sqlite_workload(case, fault_for=20.0)
    case.wait_started(long_runs)
    holder = sqlite_write_lock(str(path))
    case.fault_begins()
    time.sleep(20.0)  # the fault's duration
    holder.release()
    case.fault_ends()
    case.verify(alive=nodes, expect_resume=True)
    case.log_lines(nodes)
    case.stop_nodes(nodes)
    case.finish()


def fill(folder: Path) -> int:
    """Write a filler file until the file system refuses; returns the bytes it took."""
    total = 0
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for chunk in (1 << 20, 1 << 16, 1 << 12, 1 << 9):
            while True:
                try:
                    total += os.write(fd, b"\0" * chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return total


@pytest.mark.timeout(150)
def test_a_full_disk_and_its_recovery(small_tmpfs: Path, make_case: Callable[..., Case]) -> None:
    path = small_tmpfs / "tickwork.db"
    case = make_case("sqlite-disk-full", f"sqlite:///{path}")
    nodes = case.start_nodes(2)
    long_runs = sqlite_workload(case, fault_for=10.0)
    case.wait_started(long_runs)
    case.fault_begins()
    filled = fill(small_tmpfs)
    # The write-ahead log reuses its own pages: empty it so the next commit needs new space.
    with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(path, timeout=5)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    filled += fill(small_tmpfs)
    case.figure("filler_mib", filled / (1 << 20))
    try:
        case.client.schedule("faults.work")
        refused = False
    except (TickworkError, sqlite3.Error):
        refused = True
    assert refused, "the disk is full yet SQLite still commits: the fault did not take"
    time.sleep(10.0)  # the fault's duration: the disk stays full this long
    (small_tmpfs / "filler").unlink()
    case.fault_ends()
    case.verify(alive=nodes, expect_resume=True)
    case.log_lines(nodes)
    case.stop_nodes(nodes)
    case.finish()
