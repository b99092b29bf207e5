"""Start and stop real worker processes (``python -m tickwork.cli worker APP``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class WorkerProcess:
    def __init__(
        self,
        db_url: str,
        records: Path,
        *,
        concurrency: int = 4,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
        app: str = "tests.apps.basic:app",
    ):
        self.options = ("-c", str(concurrency), *args)
        self.log = records.parent / f"worker-{id(self)}.log"
        self._log_file = self.log.open("wb")
        full_env = {
            **os.environ,
            "TICKWORK_DB": db_url,
            "TICKWORK_TEST_RECORDS": str(records),
            **(env or {}),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tickwork.cli", "-v", "worker", app, *self.options],
            cwd=ROOT,
            env=full_env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM, then the exit code; a worker still running after ``timeout`` fails the
        test with its log and where each of its threads was (the test app's SIGUSR1 dump)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGUSR1)
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self._log_file.flush()
            tail = self.output()[-20000:]
            raise AssertionError(f"worker did not stop within {timeout} s of SIGTERM:\n{tail}") from None
        finally:
            self._log_file.close()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self._log_file.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def read_records(records: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _lines(records)]


def _lines(records: Path) -> Iterator[str]:
    for file in sorted(records.glob("*.log")):
        yield from (line for line in file.read_text().splitlines() if line)


class Fleet:
    """The worker processes of one test; whatever is still running at the end is killed."""

    def __init__(self, db_url: str, records: Path) -> None:
        self.db_url = db_url
        self.records = records
        self.procs: list[WorkerProcess] = []

    def start(
        self,
        *,
        concurrency: int = 4,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
        app: str = "tests.apps.basic:app",
    ) -> WorkerProcess:
        worker = WorkerProcess(self.db_url, self.records, concurrency=concurrency, env=env, args=args, app=app)
        self.procs.append(worker)
        return worker

    def kill_all(self) -> None:
        for worker in self.procs:
            if worker.proc.poll() is None:
                worker.kill()


def client_for(db_url: str) -> Any:
    """An App on ``db_url`` that knows the test app's task names (to schedule them)."""
    from tests.apps.basic import app as test_app
    from tickwork import App

    app = App(db_url)
    for definition in test_app.registry:
        app.registry.add(definition.name, definition.func, definition.options)
    return app
