"""Shared pieces of the HTTP tests: an application with tasks that succeed, fail with
markup in their error, and carry markup in their name; a server on a loopback port
(``tickwork serve`` in a subprocess); and the clients' fixtures.

``app`` is importable as ``tests.http_support:app`` for the served subprocess; it opens
``TICKWORK_DB`` when first used.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.workers import ROOT
from tickwork import App, Context
from tickwork.web import create_app

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
V1 = "/api/v1"
EVIL = "<script>alert('name')</script>"
EVIL_NAME = f"web.evil{EVIL}"
EVIL_ERROR = "<script>alert('error')</script><img src=x onerror=alert(1)>"
APP_SPEC = "tests.http_support:app"


def make_app(url: str | None = None) -> App:
    """An App with the web tests' tasks; quick to notice work and cancellations."""
    app = App(url, lease=5.0, heartbeat=0.5, poll_interval=0.2, shutdown_grace=5.0, max_payload=2048)

    @app.task(name="web.ok")
    def ok(ctx: Context, *args: object, value: object = None) -> object:
        return value

    @app.task(name="web.fail")
    def fail(ctx: Context) -> None:
        raise ValueError(EVIL_ERROR)

    @app.task(name=EVIL_NAME)
    def evil(ctx: Context, x: object = None) -> object:
        return x

    # Everyday tasks, for the README's screenshot.
    @app.task(name="emails.send_welcome")
    def send_welcome(ctx: Context, to: str) -> str:
        return f"sent to {to}"

    @app.task(name="reports.daily")
    def daily(ctx: Context, **options: object) -> dict[str, object]:
        return {"rows": 1284, **options}

    @app.task(name="cache.warm")
    def warm(ctx: Context) -> dict[str, int]:
        return {"keys": 1200}

    @app.task(name="sync.inventory", max_retries=1, retry_backoff=0.5)
    def sync_inventory(ctx: Context) -> None:
        raise ConnectionError("inventory service did not answer within 30 s")

    @app.task(name="web.wait")
    def wait(ctx: Context) -> None:
        while not ctx.cancelled:
            time.sleep(0.01)  # the task's own work: it runs until cancelled

    return app


app = make_app()


def client_of(application: App, **options: Any) -> TestClient:
    """A test client of ``create_app(application, **options)`` (not yet entered)."""
    with warnings.catch_warnings():
        # Starlette now prefers the httpx2 package for its test client; httpx still works.
        warnings.simplefilter("ignore", UserWarning)
        from fastapi.testclient import TestClient

    return TestClient(create_app(application, **options))


def run_worker_until(application: App, condition: Callable[[], object], timeout: float = 20.0) -> None:
    """Run a node on a thread until ``condition()`` holds (checked with a deadline)."""
    worker = application.worker(concurrency=2)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        wait_until(condition, timeout)
    finally:
        worker.stop()
        thread.join(30)


def wait_until(condition: Callable[[], object], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {condition}")
        time.sleep(0.02)


class Served:
    """``tickwork serve`` in a subprocess on a free loopback port (``--port 0``: the
    port is read from the server's log line, so no other process can take it first)."""

    def __init__(self, db_url: str, log: Path, *args: str, token: str | None = TOKEN) -> None:
        env = {**os.environ, "TICKWORK_DB": db_url}
        env.pop("TICKWORK_API_TOKEN", None)
        if token is not None:
            env["TICKWORK_API_TOKEN"] = token
        self.log = log
        self._out = log.open("wb")
        command = [sys.executable, "-c", "from tickwork.cli import main; main()", "serve", APP_SPEC, "--port", "0"]
        self.proc = subprocess.Popen([*command, *args], cwd=ROOT, env=env, stdout=self._out, stderr=subprocess.STDOUT)
        self.url = self._wait_for_url()

    def _wait_for_url(self, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"Uvicorn running on (http://\S+)", self.output())
            if found:
                return found.group(1)
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited {self.proc.returncode}:\n{self.output()}")
            time.sleep(0.05)
        raise AssertionError(f"server did not start within {timeout} s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)
        finally:
            self._out.close()


def schedule(api: Any, expect: int = 201, **body: Any) -> dict[str, Any]:
    """POST a task of ``web.ok`` (``body``: schedule()'s fields) and expect ``expect``."""
    response = api.post(f"{V1}/tasks", json={"name": "web.ok", **body}, headers=AUTH)
    assert response.status_code == expect, response.text
    result: dict[str, Any] = response.json()
    return result


def problem(response: Any, status: int, field: str | None = None) -> dict[str, Any]:
    """Assert an error answer of the documented shape."""
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"error", "message", "field", "reason"}
    if field is not None:
        assert body["field"] == field, body
        assert body["reason"], body
    return body
