"""The HTTP API and the dashboard through the real ASGI app: every route, every error
code, the token rules (none, wrong, empty configuration), sessions and CSRF, and markup
in user-supplied text rendered as text."""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from markupsafe import escape

from tests.conftest import wait_for
from tests.http_support import (
    AUTH,
    EVIL,
    EVIL_ERROR,
    EVIL_NAME,
    TOKEN,
    V1,
    client_of,
    make_app,
    problem,
    run_worker_until,
    schedule,
    wait_until,
)
from tickwork import App, Status
from tickwork.cli import main
from tickwork.errors import InvalidInput
from tickwork.model import ExecutionStatus
from tickwork.schedules import outcome_of
from tickwork.web import TokenConfigError, create_app
from tickwork.web.auth import LOGIN_COOKIE, SESSION_COOKIE, Auth
from tickwork.web.server import ServeConfigError, access, is_loopback

# -- the token --------------------------------------------------------------------------


def test_reads_and_writes_need_the_token(api: Any, web_app: App) -> None:
    for method, path in [("get", f"{V1}/tasks"), ("get", f"{V1}/stats"), ("post", f"{V1}/tasks")]:
        missing = api.request(method.upper(), path, json={"name": "web.ok"})
        assert problem(missing, 401)["error"] == "unauthorized"
        assert missing.headers["www-authenticate"] == "Bearer"
        assert "missing token" in missing.json()["message"]
        for header in [f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", "Bearer", TOKEN]:
            wrong = api.request(method.upper(), path, json={"name": "web.ok"}, headers={"Authorization": header})
            problem(wrong, 401)
    assert web_app.tasks() == []  # refused writes stored nothing
    assert api.get(f"{V1}/tasks", headers=AUTH).status_code == 200
    assert api.get(f"{V1}/tasks", headers={"Authorization": f"bearer  {TOKEN} "}).status_code == 200


def test_public_read_opens_reads_only(web_app: App) -> None:
    with client_of(web_app, token=TOKEN, public_read=True) as api:
        assert api.get(f"{V1}/tasks").status_code == 200
        assert api.get(f"{V1}/stats").status_code == 200
        assert api.get("/metrics").status_code == 200
        problem(api.post(f"{V1}/tasks", json={"name": "web.ok"}), 401)
        task = schedule(api, delay=60)
        problem(api.post(f"{V1}/tasks/{task['id']}/cancel"), 401)
        assert api.get(f"{V1}/tasks/{task['id']}").json()["status"] == "PENDING"


def test_empty_token_configuration_is_refused(web_app: App) -> None:
    """TICKWORK_API_TOKEN="" must not mean "no auth": the app and the server refuse it."""
    for bad in ["", "   ", "short", f" {TOKEN}"]:
        with pytest.raises(TokenConfigError):
            create_app(web_app, token=bad)
        with pytest.raises(ServeConfigError):
            access("127.0.0.1", bad, False)
    with pytest.raises(TokenConfigError, match="empty"):
        Auth("")


def test_serve_refuses_empty_token_and_exposure_without_token(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    monkeypatch.setenv("TICKWORK_API_TOKEN", "")
    result = runner.invoke(main, ["serve", "tests.http_support:app"])
    assert result.exit_code == 1 and "set but empty" in result.output
    monkeypatch.delenv("TICKWORK_API_TOKEN")
    result = runner.invoke(main, ["serve", "tests.http_support:app", "--host", "0.0.0.0"])
    assert result.exit_code == 1 and "refusing to listen on '0.0.0.0' without a token" in result.output
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("[::1]") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1") and not is_loopback("example.com")
    assert access("127.0.0.1", None, False) is True  # no token on loopback: read-only, reads open
    assert access("0.0.0.0", TOKEN, False) is False
    assert "--with-worker" in runner.invoke(main, ["serve", "--help"]).output


def test_without_a_token_nothing_can_be_written(web_app: App) -> None:
    with client_of(web_app, token=None, public_read=True) as api:
        assert api.get(f"{V1}/tasks").status_code == 200
        refused = problem(api.post(f"{V1}/tasks", json={"name": "web.ok"}, headers=AUTH), 401)
        assert "no API token" in refused["message"]
        login = api.get("/login")
        assert "nobody can sign in" in login.text
        csrf = api.cookies.get(LOGIN_COOKIE)
        assert api.post("/login", data={"token": "", "csrf": csrf}, follow_redirects=False).status_code == 401
    with client_of(web_app, token=None) as api:  # and without public reads, nothing at all
        problem(api.get(f"{V1}/tasks"), 401)


# -- scheduling --------------------------------------------------------------------------


def test_schedule_every_kind_of_task(api: Any, web_app: App) -> None:
    now = datetime.now(UTC)
    once = schedule(api, args=[1, "two"], kwargs={"value": {"nested": [True, None]}})
    assert once["kind"] == "ONE_TIME" and once["status"] == "PENDING"
    assert once["args"] == [1, "two"] and once["kwargs"] == {"value": {"nested": [True, None]}}
    delayed = schedule(api, delay=120)
    assert datetime.fromisoformat(delayed["scheduled_at"]) >= now + timedelta(seconds=119)
    at = (now + timedelta(days=1)).replace(microsecond=0).astimezone(UTC)
    timed = schedule(api, at=at.isoformat())
    assert datetime.fromisoformat(timed["scheduled_at"]) == at
    cron = schedule(api, cron="0 9 * * 1-5", timezone="Europe/Berlin", misfire="SKIP", jitter=5, priority=3)
    assert cron["kind"] == "RECURRING" and cron["cron"] == "0 9 * * 1-5" and cron["timezone"] == "Europe/Berlin"
    assert cron["misfire"] == "SKIP" and cron["jitter"] == 5 and cron["priority"] == 3
    every = schedule(api, every=300, overlap="replace", max_retries=2, retry_backoff=0.5, timeout=10)
    assert every["interval"] == 300 and every["overlap"] == "replace" and every["max_retries"] == 2
    keyed = schedule(api, key="nightly", delay=60)
    again = schedule(api, 200, key="nightly", delay=60)
    assert again["id"] == keyed["id"]  # idempotent: the live task holding the key, answered 200
    stored = [once, delayed, timed, cron, every, keyed]
    assert [t.id for t in web_app.tasks()] == [t["id"] for t in stored]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "no.such.task"}, "name"),
        ({"name": "web.ok", "at": "2030-01-01T09:00:00"}, "at"),
        ({"name": "web.ok", "cron": "61 * * * *"}, "cron"),
        ({"name": "web.ok", "cron": "0 0 30 2 *"}, "cron"),
        ({"name": "web.ok", "cron": "* * * 13 *"}, "cron"),
        ({"name": "web.ok", "cron": "-1 * * * *"}, "cron"),
        ({"name": "web.ok", "cron": "*/" + "9" * 40 + " * * * *"}, "cron"),
        ({"name": "web.ok", "cron": "1" * 5000 + " * * * *"}, "cron"),
        ({"name": "web.ok", "cron": "\u0661 * * * *"}, "cron"),
        ({"name": "web.ok", "cron": "0 9 * * *", "timezone": "../../etc/passwd"}, "timezone"),
        ({"name": "web.ok", "cron": "0 9 * * *", "timezone": "x" * 5000}, "timezone"),
        ({"name": "web.ok", "cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"name": "web.ok", "delay": -1}, "delay"),
        ({"name": "web.ok", "delay": 5, "at": "2030-01-01T09:00:00Z"}, "at"),
        ({"name": "web.ok", "cron": "* * * * *", "every": 60}, "every"),
        ({"name": "web.ok", "every": 0}, "every"),
        ({"name": "web.ok", "kwargs": [1, 2]}, "kwargs"),
        ({"name": "web.ok", "args": {"a": 1}}, "args"),
        ({"name": "web.ok", "kwargs": {"v": "nul\u0000byte"}}, "kwargs['v']"),
        ({"name": "web.ok", "key": "nul\u0000"}, "key"),
        ({"name": "web.ok", "misfire": "SOMETIMES"}, "misfire"),
        ({"name": "web.ok", "max_retries": -1}, "max_retries"),
        ({"name": "web.ok", "priority": 2**40}, "priority"),
        ({"name": "web.ok", "delay": "soon"}, "delay"),
        ({"name": "web.ok", "task": "web.ok"}, "task"),
        ({"kwargs": {}}, "name"),
        ({"name": ""}, "name"),
    ],
)
def test_schedule_refuses_bad_input_naming_the_field(api: Any, web_app: App, body: dict[str, Any], field: str) -> None:
    refused = problem(api.post(f"{V1}/tasks", json=body, headers=AUTH), 422, field)
    assert refused["error"] == "invalid_input"
    assert web_app.tasks() == []


def test_schedule_refuses_malformed_json(api: Any) -> None:
    headers = {**AUTH, "Content-Type": "application/json"}
    assert (
        "not valid JSON"
        in problem(api.post(f"{V1}/tasks", content=b'{"name": ', headers=headers), 422, "body")["reason"]
    )
    problem(api.post(f"{V1}/tasks", content=b"[]", headers=headers), 422)


def test_payload_over_the_limit_is_413(api: Any, web_app: App) -> None:
    over = problem(api.post(f"{V1}/tasks", json={"name": "web.ok", "kwargs": {"v": "x" * 3000}}, headers=AUTH), 413)
    assert over["error"] == "payload_too_large" and over["field"] == "kwargs" and "max_payload=2048" in over["reason"]
    huge = b'{"name": "web.ok", "kwargs": {"v": "' + b"x" * (2 * 1024 * 1024) + b'"}}'
    body = problem(api.post(f"{V1}/tasks", content=huge, headers={**AUTH, "Content-Type": "application/json"}), 413)
    assert body["field"] == "body"
    assert web_app.tasks() == []


def test_a_streamed_body_over_the_limit_is_413(api: Any) -> None:
    def chunks() -> Any:
        for _ in range(40):
            yield b"x" * 65536

    response = api.post(f"{V1}/tasks", content=chunks(), headers={**AUTH, "Content-Type": "application/json"})
    problem(response, 413)


# -- reading -----------------------------------------------------------------------------


def test_get_a_task_and_unknown_ids(api: Any) -> None:
    task = schedule(api, delay=60)
    got = api.get(f"{V1}/tasks/{task['id']}", headers=AUTH)
    assert got.status_code == 200 and got.json() == task
    assert problem(api.get(f"{V1}/tasks/999999", headers=AUTH), 404)["error"] == "not_found"
    for bad in ["0", "-3", "abc", str(2**64)]:
        problem(api.get(f"{V1}/tasks/{bad}", headers=AUTH), 422, "task_id")
    problem(api.get(f"{V1}/nope", headers=AUTH), 404)
    problem(api.delete(f"{V1}/tasks/{task['id']}", headers=AUTH), 405)


def test_list_filter_search_and_pages(api: Any, web_app: App) -> None:
    ids = [schedule(api, delay=60)["id"] for _ in range(5)]
    evil = api.post(f"{V1}/tasks", json={"name": EVIL_NAME, "delay": 60}, headers=AUTH).json()
    api.post(f"{V1}/tasks/{ids[0]}/pause", headers=AUTH)

    def listing(**params: Any) -> dict[str, Any]:
        response = api.get(f"{V1}/tasks", params=params, headers=AUTH)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    everything = listing()
    assert [t["id"] for t in everything["items"]] == [*ids, evil["id"]] and everything["next_offset"] is None
    assert [t["id"] for t in listing(status="PAUSED")["items"]] == [ids[0]]
    assert [t["id"] for t in listing(name=EVIL_NAME)["items"]] == [evil["id"]]
    assert [t["id"] for t in listing(q="SCRIPT")["items"]] == [evil["id"]]  # case-insensitive substring
    assert [t["id"] for t in listing(q="web.", status="PENDING")["items"]] == [*ids[1:], evil["id"]]
    first = listing(limit=2)
    assert [t["id"] for t in first["items"]] == ids[:2] and first["next_offset"] == 2
    second = listing(limit=2, offset=first["next_offset"])
    assert [t["id"] for t in second["items"]] == ids[2:4]
    searched = listing(q="web.ok", limit=2, offset=3)
    assert [t["id"] for t in searched["items"]] == ids[3:5] and searched["next_offset"] == 5
    assert listing(q="web.ok", offset=5)["items"] == [] and listing(q="web.ok", offset=5)["next_offset"] is None
    assert listing(q="zzz")["items"] == []
    problem(api.get(f"{V1}/tasks", params={"status": "SLEEPING"}, headers=AUTH), 422, "status")
    problem(api.get(f"{V1}/tasks", params={"limit": 0}, headers=AUTH), 422, "limit")
    problem(api.get(f"{V1}/tasks", params={"offset": -1}, headers=AUTH), 422, "offset")
    problem(api.get(f"{V1}/tasks", params={"name": "a\x00b"}, headers=AUTH), 422, "name")
    misspelt = problem(api.get(f"{V1}/tasks", params={"stauts": "FAILED"}, headers=AUTH), 422, "stauts")
    assert "unknown query parameter" in misspelt["reason"]


def test_registered_names_nodes_and_stats(api: Any, web_app: App) -> None:
    assert api.get(f"{V1}/task-names", headers=AUTH).json()["names"] == sorted(
        [
            "web.ok",
            "web.fail",
            "web.wait",
            EVIL_NAME,
            "emails.send_welcome",
            "reports.daily",
            "cache.warm",
            "sync.inventory",
        ]
    )
    assert api.get(f"{V1}/nodes", headers=AUTH).json() == {"items": []}
    schedule(api, delay=60)
    schedule(api)
    # "now" is the store's clock as this process estimates it (within half a round trip):
    # under load the task can come due a few milliseconds after it was stored.
    stats = wait_for(lambda: (s := api.get(f"{V1}/stats", headers=AUTH).json())["depth"] == 1 and s)
    assert stats["by_status"] == {"PENDING": 2} and stats["depth"] == 1 and stats["nodes"] == 0
    assert set(stats) == {
        "depth",
        "oldest_age",
        "running",
        "nodes",
        "by_status",
        "runs_last_minute",
        "runs_last_hour",
        "window_full",
    }

    def node_listed() -> bool:
        nodes = api.get(f"{V1}/nodes", headers=AUTH).json()["items"]
        return len(nodes) == 1 and nodes[0]["capacity"] == 2

    run_worker_until(web_app, lambda: node_listed() and web_app.stats().by_status.get("COMPLETED") == 1)
    stats = api.get(f"{V1}/stats", headers=AUTH).json()
    assert stats["runs_last_minute"] == {"COMPLETED": 1} and stats["depth"] == 0


# -- managing ----------------------------------------------------------------------------


def test_cancel_pause_resume_trigger_and_conflicts(api: Any) -> None:
    def act(task_id: int, action: str, **params: Any) -> Any:
        return api.post(f"{V1}/tasks/{task_id}/{action}", params=params, headers=AUTH)

    task = schedule(api, every=3600)
    paused = act(task["id"], "pause")
    assert paused.status_code == 200 and paused.json()["status"] == "PAUSED"
    assert act(task["id"], "pause").json()["status"] == "PAUSED"  # pausing a paused task changes nothing
    problem(act(task["id"], "trigger"), 409)
    resumed = act(task["id"], "resume", catch_up="false")
    assert resumed.status_code == 200 and resumed.json()["status"] == "PENDING"
    assert act(task["id"], "resume").json()["status"] == "PENDING"  # so is resuming a pending one
    triggered = act(task["id"], "trigger")
    assert triggered.status_code == 200 and triggered.json()["triggered"] is True
    problem(act(task["id"], "cancel", run_only="true"), 409)  # not running: there is no run to stop
    cancelled = act(task["id"], "cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"
    problem(act(task["id"], "resume"), 409)
    assert "cannot pause a task that is CANCELLED" in problem(act(task["id"], "pause"), 409)["message"]
    assert act(task["id"], "cancel").status_code == 200  # cancelling a cancelled task changes nothing
    for action in ["cancel", "pause", "resume", "trigger"]:
        problem(act(424242, action), 404)
        problem(act(0, action), 422, "task_id")
    problem(act(task["id"], "explode"), 404)


def test_cancel_of_a_finished_task_is_a_conflict(api: Any, web_app: App) -> None:
    task = schedule(api)
    run_worker_until(web_app, lambda: web_app.get(task["id"]).status is Status.COMPLETED)
    assert (
        "cannot cancel a task that is COMPLETED"
        in problem(api.post(f"{V1}/tasks/{task['id']}/cancel", headers=AUTH), 409)["message"]
    )
    problem(api.post(f"{V1}/tasks/{task['id']}/resume", headers=AUTH), 409)


def test_backfill(api: Any) -> None:
    recurring = schedule(api, every=60, at=(datetime.now(UTC) - timedelta(hours=1)).isoformat())
    start = datetime.fromisoformat(recurring["scheduled_at"])
    body = {"start": start.isoformat(), "end": (start + timedelta(minutes=2)).isoformat()}
    done = api.post(f"{V1}/tasks/{recurring['id']}/backfill", json=body, headers=AUTH)
    assert done.status_code == 201, done.text
    runs = done.json()["items"]
    assert len(runs) == 3 and all(r["parent_id"] == recurring["id"] and r["kind"] == "ONE_TIME" for r in runs)
    again = api.post(f"{V1}/tasks/{recurring['id']}/backfill", json=body, headers=AUTH)
    assert again.status_code == 201 and again.json()["items"] == []  # the same slots are never run twice
    future = {"start": start.isoformat(), "end": (datetime.now(UTC) + timedelta(days=1)).isoformat()}
    problem(api.post(f"{V1}/tasks/{recurring['id']}/backfill", json=future, headers=AUTH), 422, "end")
    once = schedule(api, delay=60)
    problem(api.post(f"{V1}/tasks/{once['id']}/backfill", json=body, headers=AUTH), 422, "task_id")
    problem(api.post(f"{V1}/tasks/999999/backfill", json=body, headers=AUTH), 404)
    problem(api.post(f"{V1}/tasks/{recurring['id']}/backfill", json={"start": "x"}, headers=AUTH), 422, "start")
    problem(api.post(f"{V1}/tasks/{recurring['id']}/backfill", json=body), 401)


def test_executions_with_errors_and_filters(api: Any, web_app: App) -> None:
    failing = api.post(f"{V1}/tasks", json={"name": "web.fail"}, headers=AUTH).json()
    fine = schedule(api, kwargs={"value": [1, 2]})
    run_worker_until(
        web_app, lambda: len(web_app.executions(status="FAILED")) + len(web_app.executions(status="COMPLETED")) == 2
    )
    runs = api.get(f"{V1}/tasks/{failing['id']}/executions", headers=AUTH).json()["items"]
    assert len(runs) == 1 and runs[0]["status"] == "FAILED"
    assert runs[0]["error"]["type"] == "ValueError" and runs[0]["error"]["message"] == EVIL_ERROR
    assert "Traceback" in runs[0]["error"]["traceback"]
    ok = api.get(f"{V1}/tasks/{fine['id']}/executions", headers=AUTH).json()["items"]
    assert ok[0]["result"] == [1, 2] and ok[0]["node"]
    failed = api.get(f"{V1}/executions", params={"status": "FAILED"}, headers=AUTH).json()["items"]
    assert [e["task_id"] for e in failed] == [failing["id"]]
    assert len(api.get(f"{V1}/executions", headers=AUTH).json()["items"]) == 2
    assert api.get(f"{V1}/executions", params={"limit": 1}, headers=AUTH).json()["items"][0]["id"] == max(
        e["id"] for e in api.get(f"{V1}/executions", headers=AUTH).json()["items"]
    )
    problem(api.get(f"{V1}/tasks/999999/executions", headers=AUTH), 404)
    problem(api.get(f"{V1}/executions", params={"status": "LOST"}, headers=AUTH), 422, "status")


# -- operations ------------------------------------------------------------------------------


def test_openapi_healthz_and_metrics(api: Any) -> None:
    spec = api.get("/openapi.json").json()
    for path in ["/api/v1/tasks", "/api/v1/tasks/{task_id}/cancel", "/api/v1/executions", "/healthz", "/metrics"]:
        assert path in spec["paths"]
    assert spec["components"]["securitySchemes"]["token"]["scheme"] == "bearer"
    assert not any(p.startswith("/login") or p == "/" for p in spec["paths"])  # the dashboard is no API
    assert api.get("/docs").status_code == 404  # no page that loads third-party scripts
    health = api.get("/healthz")
    assert health.status_code == 200 and health.json()["status"] == "ok" and health.json()["schema_version"] >= 1
    problem(api.get("/metrics"), 401)
    metrics = api.get("/metrics", headers=AUTH)
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    assert "tickwork_stale_results_total" in metrics.text


def test_healthz_is_503_when_the_database_is_unusable(tmp_path: Path) -> None:
    gone = make_app(f"sqlite:///{tmp_path / 'no-such-dir' / 'x.db'}")
    with client_of(gone, token=TOKEN) as api:
        down = api.get("/healthz")
        assert down.status_code == 503 and down.json()["status"] == "unavailable"
        assert "no-such-dir" not in down.text  # details (paths, URLs) go to the log only
        assert problem(api.get(f"{V1}/tasks", headers=AUTH), 503)["error"] == "unavailable"
    path = tmp_path / "newer.db"
    newer = make_app(f"sqlite:///{path}")
    with client_of(newer, token=TOKEN) as api:
        assert api.get("/healthz").status_code == 200
        with sqlite3.connect(path) as conn:  # another, newer tickwork migrated the database on
            conn.execute("INSERT INTO tickwork_schema (version) VALUES (999)")
        assert api.get("/healthz").status_code == 503
    newer.close()


def test_in_process_worker_runs_with_the_server(web_app: App) -> None:
    with client_of(web_app, token=TOKEN, worker_concurrency=2) as api:
        task = schedule(api)
        wait_until(lambda: api.get(f"{V1}/tasks/{task['id']}", headers=AUTH).json()["status"] == "COMPLETED")
        assert api.get(f"{V1}/nodes", headers=AUTH).json()["items"][0]["capacity"] == 2
    assert web_app.nodes() == []  # the node stopped (and deregistered) with the server


def test_in_process_worker_holds_no_more_claims_than_its_prefetch(
    web_app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[Any] = []
    make_worker = App.worker

    def worker(self: App, **options: Any) -> Any:
        built.append(make_worker(self, **options))
        return built[-1]

    monkeypatch.setattr(App, "worker", worker)
    with client_of(web_app, token=TOKEN, worker_concurrency=2, worker_prefetch=0) as api:
        task = schedule(api)
        wait_until(lambda: api.get(f"{V1}/tasks/{task['id']}", headers=AUTH).json()["status"] == "COMPLETED")
    [node] = built
    assert node.prefetch.cap == 0 and node.prefetch.extra() == 0  # free slots only, however short the runs


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"worker_concurrency": 0}, "worker_concurrency"),
        ({"worker_concurrency": 2, "worker_prefetch": -1}, "worker_prefetch"),
        ({"worker_concurrency": 2, "worker_prefetch": "4"}, "worker_prefetch"),
        ({"worker_prefetch": 4}, "worker_prefetch"),  # no node for it to bound
    ],
)
def test_a_bad_in_process_node_is_refused_at_the_call_naming_it(
    web_app: App, options: dict[str, Any], field: str
) -> None:
    """Not when the node starts later on its own thread (where it stopped the server)."""
    with pytest.raises(InvalidInput) as refused:
        create_app(web_app, token=TOKEN, **options)
    value = options[field]
    assert refused.value.field == field and refused.value.value == value and repr(value) in str(refused.value)


def test_serve_passes_its_prefetch_to_the_in_process_node(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr("tickwork.web.server.serve", lambda app, **options: seen.append(options))
    runner = CliRunner()
    for given, expected in (([], None), (["--prefetch", "0"], 0), (["--prefetch", "500"], 500)):
        result = runner.invoke(main, ["serve", "tests.http_support:app", "--with-worker", *given])
        assert result.exit_code == 0, result.output
        assert seen[-1]["worker_prefetch"] == expected and seen[-1]["worker_concurrency"] == 8


@pytest.mark.parametrize("given", [["--prefetch", "-1"], ["--prefetch", "x"], ["--prefetch", "1.5"]])
def test_serve_refuses_a_bad_prefetch_naming_it(given: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tickwork.web.server.serve", lambda app, **options: pytest.fail("served"))
    result = CliRunner().invoke(main, ["serve", "tests.http_support:app", "--with-worker", *given])
    assert result.exit_code == 2 and "--prefetch" in result.output and given[1] in result.output


def test_serve_refuses_a_prefetch_without_a_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tickwork.web.server.serve", lambda app, **options: pytest.fail("served"))
    result = CliRunner().invoke(main, ["serve", "tests.http_support:app", "--prefetch", "4"])
    assert result.exit_code == 2 and "--prefetch" in result.output and "--with-worker" in result.output


# -- the dashboard -----------------------------------------------------------------------------


def sign_in(client: Any, token: str = TOKEN) -> Any:
    client.get("/login")
    nonce = client.cookies.get(LOGIN_COOKIE)
    return client.post("/login", data={"token": token, "csrf": nonce, "next": "/tasks"}, follow_redirects=False)


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


def test_dashboard_sign_in_sets_a_strict_http_only_session(api: Any) -> None:
    first = api.get("/", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/login?next=/"
    form = api.get("/login?next=/tasks")
    assert form.status_code == 200 and 'type="password"' in form.text
    assert "Content-Security-Policy" in form.headers and "script-src 'self'" in form.headers["content-security-policy"]
    nonce = api.cookies.get(LOGIN_COOKIE)
    wrong = api.post("/login", data={"token": "nope", "csrf": nonce}, follow_redirects=False)
    assert wrong.status_code == 401 and "Wrong token" in wrong.text and SESSION_COOKIE not in wrong.cookies
    forged = api.post("/login", data={"token": TOKEN, "csrf": "guess"}, follow_redirects=False)
    assert forged.status_code == 403 and SESSION_COOKIE not in forged.cookies
    signed = sign_in(api)
    assert signed.status_code == 303 and signed.headers["location"] == "/tasks"
    cookie = next(c for c in signed.headers.get_list("set-cookie") if c.startswith(SESSION_COOKIE))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict") and "Path=/" in cookie
    assert TOKEN not in cookie  # a signed session id, never the token
    assert api.get("/", follow_redirects=False).status_code == 200
    assert sign_in(api).status_code == 303
    # an open redirect through ?next= is not possible
    api.get("/login")
    nonce = api.cookies.get(LOGIN_COOKIE)
    away = api.post("/login", data={"token": TOKEN, "csrf": nonce, "next": "//evil.example/x"}, follow_redirects=False)
    assert away.headers["location"] == "/"


def test_dashboard_sessions_are_signed_and_expire(web_app: App) -> None:
    auth = Auth(TOKEN)
    assert auth.session(auth.new_session()) is not None
    assert auth.session(auth.new_session(now=0)) is None  # expired long ago
    assert auth.session(auth.new_session() + "0") is None
    assert auth.session("1.2.3") is None and auth.session(None) is None
    assert Auth(TOKEN + "-rotated").session(auth.new_session()) is None  # a new token signs everyone out
    with client_of(web_app, token=TOKEN) as api:
        api.cookies.set(SESSION_COOKIE, Auth("another-token-0123456789").new_session())
        assert api.get("/", follow_redirects=False).status_code == 303


def test_dashboard_actions_need_the_session_csrf_token(api: Any, web_app: App) -> None:
    task = schedule(api, delay=600)
    url = f"/tasks/{task['id']}"
    assert api.post(f"{url}/cancel", data={}, follow_redirects=False).headers["location"] == f"/login?next={url}"
    sign_in(api)
    page = api.get(url)
    assert page.status_code == 200 and "Run now" in page.text and "Pause" in page.text
    token = csrf_of(page.text)
    other = Auth(TOKEN).session(Auth(TOKEN).new_session())  # another session's CSRF token
    assert other is not None
    for bad in [
        {},
        {"csrf": ""},
        {"csrf": token[:-1] + ("1" if token.endswith("0") else "0")},
        {"csrf": other.csrf},
    ]:
        refused = api.post(f"{url}/cancel", data=bad, follow_redirects=False)
        assert refused.status_code == 403
    assert web_app.get(task["id"]).status is Status.PENDING
    paused = api.post(f"{url}/pause", data={"csrf": token}, follow_redirects=False)
    assert paused.status_code == 303 and paused.headers["location"] == f"{url}?done=pause"
    assert web_app.get(task["id"]).status is Status.PAUSED
    conflict = api.post(f"{url}/trigger", data={"csrf": token})
    assert conflict.status_code == 409 and "cannot trigger a task that is PAUSED" in conflict.text
    assert api.post(f"{url}/resume", data={"csrf": token}).status_code == 200
    asked = api.post(f"{url}/cancel", data={"csrf": token})  # the Cancel button asks first
    assert asked.status_code == 200 and 'name="confirm"' in asked.text
    assert web_app.get(task["id"]).status is Status.PENDING
    done = api.post(f"{url}/cancel", data={"csrf": token, "confirm": "yes"})
    assert done.status_code == 200 and "Cancel requested." in done.text and 'id="task-status"' in done.text
    assert web_app.get(task["id"]).status is Status.CANCELLED
    assert api.post("/tasks/999999/cancel", data={"csrf": token}).status_code == 404
    assert api.post(f"{url}/explode", data={"csrf": token}).status_code == 404
    out = api.post("/logout", data={"csrf": token}, follow_redirects=False)
    assert out.status_code == 303 and api.get("/", follow_redirects=False).status_code == 303


def test_dashboard_pages_show_everything_as_text(api: Any, web_app: App) -> None:
    """Markup in a task's name, arguments or error reaches the page escaped, never as markup."""
    evil = api.post(f"{V1}/tasks", json={"name": EVIL_NAME, "kwargs": {"x": EVIL}, "key": EVIL}, headers=AUTH).json()
    failing = api.post(f"{V1}/tasks", json={"name": "web.fail"}, headers=AUTH).json()
    cron = schedule(api, cron="30 9 * * 1-5", timezone="Europe/Berlin")
    run_worker_until(
        web_app,
        lambda: (
            web_app.get(failing["id"]).status is Status.FAILED and web_app.get(evil["id"]).status is Status.COMPLETED
        ),
    )
    sign_in(api)
    pages = {
        path: api.get(path)
        for path in [
            "/",
            f"/tasks/{evil['id']}",
            f"/tasks/{failing['id']}",
            "/runs",
            "/tasks",
            "/tasks?q=script",
            "/runs?status=FAILED",
        ]
    }
    for path, page in pages.items():
        assert page.status_code == 200, path
        assert "<script>alert" not in page.text and "<img src=x" not in page.text, path
        assert page.text.count("<script") == 1, path  # only the dashboard's own /static/refresh.js
    escaped_name = escape(EVIL_NAME)
    assert escaped_name in pages["/"].text and escaped_name in pages[f"/tasks/{evil['id']}"].text
    assert escape(EVIL_ERROR) in pages[f"/tasks/{failing['id']}"].text
    assert escape(EVIL_ERROR) in pages["/"].text  # recent failures
    assert "Traceback" in pages[f"/tasks/{failing['id']}"].text
    assert (
        escaped_name in pages["/tasks?q=script"].text
        and f'href="/tasks/{failing["id"]}"' not in pages["/tasks?q=script"].text
    )
    task_page = api.get(f"/tasks/{cron['id']}").text
    assert "At 09:30 on Monday through Friday" in task_page
    assert len(re.findall(r"<li>\d{4}-\d\d-\d\d 0[78]:30:00 UTC", task_page)) == 5  # the next 5 fire times
    assert "CET" in task_page or "CEST" in task_page
    assert "SINGLE_CATCHUP" in task_page and "overlap" in task_page


def test_dashboard_lists_nodes_filters_and_odd_input(api: Any, web_app: App) -> None:
    sign_in(api)
    assert "No live node" in api.get("/nodes").text
    schedule(api)
    run_worker_until(web_app, lambda: web_app.nodes() and "ago" in api.get("/nodes").text)
    bad = api.get("/tasks?status=SLEEPING&offset=x")
    assert bad.status_code == 200 and "Unknown status ignored." in bad.text and "Bad offset ignored." in bad.text
    assert api.get("/tasks?name=a%00b").status_code == 200
    assert api.get("/tasks/abc").status_code == 404 and api.get("/tasks/99999").status_code == 404
    assert api.get("/runs?status=nope").status_code == 200
    assert api.get("/static/app.css").status_code == 200 and api.get("/static/refresh.js").status_code == 200


def test_public_read_dashboard_shows_no_actions(web_app: App) -> None:
    task = web_app.schedule("web.ok", delay=60)
    with client_of(web_app, token=TOKEN, public_read=True) as api:
        page = api.get(f"/tasks/{task.id}")
        assert page.status_code == 200 and "Sign in</a> to cancel" in page.text and 'name="csrf"' not in page.text
        assert api.post(f"/tasks/{task.id}/cancel", data={"csrf": "x"}, follow_redirects=False).status_code == 303
    assert web_app.get(task.id).status is Status.PENDING


def test_a_full_queue_is_429_with_retry_after_and_stores_nothing(web_app: App) -> None:
    web_app.max_pending = 2
    with client_of(web_app, token=TOKEN) as api:
        schedule(api)
        schedule(api)
        full = api.post(f"{V1}/tasks", json={"name": "web.ok"}, headers=AUTH)
        body = problem(full, 429, "max_pending")
        assert full.headers["Retry-After"] == "5" and "max_pending=2" in body["message"]
        assert len(web_app.tasks()) == 2


def test_open_reads_answer_only_their_own_host_names(web_app: App) -> None:
    from fastapi.testclient import TestClient

    server = create_app(web_app, token=None, public_read=True, allowed_hosts=["localhost", "127.0.0.1"])
    with TestClient(server, base_url="http://attacker.example:8000") as rebound:
        assert rebound.get(f"{V1}/tasks").status_code == 400  # a rebinding page gets nothing
    with TestClient(server, base_url="http://127.0.0.1:8000") as local:
        assert local.get(f"{V1}/tasks").status_code == 200


def test_odd_digits_and_out_of_range_times_are_refused_not_500(api: Any) -> None:
    at = "0001-01-01T00:00:00+14:00"  # before year 1 once in UTC
    problem(api.post(f"{V1}/tasks", json={"name": "web.ok", "at": at}, headers=AUTH), 422, "at")
    sign_in(api)
    # A superscript two and an Arabic-Indic one: str.isdigit() accepts both.
    for path in ("/tasks/\u00b2", "/tasks?offset=\u00b2", "/tasks/\u0661"):
        assert api.get(path).status_code < 500, path


# -- strict input types --------------------------------------------------------------------

NUMERIC_FIELDS = [
    "delay",
    "every",
    "misfire_grace",
    "jitter",
    "timeout",
    "retry_backoff",
    "max_retries",
    "priority",
    "max_catchup",
]


@pytest.mark.parametrize("field", NUMERIC_FIELDS)
def test_booleans_and_strings_are_not_numbers(api: Any, web_app: App, field: str) -> None:
    """``"every": true`` would schedule a task every second: no number field takes a
    boolean (or a string of digits)."""
    for value in (True, False, "5"):
        refused = problem(api.post(f"{V1}/tasks", json={"name": "web.ok", field: value}, headers=AUTH), 422, field)
        assert f"{field}={json.dumps(value)}:" in refused["message"]
        if isinstance(value, bool):
            assert refused["reason"] == "must be a number, not a boolean"
    assert web_app.tasks() == []


def test_whole_numbers_stay_numbers_of_seconds(api: Any) -> None:
    assert schedule(api, every=60, jitter=0, misfire_grace=30.5)["interval"] == 60
    problem(api.post(f"{V1}/tasks", json={"name": "web.ok", "max_retries": 1.5}, headers=AUTH), 422, "max_retries")


@pytest.mark.parametrize(
    "at",
    [253402300800, "253402300800", 1.5, True, "2030-01-01", "09:00", "2030-02-30T09:00:00Z", "soon", ""],
)
def test_at_is_iso_text_never_a_number(api: Any, web_app: App, at: Any) -> None:
    """A number for ``at`` was read as milliseconds (253402300800 landed in 1978)."""
    refused = problem(api.post(f"{V1}/tasks", json={"name": "web.ok", "at": at}, headers=AUTH), 422, "at")
    assert "ISO 8601" in refused["reason"] or "not a valid time" in refused["reason"]
    assert web_app.tasks() == []


def test_backfill_bounds_are_iso_text(api: Any) -> None:
    recurring = schedule(api, every=60)
    for body, field in [
        ({"start": 0, "end": "2030-01-01T00:00Z"}, "start"),
        ({"start": "2030-01-01T00:00Z", "end": True}, "end"),
    ]:
        problem(api.post(f"{V1}/tasks/{recurring['id']}/backfill", json=body, headers=AUTH), 422, field)


def test_query_numbers_refuse_booleans(api: Any) -> None:
    for name in ("limit", "offset"):
        problem(api.get(f"{V1}/tasks", params={name: "true"}, headers=AUTH), 422, name)
    problem(api.get(f"{V1}/executions", params={"limit": "false"}, headers=AUTH), 422, "limit")


# -- credentials in URLs ---------------------------------------------------------------------

SECRET_PARAMS = ["token", "access_token", "api_key", "apikey", "api-key", "key", "password", "secret", "auth", "Auth"]


@pytest.mark.parametrize("param", SECRET_PARAMS)
def test_a_credential_in_the_query_string_is_never_echoed(api: Any, param: str) -> None:
    secret = "qs-S3cret-value"
    for path in (f"{V1}/tasks", f"{V1}/stats", f"{V1}/tasks/1/cancel"):
        method = "POST" if path.endswith("cancel") else "GET"
        answer = api.request(method, path, params={param: secret}, headers=AUTH)
        refused = problem(answer, 422, param)
        assert secret not in answer.text and "Authorization: Bearer" in refused["reason"]


def test_a_plain_unknown_parameter_is_still_shown(api: Any) -> None:
    refused = problem(api.get(f"{V1}/tasks", params={"stauts": "FAILED"}, headers=AUTH), 422, "stauts")
    assert "'FAILED'" in refused["message"]


def test_query_credentials_are_masked_in_any_logged_text() -> None:
    from tickwork.redact import mask_query, secret_name

    line = '127.0.0.1:5 - "GET /api/v1/tasks?limit=5&access_token=abc123&X-Api-Key=k&next=/x HTTP/1.1" 422'
    assert mask_query(line) == (
        '127.0.0.1:5 - "GET /api/v1/tasks?limit=5&access_token=***&X-Api-Key=***&next=/x HTTP/1.1" 422'
    )
    assert all(secret_name(p) for p in SECRET_PARAMS) and not any(secret_name(p) for p in ("limit", "q", "status"))


# -- host names --------------------------------------------------------------------------------


def test_a_foreign_host_is_refused_in_the_json_error_shape_with_the_security_headers(web_app: App) -> None:
    from fastapi.testclient import TestClient

    server = create_app(web_app, token=TOKEN, public_read=True, allowed_hosts=["localhost", "127.0.0.1", "[::1]"])
    with TestClient(server, base_url="http://127.0.0.1:8000") as client:
        normal = client.get(f"{V1}/tasks")
        for host in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example", ""):
            refused = client.get(f"{V1}/tasks", headers={"Host": host})
            body = problem(refused, 400, "Host")
            assert body["error"] == "invalid_host" and refused.headers["content-type"] == "application/json"
            for header in ("x-content-type-options", "referrer-policy", "x-frame-options"):
                assert refused.headers[header] == normal.headers[header], header
            assert "evil" not in refused.text
        for host in ("[::1]:8000", "LOCALHOST:8000", "127.0.0.1"):
            assert client.get(f"{V1}/tasks", headers={"Host": host}).status_code == 200, host


# -- rows written by something other than tickwork ---------------------------------------------

# (column, SQL value) per store: what another program might leave in a task row.
CORRUPTIONS = {
    "sqlite": [
        ("args", "'not json'"),
        ("status", "'WEIRD'"),
        ("scheduled_at", "'yesterday'"),
        ("kwargs", "'[1, 2]'"),  # decodes, but is no task's shape
    ],
    "postgres": [
        ("misfire", "'SOMETIMES'"),
        ("last_status", "'LOST'"),
        ("scheduled_at", "'infinity'"),
        ("args", """'{"a": 1}'::jsonb"""),  # decodes, but is no task's shape
    ],
}


def corrupt(url: str, task_id: int, column: str, value: str) -> None:
    """A raw UPDATE, as a program that is not tickwork would write it."""
    statement = f"UPDATE tickwork_tasks SET {column} = {value} WHERE id = {task_id}"
    if url.startswith("sqlite:"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute("PRAGMA ignore_check_constraints = ON")  # the status CHECK, too
            assert conn.execute(statement).rowcount == 1
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute(statement).rowcount == 1


def corruptions(store_url: str) -> list[tuple[str, str]]:
    return CORRUPTIONS["sqlite" if store_url.startswith("sqlite:") else "postgres"]


def test_an_undecodable_execution_row_is_a_500_that_names_it_not_an_outage(
    api: Any, web_app: App, store_url: str
) -> None:
    """A stored row no retry can mend is a fault of the data: 500 naming table, column
    and row, never the 503 (with Retry-After) of a database that is away."""
    task = schedule(api)
    web_app.trigger(task["id"])
    [claim] = web_app.store.claim("n", ["web.ok"], 1, 30.0)
    # its row, written when it ended (PostgreSQL writes none while a run goes on)
    assert web_app.store.finish("n", [outcome_of(claim, ExecutionStatus.COMPLETED, web_app.store.now())]) == [True]
    value = "'garbage'" if store_url.startswith("sqlite:") else "'infinity'"
    statement = f"UPDATE tickwork_executions SET started_at = {value} WHERE id = {claim.execution_id}"
    if store_url.startswith("sqlite:"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as conn:
            assert conn.execute(statement).rowcount == 1
    else:
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as conn:
            assert conn.execute(statement).rowcount == 1
    answer = api.get(f"{V1}/executions", headers=AUTH)
    body = problem(answer, 500)
    assert "Retry-After" not in answer.headers
    assert body["error"] == "undecodable"
    assert f"tickwork_executions.started_at of row id={claim.execution_id}" in body["message"]


@pytest.mark.parametrize("case", range(4))
def test_an_undecodable_row_is_shown_as_such_and_hides_nothing(
    api: Any, web_app: App, store_url: str, case: int
) -> None:
    column, value = corruptions(store_url)[case]
    first, bad, last = (schedule(api, delay=600, key=f"k{i}") for i in range(3))
    corrupt(store_url, bad["id"], column, value)
    listed = api.get(f"{V1}/tasks", headers=AUTH)
    assert listed.status_code == 200, listed.text
    items = listed.json()["items"]
    assert [t["id"] for t in items] == [first["id"], bad["id"], last["id"]]
    assert items[0] == first and items[2] == last
    marker = items[1]
    assert marker["undecodable"] is True and marker["name"] == "web.ok" and marker["reason"]
    detail = api.get(f"{V1}/tasks/{bad['id']}", headers=AUTH)
    assert detail.status_code == 200 and detail.json() == marker
    assert api.get(f"{V1}/tasks", params={"q": "web", "limit": 2}, headers=AUTH).json()["items"][1] == marker
    assert api.get(f"{V1}/tasks/{bad['id']}/executions", headers=AUTH).json() == {"items": []}
    refused = problem(api.post(f"{V1}/tasks/{bad['id']}/pause", headers=AUTH), 409)
    assert "cannot be decoded" in refused["message"]
    assert api.get(f"{V1}/tasks/{first['id']}", headers=AUTH).json() == first
    sign_in(api)
    for path in ("/", "/tasks", "/tasks?q=web", "/runs"):
        page = api.get(path)
        assert page.status_code == 200, (path, page.text)
    listing = api.get("/tasks").text
    assert f'href="/tasks/{first["id"]}"' in listing and f'href="/tasks/{last["id"]}"' in listing
    if column not in ("kwargs", "args") or value.startswith("'not"):  # rows that fail to decode at all
        assert "undecodable" in listing and "undecodable" in api.get("/").text
        page = api.get(f"/tasks/{bad['id']}")
        assert page.status_code == 200 and "cannot be decoded" in page.text
        assert f'action="/tasks/{bad["id"]}/' not in page.text  # no actions offered
        assert marker["reason"].split(":")[0] in page.text
        acted = api.post(f"/tasks/{bad['id']}/cancel", data={"csrf": csrf_of(api.get("/tasks").text)})
        assert acted.status_code == 409 and "cannot be decoded" in acted.text
    else:
        assert api.get(f"/tasks/{bad['id']}").status_code == 200


def test_reasons_name_what_cannot_be_decoded(api: Any, store_url: str) -> None:
    task = schedule(api, delay=600)
    column, value = corruptions(store_url)[0]
    corrupt(store_url, task["id"], column, value)
    reason = api.get(f"{V1}/tasks/{task['id']}", headers=AUTH).json()["reason"]
    assert ("JSONDecodeError" in reason) if store_url.startswith("sqlite:") else ("SOMETIMES" in reason)


# -- sessions -------------------------------------------------------------------------------------


def test_a_cookie_copied_before_sign_out_is_refused_after_it_by_every_server(store_url: str, web_app: App) -> None:
    """Signing out ends the session on the database: another server (another App on the
    same database, as another ``tickwork serve`` process) refuses the copied cookie."""
    other_app = make_app(store_url)
    try:
        with client_of(web_app, token=TOKEN) as api, client_of(other_app, token=TOKEN) as other:
            sign_in(api)
            cookie = api.cookies.get(SESSION_COOKIE)
            assert cookie
            other.cookies.set(SESSION_COOKIE, cookie)
            assert other.get("/", follow_redirects=False).status_code == 200  # valid on every server
            token = csrf_of(api.get("/tasks").text)
            assert api.post("/logout", data={"csrf": token}, follow_redirects=False).status_code == 303
            for client in (other, api):
                client.cookies.set(SESSION_COOKIE, cookie)
                assert client.get("/", follow_redirects=False).status_code == 303
                assert client.post("/tasks/1/cancel", data={"csrf": token}, follow_redirects=False).status_code == 303
            sign_in(other)  # a new sign-in is a new session
            assert other.get("/", follow_redirects=False).status_code == 200
    finally:
        other_app.close()


def test_the_session_life_is_configurable_and_shorter_than_a_day(web_app: App) -> None:
    from tickwork.web.auth import SESSION_TTL, parse_duration

    assert SESSION_TTL <= 8 * 3600
    assert [parse_duration(t) for t in ("30s", "15m", "12h", "7d", "1h30m", "1.5h")] == [
        30,
        900,
        43200,
        604800,
        5400,
        5400,
    ]
    for bad in ("", "10", "10x", "h", "-5m", "5 m", "1e3s"):
        with pytest.raises(ValueError, match="expected a duration"):
            parse_duration(bad)
    auth = Auth(TOKEN, session_ttl=parse_duration("30m"))
    cookie = auth.new_session(now=1_000_000)
    assert auth.session(cookie, now=1_000_000 + 1799) is not None
    assert auth.session(cookie, now=1_000_000 + 1801) is None
    with pytest.raises(ValueError, match="1 minute to 30 days"):
        Auth(TOKEN, session_ttl=31 * 86400)
    with client_of(web_app, token=TOKEN, session_ttl=1800) as api:
        signed = sign_in(api)
        cookie_header = next(c for c in signed.headers.get_list("set-cookie") if c.startswith(SESSION_COOKIE))
        assert "Max-Age=1800" in cookie_header
    runner = CliRunner()
    for bad, needle in (("10x", "expected a duration"), ("10s", "1 minute to 30 days"), ("90d", "1 minute")):
        result = runner.invoke(main, ["serve", "tests.http_support:app", "--session-ttl", bad])
        assert result.exit_code == 2 and needle in result.output and "Traceback" not in result.output


def test_fire_times_follow_the_dst_rule_in_utc_and_in_the_zone(api: Any) -> None:
    params = {"cron": "30 2 * * *", "timezone": "Europe/Berlin", "after": "2026-03-28T00:00:00Z", "n": 3}
    answer = api.get(f"{V1}/fire-times", params=params, headers=AUTH).json()
    assert answer["times"] == ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
    assert answer["local"][1] == "2026-03-29T03:00:00+02:00"  # 02:30 does not exist that night: the gap's end
    every = {"every": 3600, "anchor": "2026-01-01T00:00:00Z", "after": "2026-03-29T00:30:00Z", "n": 2}
    assert api.get(f"{V1}/fire-times", params=every, headers=AUTH).json()["times"] == [
        "2026-03-29T01:00:00Z",
        "2026-03-29T02:00:00Z",
    ]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"cron": "* * * 13 *"}, "cron"),
        ({"cron": "1" * 150 + " * * * *"}, "cron"),
        ({"cron": "x" * 5000}, "cron"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"cron": "0 9 * * *", "after": "2030-01-01T09:00:00"}, "after"),
        ({"cron": "0 9 * * *", "after": "253402300800"}, "after"),
        ({"cron": "0 9 * * *", "n": 0}, "n"),
        ({"every": "true"}, "every"),
        ({"every": 0}, "every"),
        ({}, "cron"),
        ({"cron": "* * * * *", "every": 60}, "cron"),
    ],
)
def test_fire_times_refuse_bad_input_naming_the_field(api: Any, params: dict[str, Any], field: str) -> None:
    problem(api.get(f"{V1}/fire-times", params=params, headers=AUTH), 422, field)
