"""A larger young generation for Python's cyclic garbage collector while a node owns its
process.

A node keeps each claimed run's objects (its task, claim, run, context, outcome) alive
from the claim until its result is written: tens of milliseconds, and on short tasks
over a thousand runs at once. At CPython's default young threshold (700 net new
container objects, up to 3.13) the collector ran every ~80 runs, walked every run then
in flight, moved them to the older generations and, every ~10,000 runs, walked the
whole heap: 3.4 µs of a W1 node's ~29 µs of CPU a run, for nothing, since reference
counting frees all of them (none is in a cycle). With 10,000 it is ~0.1 µs
(bench/node_cpu.py, README "Performance").

Only ``App.run_worker`` (so ``tickwork worker``) uses it: it takes its process (its
signals too). ``App.worker()``, a node embedded in someone else's process, leaves the
collector alone. The threshold is only ever raised: a program that set a higher one, or
turned automatic collection off (0), keeps its own. The thresholds found are put back
when the last holder of the process leaves, unless the program set others meanwhile
(those stay); a child forked meanwhile starts with them put back.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator

from tickwork.errors import InvalidInput

NODE_THRESHOLD = 10_000
"""The young threshold a node's process runs with unless told otherwise."""
MAX_THRESHOLD = 2**31 - 1
"""The largest ``gc.set_threshold`` takes (a C int)."""

Thresholds = tuple[int, int, int]

_lock = threading.Lock()
_holders = 0
_before: Thresholds | None = None
"""The program's thresholds, to put back when the last holder leaves (None: none changed)."""
_set: Thresholds | None = None
"""The thresholds as set here last: others found in their place are the program's."""


def _after_fork_in_child() -> None:
    """A child forked while a node ran is not that node: it gets the program's
    thresholds back, and no holder."""
    global _lock, _holders, _before, _set
    _lock = threading.Lock()  # another thread may have held it at the fork
    if _before is not None and gc.get_threshold() == _set:
        gc.set_threshold(*_before)
    _holders, _before, _set = 0, None, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def checked(value: int | None) -> int | None:
    """``gc_threshold`` as given to ``run_worker``: an integer from 1 to ``MAX_THRESHOLD``,
    or None."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_THRESHOLD):
        raise InvalidInput(
            "gc_threshold", value, f"must be an integer from 1 to {MAX_THRESHOLD}, or None (the collector as it is)"
        )
    return value


@contextlib.contextmanager
def raised(at_least: int | None) -> Iterator[None]:
    """The young threshold at least ``at_least`` inside (None: left as it is). Nodes may
    overlap: each raises to its own value if higher, and the last to leave puts back
    what the program had, so a node's end never lowers it under one still running."""
    global _holders, _before, _set
    threshold = checked(at_least)
    if threshold is None:
        yield
        return
    with _lock:
        current = gc.get_threshold()
        if current != _set:  # not ours: none set yet, or the program set its own since
            _before = _set = None
        if 0 < current[0] < threshold:
            gc.set_threshold(threshold, current[1], current[2])
            _before = _before or current
            _set = gc.get_threshold()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                if _before is not None and gc.get_threshold() == _set:
                    gc.set_threshold(*_before)
                _before = _set = None
