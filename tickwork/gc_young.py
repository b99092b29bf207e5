"""A larger young generation for Python's cyclic garbage collector while a node owns its
process.

A node keeps each claimed run's objects (its task, claim, run, context, outcome) alive
from the claim until its result is written: tens of milliseconds, and on short tasks
thousands of runs at once. At CPython's default young threshold (700 container objects
allocated) the collector ran every ~50 runs, walked every run then in flight, moved them
to the older generations and, every few hundred runs, walked the whole heap: 5.5 µs of a
W1 node's ~30 µs of CPU a run, for nothing, since reference counting frees all of them
(none is in a cycle). With 10,000 it is ~1.6 µs (bench/node_cpu.py, README "Performance").

Only ``App.run_worker`` and ``tickwork worker`` use it: they own their process (they take
its signals too). ``App.worker()``, a node embedded in someone else's process, leaves
the collector alone. The threshold is only ever raised: a program that set a higher one,
or turned automatic collection off (0), keeps its own. It is put back when the last
holder of the process leaves, unless the program changed it meanwhile.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

from tickwork.errors import InvalidInput

NODE_THRESHOLD = 10_000
"""The young threshold a node's process runs with unless told otherwise."""
MAX_THRESHOLD = 2**31 - 1
"""The largest ``gc.set_threshold`` takes (a C int)."""

_lock = threading.Lock()
_holders = 0
_before: tuple[int, int, int] | None = None
"""The thresholds to put back when the last holder leaves; None when none was changed."""
_set: int | None = None
"""The young threshold last set here: one found different at the end was the program's."""


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
    """The young threshold at least ``at_least`` inside (None: left as it is)."""
    global _holders, _before, _set
    if at_least is None:
        yield
        return
    with _lock:
        current = gc.get_threshold()
        if 0 < current[0] < at_least:
            if _before is None:
                _before = current
            gc.set_threshold(at_least, current[1], current[2])
            _set = at_least
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                if _before is not None and gc.get_threshold()[0] == _set:
                    gc.set_threshold(*_before)
                _before = _set = None
