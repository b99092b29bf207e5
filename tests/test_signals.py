"""A node's SIGINT/SIGTERM: the first asks it to stop, even when the signal interrupts
the main thread while it holds the lock that stopping needs; a second exits at once."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from tickwork.node.signals import GracefulSignals

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals reach the main thread only"
)


def test_a_signal_that_interrupts_the_holder_of_the_stop_lock_still_stops_the_node() -> None:
    # The poll loop sleeps in Event.wait; a handler that set the Event itself would wait
    # forever on the Event's lock, held by the very thread it interrupted.
    lock = threading.Lock()
    stopped = threading.Event()

    def stop() -> None:
        with lock:
            stopped.set()

    before = signal.getsignal(signal.SIGTERM)
    signals = GracefulSignals(stop)
    try:
        with lock:
            signal.raise_signal(signal.SIGTERM)  # the handler runs here, on this thread
            assert not stopped.is_set()
        assert stopped.wait(10)
    finally:
        signals.close()
    assert signal.getsignal(signal.SIGTERM) is before  # put back once the node has stopped


def test_a_second_signal_exits_at_once_with_the_signals_code() -> None:
    script = textwrap.dedent(
        """
        import signal, threading
        from tickwork.node.signals import GracefulSignals
        asked = threading.Event()
        GracefulSignals(lambda: (print("asked to stop", flush=True), asked.set()))
        signal.raise_signal(signal.SIGINT)
        assert asked.wait(10)
        signal.raise_signal(signal.SIGTERM)
        print("still running", flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert done.stdout == "asked to stop\n"


def test_closing_without_a_signal_leaves_nothing_running() -> None:
    signals = GracefulSignals(lambda: pytest.fail("no signal came"))
    signals.close()
    assert not [t for t in threading.enumerate() if t.name == "tickwork-signals"]
