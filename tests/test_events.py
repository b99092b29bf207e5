"""Notifications: in-process hooks and the signed webhook."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.test_worker import Node
from tests.workers import Fleet, read_records
from tickwork import App, Context, InvalidInput, Status
from tickwork.events import SIGNATURE_HEADER, signature


class Receiver:
    """A webhook endpoint on loopback that keeps what it is sent."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, Any], str | None]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.received.append((json.loads(body), self.headers.get(SIGNATURE_HEADER)))
                outer.bodies.append(body)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.bodies: list[bytes] = []
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self, name: str) -> list[dict[str, Any]]:
        return [payload for payload, _ in self.received if payload["event"] == name]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()


def test_hooks_hear_failures_and_completions_and_a_failing_hook_breaks_nothing(sqlite_url: str) -> None:
    app = App(sqlite_url, heartbeat=0.2, lease=2.0, poll_interval=0.1)
    heard: list[tuple[str, int]] = []

    @app.task(name="t.fails")
    def fails(ctx: Context) -> None:
        raise ValueError("nope")

    @app.task(name="t.works")
    def works(ctx: Context) -> None: ...

    @app.on("execution_failed")
    def broken_hook(payload: dict[str, Any]) -> None:
        raise RuntimeError("a hook that fails")

    @app.on("execution_failed")
    def on_failed(payload: dict[str, Any]) -> None:
        heard.append(("execution_failed", payload["task_id"]))

    @app.on("task_completed")
    def on_completed(payload: dict[str, Any]) -> None:
        heard.append(("task_completed", payload["task_id"]))

    failing = app.schedule("t.fails")
    working = app.schedule("t.works")
    node = Node(app)
    wait_for(lambda: len(heard) == 2)
    node.stop()
    assert sorted(heard) == sorted([("execution_failed", failing.id), ("task_completed", working.id)])
    assert app.get(working.id).status is Status.COMPLETED
    with pytest.raises(InvalidInput, match="event='execution_exploded'"):
        app.on("execution_exploded")
    app.close()


def test_a_killed_nodes_lost_run_reaches_the_webhook_signed(
    sqlite_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    records = tmp_path / "records"
    records.mkdir()
    fleet = Fleet(sqlite_url, records)
    fast = {"TICKWORK_TEST_LEASE": "1", "TICKWORK_TEST_HEARTBEAT": "0.2"}
    client = App(sqlite_url)
    from tests.apps.basic import app as test_app

    for definition in test_app.registry:
        client.registry.add(definition.name, definition.func, definition.options)
    try:
        task = client.schedule("test.slow", kwargs={"seconds": 30})
        doomed = fleet.start(env={**fast, "TICKWORK_TEST_GRACE": "0"})
        wait_for(lambda: any(r.get("phase") == "start" for r in read_records(records)))
        doomed.kill()  # kill -9: the run's lease is left to expire
        fleet.start(env={**fast, "TICKWORK_TEST_WEBHOOK": receiver.url, "TICKWORK_TEST_WEBHOOK_SECRET": "s3cret"})
        wait_for(lambda: receiver.events("execution_lost"), timeout=30)
        [lost] = receiver.events("execution_lost")
        assert lost["task_id"] == task.id and lost["status"] == "FAILED" and "lost by" in lost["note"]
        assert (lost["attempt"], lost["task_name"]) == (1, "test.slow")
        index = next(i for i, (payload, _) in enumerate(receiver.received) if payload["event"] == "execution_lost")
        assert receiver.received[index][1] == signature("s3cret", receiver.bodies[index])
    finally:
        fleet.kill_all()
        client.close()


def test_a_webhook_url_must_be_http(sqlite_url: str) -> None:
    with pytest.raises(InvalidInput, match="webhook_url='ftp://x'"):
        App(sqlite_url, webhook_url="ftp://x")
