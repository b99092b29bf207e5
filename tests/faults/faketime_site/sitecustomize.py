"""Imported at start-up by every Python process of a node run under libfaketime (this
folder leads its PYTHONPATH): Debian's libfaketime 0.9.10 makes ``time.sleep`` fail with
EINVAL (its ``clock_nanosleep`` mangles the absolute monotonic deadline Python passes),
so sleeps wait in ``select`` instead, whose relative timeout it leaves alone. Nothing of
tickwork is changed; only the interpreter's sleep is."""

import os
import select
import time

if os.environ.get("FAKETIME"):

    def _sleep(seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            select.select([], [], [], left)

    time.sleep = _sleep
