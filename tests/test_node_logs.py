"""What a node tells on stderr, captured from real worker processes (``tickwork worker``):
each ended run that is not COMPLETED at WARNING with what happens next, completed runs
only from --log-level INFO, --log-format json, the start-up line (its database's
password masked), a new SQLite database, and the refusal of an App without tasks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.http_support import Served
from tests.workers import ROOT, client_for
from tickwork import App, Status

empty_app = App()
"""An App that registers no task (``tests.test_node_logs:empty_app``)."""

PASSWORD = "s3cret-pw-4711"


class Node:
    """``tickwork worker tests.apps.basic:app`` with its stderr kept apart from stdout."""

    def __init__(self, db_url: str, tmp: Path, *args: str, cwd: Path = ROOT, spec: str = "tests.apps.basic:app"):
        records = tmp / "records"
        records.mkdir(exist_ok=True)
        self.err_path = tmp / f"stderr-{id(self)}.log"
        self._err = self.err_path.open("wb")
        env = {**os.environ, "TICKWORK_DB": db_url, "TICKWORK_TEST_RECORDS": str(records), "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "tickwork.cli", "worker", spec, "-c", "2", *args]
        self.proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=self._err)

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def lines(self) -> list[str]:
        return [line for line in self.stderr().splitlines() if line.strip()]

    def wait_for_line(self, pattern: str, timeout: float = 30.0) -> str:
        def found() -> str | None:
            if self.proc.poll() is not None and not re.search(pattern, self.stderr()):
                raise AssertionError(f"worker exited {self.proc.returncode}:\n{self.stderr()}")
            return next((line for line in self.lines() if re.search(pattern, line)), None)

        line = wait_for(found, timeout)
        assert isinstance(line, str)
        return line

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)
        finally:
            self._err.close()


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    started: list[Node] = []
    yield started
    for node in started:
        node.stop()


@pytest.fixture
def client(sqlite_url: str) -> Iterator[App]:
    app: App = client_for(sqlite_url)
    yield app
    app.close()


def test_failures_tell_what_happens_next_and_completed_runs_stay_quiet(
    client: App, sqlite_url: str, tmp_path: Path, nodes: list[Node]
) -> None:
    node = Node(sqlite_url, tmp_path)
    nodes.append(node)
    done = client.schedule("test.record")
    wait_for(lambda: client.get(done.id).status is Status.COMPLETED)
    failing = client.schedule("test.fail", max_retries=2, retry_backoff=0.1)
    final = node.wait_for_line(rf"task {failing.id} \(test\.fail\) .* attempt 3: ")
    first = node.wait_for_line(rf"task {failing.id} \(test\.fail\) .* attempt 1: ")
    second = node.wait_for_line(rf"task {failing.id} \(test\.fail\) .* attempt 2: ")
    execution_ids = {e.attempt: e.id for e in client.executions(failing.id)}
    assert f"WARNING tickwork.worker: task {failing.id} (test.fail) execution {execution_ids[1]} attempt 1" in first
    assert "FAILED (RuntimeError: failure on attempt 1); retry 1/2 at " in first
    assert re.search(r"retry 1/2 at \d\d:\d\d:\d\dZ$", first), first
    assert "FAILED (RuntimeError: failure on attempt 2); retry 2/2 at " in second
    assert final.endswith("FAILED (RuntimeError: failure on attempt 3); FAILED, no retries left"), final
    assert f"execution {execution_ids[3]} attempt 3" in final

    recurring = client.schedule("test.fail", every=60, delay=0)
    line = node.wait_for_line(rf"task {recurring.id} \(test\.fail\) ")
    slot = client.get(recurring.id).scheduled_at
    assert line.endswith(f"FAILED (RuntimeError: failure on attempt 1); next slot {slot:%H:%M:%S}Z"), line
    # The completed run came first, through the same recorder: it would have been told by now.
    assert not [text for text in node.lines() if f"task {done.id} (" in text], node.stderr()
    assert all(" WARNING " in text for text in node.lines() if "execution" in text), node.stderr()


def test_completed_runs_are_told_at_info(client: App, sqlite_url: str, tmp_path: Path, nodes: list[Node]) -> None:
    nodes.append(node := Node(sqlite_url, tmp_path, "--log-level", "INFO"))
    done = client.schedule("test.record")
    line = node.wait_for_line(rf"task {done.id} \(test\.record\) ")
    assert " INFO tickwork.worker: " in line and line.endswith("attempt 1: COMPLETED; task COMPLETED"), line


def test_json_lines_carry_the_run_fields(client: App, sqlite_url: str, tmp_path: Path, nodes: list[Node]) -> None:
    nodes.append(node := Node(sqlite_url, tmp_path, "--log-format", "json", "--log-level", "INFO"))
    failing = client.schedule("test.fail", max_retries=1, retry_backoff=0.1)
    node.wait_for_line(r"no retries left")
    records = [json.loads(line) for line in node.lines()]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert all(datetime.fromisoformat(r["time"]).utcoffset() is not None and r["time"].endswith("Z") for r in records)
    ended = [r for r in records if r.get("task_id") == failing.id]
    assert [r["attempt"] for r in ended] == [1, 2]
    first, last = ended
    assert first["level"] == "WARNING" and first["logger"] == "tickwork.worker"
    assert first["task_name"] == "test.fail" and first["status"] == "FAILED"
    assert first["error_type"] == "RuntimeError" and first["error_message"] == "failure on attempt 1"
    assert first["next"].startswith("retry 1/1 at ") and first["next"] in first["message"]
    assert first["execution_id"] != last["execution_id"]
    assert last["next"] == "FAILED, no retries left"
    started = next(r for r in records if " started: " in r["message"])
    assert started["tasks"] and "test.fail" in started["tasks"]


def test_start_up_line_masks_the_password(pg_url: str, tmp_path: Path, nodes: list[Node]) -> None:
    given = re.match(r"^postgres(?:ql)?://[^:@/]+:([^@/]+)@", pg_url)
    password = given[1] if given else PASSWORD  # a server that checks passwords: the one it expects
    url = pg_url if given else re.sub(r"^(postgres(?:ql)?://)([^:@/]+)@", rf"\g<1>\g<2>:{PASSWORD}@", pg_url)
    assert password in url, "the test database URL has no user to give a password"
    nodes.append(node := Node(url, tmp_path))
    line = node.wait_for_line(r"node \S+ started: database ")
    assert ":***@" in line and password not in node.stderr(), node.stderr()
    assert re.search(r"claim strategy \w+, 2 slots, queues default, \d+ tasks: .*test\.fail", line), line
    node.stop()
    assert password not in node.stderr()


def test_a_new_sqlite_database_is_told_with_its_absolute_path(tmp_path: Path, nodes: list[Node]) -> None:
    home = tmp_path / "home"
    home.mkdir()
    nodes.append(node := Node("sqlite:///fresh.db", tmp_path, cwd=home))
    told = node.wait_for_line(r"no database at ")
    assert f"WARNING tickwork.worker: no database at {home / 'fresh.db'}: created a new, empty one" in told
    started = node.wait_for_line(r" started: ")
    assert f"started: database sqlite:///{home / 'fresh.db'}, claim strategy optimistic, 2 slots" in started
    assert node.stop() == 0
    nodes.append(again := Node("sqlite:///fresh.db", tmp_path, cwd=home))
    again.wait_for_line(r" started: ")
    assert "no database at" not in again.stderr()


def test_run_worker_from_python_tells_a_new_sqlite_database_too(tmp_path: Path) -> None:
    script = (
        "import logging\n"
        "from tickwork import App\n"
        "logging.basicConfig(format='%(levelname)s %(name)s: %(message)s')\n"
        "app = App('sqlite:///made.db')\n"
        "app.task(name='t.noop', context=False)(print)\n"
        "app.run_worker(concurrency=1)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the warning comes before the node's own lines
    finally:
        proc.terminate()
        proc.wait(30)
    assert f"WARNING tickwork.worker: no database at {tmp_path / 'made.db'}: created a new, empty one" in first


def test_an_app_without_tasks_refuses_to_start(sqlite_url: str) -> None:
    command = [sys.executable, "-m", "tickwork.cli", "worker", "tests.test_node_logs:empty_app"]
    env = {**os.environ, "TICKWORK_DB": sqlite_url}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "registers no task" in done.stderr and "Traceback" not in done.stderr
    assert not Path(sqlite_url.removeprefix("sqlite:///")).exists()  # refused before opening anything


def test_serve_takes_the_same_log_options(sqlite_url: str, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "tickwork.cli", "serve", "tests.test_node_logs:empty_app", "--with-worker"]
    env = {**os.environ, "TICKWORK_DB": sqlite_url}
    refused = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "registers no task" in refused.stderr, refused.stderr

    served = Served(sqlite_url, tmp_path / "serve.log", "--with-worker", "--log-format", "json", "--log-level", "INFO")
    try:
        client = client_of_url(sqlite_url)
        done = client.schedule("web.ok")
        client.close()

        def ended() -> dict[str, object] | None:
            lines = [json.loads(line) for line in served.output().splitlines() if line.startswith("{")]
            return next((r for r in lines if r.get("task_id") == done.id), None)

        record = wait_for(ended)
        assert isinstance(record, dict) and record["status"] == "COMPLETED" and record["level"] == "INFO"
        records = [json.loads(line) for line in served.output().splitlines() if line.startswith("{")]
        assert any(" started: database sqlite:///" in r["message"] for r in records), served.output()
        urllib.request.urlopen(f"{served.url}/healthz", timeout=10).read()  # an access-log line
        wait_for(lambda: any("/healthz" in line for line in served.output().splitlines()))
    finally:
        served.stop()
    # Every line is one JSON object, uvicorn's own (start-up, access log, shutdown) included.
    lines = [line for line in served.output().splitlines() if line.strip()]
    assert all(line.startswith("{") and json.loads(line)["message"] for line in lines), served.output()
    assert any(json.loads(line)["logger"] == "uvicorn.access" for line in lines), served.output()
    assert "\x1b[" not in served.output()  # no terminal colours in a log shipper's lines


def client_of_url(url: str) -> App:
    """An App on ``url`` that knows the served app's task names."""
    from tests.http_support import make_app

    return make_app(url)


@pytest.mark.parametrize(
    ("options", "status", "how", "expected"),
    [
        ({"max_retries": 1}, "TIMED_OUT", {}, r"retry 1/1 at \d\d:\d\d:\d\dZ"),
        (
            {"max_retries": 1},
            "FAILED",
            {"interrupted": True},
            r"due again at .* \(interrupted: .*\)",
        ),
        ({"every": 60}, "CANCELLED", {"replaced": True}, r"next slot \d\d:\d\d:\d\dZ"),
        ({"every": 60, "max_runs": 1}, "FAILED", {}, r"the schedule has ended: task COMPLETED"),
        ({}, "CANCELLED", {}, r"CANCELLED"),
    ],
)
def test_what_next_follows_the_written_outcome(
    client: App, options: dict[str, object], status: str, how: dict[str, bool], expected: str
) -> None:
    from tickwork.model import ExecutionStatus
    from tickwork.node.run_log import what_next
    from tickwork.schedules import outcome_of

    client.schedule("test.fail", delay=0, **options)  # type: ignore[arg-type]
    (claim,) = client.store.claim("a-node", ["test.fail"], 1, 30.0)
    outcome = outcome_of(claim, ExecutionStatus(status), client.store.approximate_now(), **how)
    assert re.fullmatch(expected, what_next(claim, outcome))
