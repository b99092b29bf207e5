"""Worker nodes as real processes (``python -m tickwork.cli -v worker tests.faults.app:app``),
each in a process group of its own, with its output captured to a file; optionally
under libfaketime with a skewed wall clock."""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.faults.servers import NODE_APPNAME, unavailable

ROOT = Path(__file__).resolve().parents[2]
FAKETIME_SITE = Path(__file__).resolve().parent / "faketime_site"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def faketime_env(offset: str) -> dict[str, str]:
    """Environment that runs a node with its wall clock moved by ``offset`` (``+10m``).
    Only the wall clock: Debian's 0.9.10 hangs Python's thread waits when it fakes the
    monotonic clock, and its sleep needs the shim in faketime_site/."""
    libraries = glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1") + glob.glob("/usr/lib/faketime/libfaketimeMT.so.1")
    if not libraries:
        unavailable("libfaketime is not installed (Debian package faketime; ./dev test installs it)")
    return {
        "LD_PRELOAD": libraries[0],
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "PYTHONPATH": os.pathsep.join([str(FAKETIME_SITE), str(ROOT)]),
    }


class Node:
    """One worker process; ``label`` names it in the records (``FAULTS_NODE``)."""

    def __init__(
        self,
        label: str,
        db_url: str,
        records: Path,
        *,
        concurrency: int = 4,
        env: dict[str, str] | None = None,
    ) -> None:
        self.label = label
        self.log = records.parent / f"node-{label}.log"
        self._log_file = self.log.open("ab")
        full_env = {
            **os.environ,
            "TICKWORK_DB": db_url,
            "FAULTS_RECORDS": str(records),
            "FAULTS_NODE": label,
            "PGAPPNAME": NODE_APPNAME,
            "PYTHONUNBUFFERED": "1",
            "PYTHONFAULTHANDLER": "1",  # a node that crashes says where
            **(env or {}),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tickwork.cli", "-v", "worker", "tests.faults.app:app", "-c", str(concurrency)],
            cwd=ROOT,
            env=full_env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.started_at = time.monotonic()
        self.stopped = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, chars: int = 4000) -> str:
        return f"--- node {self.label} (pid {self.pid}), last {chars} chars ---\n{self.output()[-chars:]}"

    def freeze(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: no clean-up of any kind."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float) -> int | None:
        """A graceful stop (SIGTERM); the exit code, or None if it did not exit in time."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def cpu_seconds(self) -> float:
        """User + system CPU time the node process has used so far (all its threads)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
        return (utime + stime) / CLOCK_TICKS

    def cleanup(self) -> None:
        """Whatever state it is in (frozen, stopping, gone): its whole group is killed."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGCONT)
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.wait(10)
        self._log_file.close()


class Fleet:
    """The nodes of one test; every one of them is killed at the end, whatever happened."""

    def __init__(self, records: Path) -> None:
        self.records = records
        self.nodes: list[Node] = []

    def start(
        self,
        db_url: str,
        *,
        label: str | None = None,
        concurrency: int = 4,
        env: dict[str, str] | None = None,
    ) -> Node:
        node = Node(label or f"n{len(self.nodes) + 1}", db_url, self.records, concurrency=concurrency, env=env)
        self.nodes.append(node)
        return node

    def alive(self) -> list[Node]:
        return [n for n in self.nodes if n.alive()]

    def tails(self, chars: int = 3000) -> str:
        return "\n".join(n.tail(chars) for n in self.nodes)

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()
