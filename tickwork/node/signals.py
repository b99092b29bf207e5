"""SIGINT/SIGTERM for a node that runs on the main thread: the first asks it to stop, a
second exits at once.

A signal handler runs on the main thread between two of its bytecodes, so it can
interrupt that thread while the thread holds a lock: the poll loop sleeps in
``Event.wait``, and an ``Event.set`` from the handler then waits forever on a lock its
own thread holds (a node once ignored SIGTERM this way). So the handler takes no lock
and starts no thread: it writes a byte to a pipe, and a thread that was started before
any signal could come reads it and asks the node to stop (the self-pipe trick).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM)
STOP = b"s"
QUIT = b"q"


class GracefulSignals:
    """Installed (on the main thread) for one ``Worker.run``; ``close`` puts back the
    handlers it replaced."""

    def __init__(self, on_first: Callable[[], None]) -> None:
        self._on_first = on_first
        self._read_fd, self._write_fd = os.pipe()
        self._reader = threading.Thread(target=self._read, name="tickwork-signals", daemon=True)
        self._reader.start()
        self._previous: dict[int, Any] = {signum: signal.signal(signum, self._graceful) for signum in HANDLED}

    def close(self) -> None:
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) in (self._graceful, self._exit_now):
                signal.signal(signum, previous)
        self._write(QUIT)
        self._reader.join()
        os.close(self._write_fd)

    def _graceful(self, signum: int, frame: FrameType | None) -> None:
        for handled in HANDLED:
            signal.signal(handled, self._exit_now)
        self._write(STOP)

    @staticmethod
    def _exit_now(signum: int, frame: FrameType | None) -> None:
        os._exit(128 + signum)

    def _write(self, byte: bytes) -> None:
        with contextlib.suppress(OSError):  # the reader has gone: nothing is left to stop
            os.write(self._write_fd, byte)

    def _read(self) -> None:
        try:
            while (byte := os.read(self._read_fd, 1)) and byte != QUIT:
                if byte == STOP:
                    self._on_first()
        finally:
            os.close(self._read_fd)
