"""The HTTP server while its database is away: start-up never waits for it, every
request is answered 503 with Retry-After within about a second, in parallel (not one
connection timeout after another), /healthz says unavailable, and the server serves
again once the database is back, without a restart.

Databases that are away: a closed port (refused at once), a port that accepts but never
answers (a hung server: every connection attempt would wait out its timeout), and a
private PostgreSQL cluster stopped and started again (never the shared one).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.faults.servers import PrivatePostgres
from tests.http_support import AUTH, TOKEN, client_of, make_app, wait_until
from tickwork import App

V1 = "/api/v1"
SECRET = "S3cret"
CLOSED = f"postgresql://u:{SECRET}@127.0.0.1:1/x"
REQUESTS: list[tuple[str, str, dict[str, str]]] = [
    ("GET", f"{V1}/tasks", AUTH),
    ("GET", f"{V1}/stats", AUTH),
    ("POST", f"{V1}/tasks/1/cancel", AUTH),
    ("GET", f"{V1}/tasks/1", AUTH),
    ("GET", "/healthz", {}),
    ("GET", "/", {"Accept": "text/html"}),
]


@pytest.fixture
def hung_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def in_parallel(api: Any, requests: list[tuple[str, str, dict[str, str]]]) -> tuple[list[Any], float]:
    """Send every request at once; the answers, and how long the slowest took."""

    def send(request: tuple[str, str, dict[str, str]]) -> tuple[Any, float]:
        method, path, headers = request
        started = time.monotonic()
        answer = api.request(method, path, headers=headers, json={} if method == "POST" else None)
        return answer, time.monotonic() - started

    with ThreadPoolExecutor(len(requests)) as pool:
        results = list(pool.map(send, requests))
    return [answer for answer, _ in results], max(took for _, took in results)


def assert_unavailable(answers: list[Any]) -> None:
    for answer in answers:
        assert answer.status_code == 503, (answer.request.url, answer.text)
        assert int(answer.headers["retry-after"]) >= 1
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert SECRET not in answer.text and SECRET not in str(answer.headers)
        if answer.request.url.path == "/healthz":
            assert answer.json()["status"] == "unavailable" and answer.json()["database"] in ("unreachable", "starting")
        elif answer.headers["content-type"].startswith("text/html"):
            assert "Database unavailable" in answer.text
        else:
            assert answer.json()["error"] == "unavailable"


def no_secret_logged(caplog: pytest.LogCaptureFixture) -> None:
    formatter = logging.Formatter()
    for record in caplog.records:
        assert SECRET not in formatter.format(record), record


@pytest.mark.parametrize("kind", ["closed", "hung"])
def test_requests_fail_fast_and_in_parallel_while_the_database_is_away(
    kind: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    url = CLOSED if kind == "closed" else f"postgresql://u:{SECRET}@127.0.0.1:{request.getfixturevalue('hung_port')}/x"
    app = make_app(url)
    started = time.monotonic()
    with client_of(app, token=TOKEN) as api:
        # Start-up does not wait for the database: a hung one would hold it for the
        # connect timeout (10 s); anything well under that is the machine's own speed.
        assert time.monotonic() - started < 5.0
        for _ in range(2):  # the first wave meets a store being opened, the second one that failed
            answers, slowest = in_parallel(api, REQUESTS * 2)
            assert_unavailable(answers)
            assert slowest < (2.0 if kind == "closed" else 4.0), slowest  # about a second, not 10 s each
        assert api.get("/login").status_code == 503
        assert api.get("/metrics", headers=AUTH).status_code == 200  # without the queue gauges
    no_secret_logged(caplog)
    app.close()


@pytest.fixture(scope="module")
def private_pg() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        yield server
    finally:
        server.destroy()


def test_the_server_serves_again_when_the_database_comes_back(
    private_pg: PrivatePostgres, caplog: pytest.LogCaptureFixture
) -> None:
    """Started while the database is down, the server answers 503s; once it is up, 200s;
    stopped again, 503s at once; back, 200s, and the task scheduled before is there."""
    caplog.set_level(logging.INFO)
    url = private_pg.url().replace("postgres@", f"postgres:{SECRET}@")  # trust: any password will do
    app: App = make_app(url)
    with client_of(app, token=TOKEN) as api:
        answers, slowest = in_parallel(api, REQUESTS)
        assert_unavailable(answers)
        assert slowest < 2.0, slowest
        private_pg.start()
        wait_until(lambda: api.get("/healthz").status_code == 200, timeout=20)
        task = api.post(f"{V1}/tasks", json={"name": "web.ok", "delay": 600}, headers=AUTH)
        assert task.status_code == 201, task.text
        for mode in ("fast", "immediate"):
            private_pg.stop(mode)
            # The API's requests find the database gone; the dashboard's, sent after them,
            # is then answered 503 too. (Sent with them, a signed-out browser's request can
            # be first and is sent to the sign-in page, which needs no database: a 200.)
            answers, slowest = in_parallel(api, REQUESTS[:-1])
            method, page, headers = REQUESTS[-1]
            answers.append(api.request(method, page, headers=headers))
            assert_unavailable(answers)
            assert slowest < 3.0, slowest  # one patience, then one quick probe: never a pool's wait
            private_pg.start()
            back = time.monotonic()
            wait_until(lambda: api.get(f"{V1}/tasks", headers=AUTH).status_code == 200, timeout=30)
            print(f"stop -m {mode}: 503s within {slowest:.2f} s; 200 again {time.monotonic() - back:.2f} s after start")
            assert [t["id"] for t in api.get(f"{V1}/tasks", headers=AUTH).json()["items"]] == [task.json()["id"]]
            assert api.get("/healthz").json()["status"] == "ok"
    no_secret_logged(caplog)
    app.close()


def test_a_slow_store_call_is_waited_for_while_the_database_answers(store_url: str) -> None:
    """Past its patience a request only gives up when the database really is away."""
    app = make_app(store_url)
    from tickwork.web import create_app
    from tickwork.web.database import Database

    db = Database(app, patience=0.05)
    server = create_app(app, token=TOKEN, database=db)
    release = threading.Event()

    @server.get("/slow")
    @db.guard
    def slow() -> dict[str, int]:
        release.wait(5)  # a long report, say
        return {"tasks": len(app.tasks())}

    from fastapi.testclient import TestClient

    with TestClient(server) as api:
        timer = threading.Timer(0.5, release.set)
        timer.start()
        answer = api.get("/slow")
        assert answer.status_code == 200 and answer.json() == {"tasks": 0}
        timer.join()
    app.close()
