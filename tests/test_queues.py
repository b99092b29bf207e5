"""Queues (issue 17, first part): a task goes to a queue (``@app.task(queue=...)``,
overridable per ``schedule()``, movable by ``update()``), and a node claims only from the
queues it serves (``--queues`` / ``run_worker(queues=...)``; by default the queues its
registered tasks use). Real worker processes on each store and claim strategy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.http_support import AUTH, V1, problem, schedule
from tests.workers import ROOT, Fleet, read_records
from tickwork import App, InvalidInput, Status
from tickwork.model import Kind
from tickwork.store import NewTask, Store


@pytest.fixture(params=["sqlite", "postgres-skip_locked", "postgres-optimistic"])
def db_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    if request.param == "sqlite":
        return sqlite_url
    return str(request.getfixturevalue("pg_url"))


def env_of(claim: str) -> dict[str, str]:
    return {"TICKWORK_TEST_CLAIM": claim} if claim else {}


def test_nodes_claim_only_from_the_queues_they_serve(client: App, fleet: Fleet, records: Path, claim: str) -> None:
    emails = [t.id for t in client.schedule_many([{"task": "test.record", "queue": "emails"}] * 30)]
    reports = [t.id for t in client.schedule_many([{"task": "test.record", "queue": "reports"}] * 30)]
    elsewhere = client.schedule("test.record", queue="nobody")
    assert {client.get(i).queue for i in emails} == {"emails"} and client.get(reports[0]).queue == "reports"
    for_emails = fleet.start(env=env_of(claim), args=("--queues", "emails"))
    for_reports = fleet.start(env=env_of(claim), args=("--queues", "reports, other"))
    wait_for(lambda: all(client.get(i).status is Status.COMPLETED for i in [*emails, *reports]), timeout=60)
    by_pid = {r["task_id"]: r["pid"] for r in read_records(records)}
    assert {by_pid[i] for i in emails} == {for_emails.proc.pid}
    assert {by_pid[i] for i in reports} == {for_reports.proc.pid}
    assert Counter(r["task_id"] for r in read_records(records)).most_common(1)[0][1] == 1
    assert client.get(elsewhere.id).status is Status.PENDING  # no node serves "nobody"
    assert "queues emails," in for_emails.output() and "queues other, reports," in for_reports.output()
    for node in (for_emails, for_reports):
        assert node.terminate() == 0, node.output()


def test_a_node_serves_its_registered_tasks_queues_by_default(client: App, fleet: Fleet, records: Path) -> None:
    """The test app's tasks all use "default": a task sent elsewhere waits for a node of
    that queue; moved back with update(), it runs."""
    node = fleet.start()
    moved = client.schedule("test.record", queue="batch")
    here = client.schedule("test.record")
    wait_for(lambda: client.get(here.id).status is Status.COMPLETED, timeout=30)
    assert client.get(moved.id).status is Status.PENDING
    assert client.update(moved.id, queue="default").queue == "default"
    wait_for(lambda: client.get(moved.id).status is Status.COMPLETED, timeout=30)
    assert "queues default," in node.output()
    assert node.terminate() == 0, node.output()


def test_the_store_claims_and_finds_the_next_due_by_queue(store: Store) -> None:
    now = store.now()
    due = now.replace(microsecond=0)

    def new(queue: str) -> NewTask:
        return NewTask(name="q.t", args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=due, next_run_at=due,
                       queue=queue)  # fmt: skip

    a, b = store.insert_tasks([new("a"), new("b")])
    assert store.next_due_at(["q.t"], ["b"]) == b.next_run_at and store.next_due_at(["q.t"], ["zzz"]) is None
    assert store.claim("n", ["q.t"], 10, 30.0, queues=[]) == []  # no queue served: nothing
    [got] = store.claim("n", ["q.t"], 10, 30.0, queues=["b"])
    assert (got.task.id, got.task.queue) == (b.id, "b")
    [rest] = store.claim("n", ["q.t"], 10, 30.0)  # None: every queue
    assert rest.task.id == a.id


@pytest.mark.parametrize("value", ["", " emails", "e mails", "x" * 101, "-lead", "ü", 7, None])
def test_a_bad_queue_name_is_refused_naming_the_field(sqlite_url: str, value: object) -> None:
    app = App(sqlite_url)
    app.task(name="t.q", context=False)(print)
    with pytest.raises(InvalidInput) as at_registration:
        app.task(name="t.bad", queue=value)(print)  # type: ignore[arg-type]
    assert at_registration.value.field == "queue"
    if value is not None:  # None in schedule() means "the task's own queue"
        with pytest.raises(InvalidInput) as refused:
            app.schedule("t.q", queue=value)  # type: ignore[arg-type]
        assert refused.value.field == "queue" and refused.value.value == value
        with pytest.raises(InvalidInput):
            app.schedule_many([{"task": "t.q", "queue": value}])
    assert app.tasks() == []  # nothing stored
    app.close()


def test_the_cli_refuses_an_empty_or_bad_queues_option(sqlite_url: str) -> None:
    for given in ["", " , ", "bad name"]:
        command = [sys.executable, "-m", "tickwork.cli", "worker", "tests.apps.basic:app", "--queues", given]
        done = subprocess.run(command, cwd=ROOT, env={"TICKWORK_DB": sqlite_url, "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 2 and "--queues" in done.stderr and "Traceback" not in done.stderr, done.stderr


# -- the HTTP API and the CLI ------------------------------------------------------------


def test_the_api_schedules_into_a_queue_and_moves_a_task(api: Any, web_app: App) -> None:
    created = schedule(api, queue="emails", delay=60)
    assert created["queue"] == "emails" and web_app.get(created["id"]).queue == "emails"
    moved = api.patch(f"{V1}/tasks/{created['id']}", json={"queue": "reports"}, headers=AUTH)
    assert moved.status_code == 200 and moved.json()["queue"] == "reports"
    refused = api.post(f"{V1}/tasks", json={"name": "web.ok", "queue": "no spaces"}, headers=AUTH)
    assert problem(refused, 422, "queue")["reason"]
    assert problem(api.patch(f"{V1}/tasks/{created['id']}", json={"queue": ""}, headers=AUTH), 422, "queue")
    assert web_app.get(created["id"]).queue == "reports"  # a refused edit changed nothing


def test_the_cli_schedules_into_a_queue_and_moves_a_task(sqlite_url: str) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tickwork.cli", *args]
        return subprocess.run(command, cwd=ROOT, env={**os.environ, "TICKWORK_DB": sqlite_url},
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    done = run("schedule", "tests.apps.basic:app", "test.record", "--delay", "60", "--queue", "emails")
    assert done.returncode == 0, done.stderr
    client = App(sqlite_url)
    [task] = client.tasks()
    assert task.queue == "emails"
    assert run("tasks", "update", str(task.id), "--queue", "reports").returncode == 0
    assert client.get(task.id).queue == "reports"
    bad = run("tasks", "update", str(task.id), "--queue", "a b")
    assert bad.returncode != 0 and "queue" in bad.stderr and "Traceback" not in bad.stderr
    assert "queue" in run("tasks", "show", str(task.id)).stdout
    client.close()


# -- pausing a queue -------------------------------------------------------------------------


def test_a_paused_queue_is_claimed_by_no_node_until_resumed(store: Store) -> None:
    now = store.now()

    def new(queue: str) -> NewTask:
        return NewTask(name="q.t", args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=now, next_run_at=now,
                       queue=queue)  # fmt: skip

    held, free = store.insert_tasks([new("held"), new("free")])
    store.set_queue_paused("held", True)
    assert store.next_due_at(["q.t"], ["held"]) is None
    [claimed] = store.claim("n", ["q.t"], 10, 30.0)
    assert claimed.task.id == free.id  # the paused queue's task is left alone
    listed = {q.name: q for q in store.queues()}
    assert listed["held"].paused and (listed["held"].pending, listed["held"].due) == (1, 1)
    assert not listed["free"].paused and listed["free"].running == 1
    store.set_queue_paused("held", False)
    [resumed] = store.claim("n", ["q.t"], 10, 30.0)
    assert resumed.task.id == held.id
    store.set_queue_paused("empty", True)  # a queue no task uses yet can be paused
    assert {q.name: q.paused for q in store.queues()}["empty"] is True


def test_pausing_a_queue_holds_its_tasks_on_real_nodes(client: App, fleet: Fleet, claim: str) -> None:
    client.pause_queue("default")
    waiting = client.schedule("test.record")  # due first: claimed first, were it not paused
    node = fleet.start(env=env_of(claim), args=("--queues", "default,other"))
    proof = client.schedule("test.record", queue="other")
    wait_for(lambda: client.get(proof.id).status is Status.COMPLETED, timeout=30)  # the node claims...
    assert client.get(waiting.id).status is Status.PENDING  # ...but not from the paused queue
    assert next(q for q in client.queues() if q.name == "default").due == 1
    client.resume_queue("default")
    wait_for(lambda: client.get(waiting.id).status is Status.COMPLETED, timeout=30)
    assert node.terminate() == 0, node.output()


def test_queues_from_the_cli(sqlite_url: str) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tickwork.cli", *args]
        return subprocess.run(command, cwd=ROOT, env={**os.environ, "TICKWORK_DB": sqlite_url},
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    assert run("schedule", "tests.apps.basic:app", "test.record", "--delay", "60", "--queue", "emails").returncode == 0
    paused = run("queues", "pause", "emails")
    assert paused.returncode == 0 and "queue emails paused" in paused.stdout
    listed = run("queues", "list")
    assert listed.returncode == 0 and "emails" in listed.stdout and "PAUSED" in listed.stdout
    [row] = json.loads(run("queues", "list", "--json").stdout)
    assert (row["name"], row["paused"], row["pending"], row["due"]) == ("emails", True, 1, 0)
    assert run("queues", "resume", "emails").returncode == 0
    assert json.loads(run("queues", "list", "--json").stdout)[0]["paused"] is False
    bad = run("queues", "pause", "no spaces")
    assert bad.returncode != 0 and "queue" in bad.stderr and "Traceback" not in bad.stderr


def test_queues_over_http_and_on_the_dashboard(api: Any, web_app: App) -> None:
    from tests.test_dashboard_schedule import csrf_of, signed_in

    schedule(api, queue="emails", delay=60)
    assert api.post(f"{V1}/queues/emails/pause").status_code == 401  # a write needs the token
    paused = api.post(f"{V1}/queues/emails/pause", headers=AUTH)
    assert paused.status_code == 200 and paused.json()["paused"] is True and paused.json()["pending"] == 1
    assert problem(api.post(f"{V1}/queues/a%20b/pause", headers=AUTH), 422)
    [listed] = api.get(f"{V1}/queues", headers=AUTH).json()["items"]
    assert listed["name"] == "emails" and listed["paused"] is True
    page = signed_in(api)
    shown = page.get("/queues").text
    assert '<tr data-queue="emails">' in shown and "PAUSED" in shown and 'action="/queues/resume"' in shown
    assert page.post("/queues/resume", data={"name": "emails", "csrf": "wrong"}).status_code == 403
    assert web_app.queues()[0].paused  # refused: unchanged
    done = page.post("/queues/resume", data={"name": "emails", "csrf": csrf_of(shown)}, follow_redirects=False)
    assert done.status_code == 303 and not web_app.queues()[0].paused
    assert page.post("/queues/pause", data={"name": "<b>x</b>", "csrf": csrf_of(shown)}).status_code == 422


def test_tasks_are_listed_by_queue(store_url: str) -> None:
    app = App(store_url)
    app.task(name="t.q", context=False)(print)
    here = app.schedule("t.q", delay=60, queue="emails")
    app.schedule("t.q", delay=60)
    assert [t.id for t in app.tasks(queue="emails")] == [here.id]
    assert len(app.tasks()) == 2 and app.tasks(queue="none") == []
    with pytest.raises(InvalidInput) as refused:
        app.tasks(queue="no spaces")
    assert refused.value.field == "queue"
    app.close()


def test_why_a_due_task_waits_is_told_by_python_the_cli_the_api_and_the_dashboard(
    api: Any, web_app: App, store_url: str
) -> None:
    from tests.test_dashboard_schedule import signed_in

    task = web_app.schedule("web.ok", queue="emails")
    later = web_app.schedule("web.ok", queue="emails", delay=3600)
    assert web_app.why_waiting(task) is None  # nothing holds it back
    web_app.pause_queue("emails")
    wait_for(lambda: web_app.get(task.id).next_run_at <= web_app.store.now(), timeout=10)
    assert web_app.why_waiting(web_app.get(task.id)) == "queue emails is paused"
    assert web_app.why_waiting(later) is None  # not due: not waiting
    assert api.get(f"{V1}/tasks/{task.id}", headers=AUTH).json()["waiting"] == "queue emails is paused"
    assert api.get(f"{V1}/tasks/{later.id}", headers=AUTH).json()["waiting"] is None
    page = signed_in(api).get(f"/tasks/{task.id}").text
    assert 'id="task-waiting"' in page and "queue emails is paused" in page
    if store_url.startswith("sqlite"):
        command = [sys.executable, "-m", "tickwork.cli", "tasks", "show", str(task.id)]
        shown = subprocess.run(command, cwd=ROOT, env={**os.environ, "TICKWORK_DB": store_url},
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert "waiting: queue emails is paused" in shown.stdout, shown.stderr
    web_app.resume_queue("emails")
    assert web_app.why_waiting(web_app.get(task.id)) is None


@pytest.mark.parametrize("given", ["emails", [], ["ok", "bad name"], 7])
def test_a_node_refuses_queues_that_are_not_a_list_of_names(sqlite_url: str, given: object) -> None:
    app = App(sqlite_url)
    app.task(name="t.q", context=False)(print)
    with pytest.raises(InvalidInput) as refused:
        app.worker(queues=given)  # type: ignore[arg-type]
    assert refused.value.field in ("queues", "queue")
    assert app.worker(queues=("b", "a", "b")).queues == ["a", "b"]
    app.close()
