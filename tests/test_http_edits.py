"""Editing over HTTP: ``PATCH /api/v1/tasks/{id}``, ``POST /api/v1/tasks/{id}/retry``,
``POST /api/v1/tasks`` with ``until``, ``max_runs`` and ``replace`` (200 and
``Tickwork-Existed: true`` for the task that already held the key, 201 for a new one),
and the dry-run plan of the schedules declared in code (``GET /api/v1/schedules``).
Through the real ASGI app, on each store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tests.http_support import AUTH, TOKEN, V1, client_of, make_app, problem, run_worker_until, schedule
from tickwork import App, Status
from tickwork.web.api.tasks import EXISTED


def patch(api: Any, task_id: int, body: Any, headers: dict[str, str] | None = AUTH) -> Any:
    raw = json.dumps(body).encode()
    return api.patch(
        f"{V1}/tasks/{task_id}", content=raw, headers={**(headers or {}), "Content-Type": "application/json"}
    )


def completed(api: Any, web_app: App) -> dict[str, Any]:
    """A one-time task run to its end."""
    task = schedule(api)
    run_worker_until(web_app, lambda: web_app.get(task["id"]).status is Status.COMPLETED)
    return task


# -- PATCH ---------------------------------------------------------------------------------


def test_patch_edits_schedule_arguments_policies_and_ends(api: Any, web_app: App) -> None:
    task = schedule(api, every=3600, kwargs={"value": 1}, timeout=30)
    until = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0)
    edited = patch(
        api,
        task["id"],
        {
            "cron": "0 9 * * 1-5",
            "timezone": "Europe/Berlin",
            "kwargs": {"value": [1, "two"]},
            "max_retries": 3,
            "misfire": "SKIP",
            "jitter": 2.5,
            "until": until.astimezone(timezone(timedelta(hours=2))).isoformat(),  # any offset: the same instant
            "max_runs": 10,
        },
    )
    assert edited.status_code == 200, edited.text
    body = edited.json()
    assert body["id"] == task["id"] and body["revision"] == task["revision"] + 1
    assert (body["cron"], body["timezone"], body["interval"]) == ("0 9 * * 1-5", "Europe/Berlin", None)
    assert body["kwargs"] == {"value": [1, "two"]} and body["max_retries"] == 3 and body["misfire"] == "SKIP"
    assert body["jitter"] == 2.5 and body["timeout"] == 30 and body["max_runs"] == 10
    assert datetime.fromisoformat(body["until"]) == until and body["origin"] is None
    assert api.get(f"{V1}/tasks/{task['id']}", headers=AUTH).json() == body
    # null turns off the options that can be off; every replaces cron again
    cleared = patch(api, task["id"], {"timeout": None, "until": None, "max_runs": None, "every": 90})
    assert cleared.status_code == 200, cleared.text
    again = cleared.json()
    assert (again["timeout"], again["until"], again["max_runs"]) == (None, None, None)
    assert (again["interval"], again["cron"], again["timezone"]) == (90, None, "UTC")
    assert again["kwargs"] == {"value": [1, "two"]}  # what is left out is kept
    stored = web_app.get(task["id"])
    assert stored.interval == 90 and stored.timeout is None and stored.revision == task["revision"] + 2
    assert [t.id for t in web_app.tasks()] == [task["id"]]  # edited in place


def test_patch_of_a_one_time_task_changes_its_arguments_not_a_schedule(api: Any, web_app: App) -> None:
    task = schedule(api, delay=600)
    edited = patch(api, task["id"], {"args": [42], "priority": 5, "max_runtime": 12})
    assert edited.status_code == 200, edited.text
    assert edited.json()["args"] == [42] and edited.json()["priority"] == 5 and edited.json()["max_runtime"] == 12
    before = web_app.get(task["id"])
    problem(patch(api, task["id"], {"cron": "* * * * *"}), 422, "cron")
    problem(patch(api, task["id"], {"until": "2030-01-01T00:00:00Z"}), 422, "until")
    problem(patch(api, task["id"], {"max_runs": 3}), 422, "max_runs")
    assert web_app.get(task["id"]) == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "web.fail"}, "name"),
        ({"key": "other"}, "key"),
        ({"nope": 1}, "nope"),
        ({}, "changes"),
        ({"args": None}, "args"),
        ({"cron": None}, "cron"),
        ({"every": None}, "every"),
        ({"misfire": None}, "misfire"),
        ({"args": {"a": 1}}, "args"),
        ({"kwargs": [1]}, "kwargs"),
        ({"kwargs": {"value": "nul\u0000"}}, "kwargs['value']"),
        ({"kwargs": {"v": "x" * 3000}}, "kwargs"),
        ({"kwargs": {"unexpected": 1}}, "kwargs"),
        ({"every": "60"}, "every"),
        ({"every": True}, "every"),
        ({"every": 0}, "every"),
        ({"every": 1e308}, "every"),
        ({"every": 60, "cron": "* * * * *"}, "every"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "0 0 30 2 *"}, "cron"),
        ({"cron": "1" * 5000 + " * * * *"}, "cron"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"timezone": "x" * 5000}, "timezone"),
        ({"timezone": "Europe/Berlin"}, "timezone"),  # an interval has no zone
        ({"until": "2030-01-01T09:00:00"}, "until"),
        ({"until": 1893456000}, "until"),
        ({"until": "soon"}, "until"),
        ({"max_runs": 0}, "max_runs"),
        ({"max_runs": 2**70}, "max_runs"),
        ({"max_runs": 1.5}, "max_runs"),
        ({"priority": 2**70}, "priority"),
        ({"max_catchup": -(2**70)}, "max_catchup"),
        ({"max_retries": -1}, "max_retries"),
        ({"jitter": -1}, "jitter"),
        ({"timeout": 0}, "timeout"),
        ({"misfire": "SOMETIMES"}, "misfire"),
        ({"overlap": "maybe"}, "overlap"),
        ([], "body"),
        ("every", "body"),
        (None, "body"),
    ],
)
def test_patch_refuses_bad_input_naming_the_field_and_changes_nothing(
    api: Any, web_app: App, body: Any, field: str
) -> None:
    task = schedule(api, every=3600)
    before = web_app.get(task["id"])
    refused = problem(patch(api, task["id"], body), 422, field)
    assert refused["error"] == "invalid_input"
    assert web_app.get(task["id"]) == before


def test_patch_refuses_a_body_that_is_not_json(api: Any, web_app: App) -> None:
    task = schedule(api, every=3600)
    headers = {**AUTH, "Content-Type": "application/json"}
    broken = api.patch(f"{V1}/tasks/{task['id']}", content=b'{"every": ', headers=headers)
    assert "not valid JSON" in problem(broken, 422, "body")["reason"]
    huge = b'{"kwargs": {"v": "' + b"x" * (2 * 1024 * 1024) + b'"}}'
    assert problem(api.patch(f"{V1}/tasks/{task['id']}", content=huge, headers=headers), 413)["field"] == "body"
    assert web_app.get(task["id"]).revision == task["revision"]


def test_patch_of_an_ended_task_is_a_conflict(api: Any, web_app: App) -> None:
    done = completed(api, web_app)
    refused = problem(patch(api, done["id"], {"priority": 1}), 409)
    assert refused["error"] == "conflict" and "cannot update a task that is COMPLETED" in refused["message"]
    cancelled = schedule(api, every=60)
    api.post(f"{V1}/tasks/{cancelled['id']}/cancel", headers=AUTH)
    assert "CANCELLED" in problem(patch(api, cancelled["id"], {"every": 30}), 409)["message"]
    assert web_app.get(cancelled["id"]).interval == 60


def test_patch_needs_the_token_and_a_known_id(api: Any, web_app: App) -> None:
    task = schedule(api, every=3600)
    assert problem(patch(api, task["id"], {"every": 60}, headers=None), 401)["error"] == "unauthorized"
    problem(patch(api, task["id"], {"every": 60}, headers={"Authorization": "Bearer wrong-token-0123456789"}), 401)
    assert web_app.get(task["id"]).interval == 3600
    assert problem(patch(api, 999999, {"every": 60}), 404)["error"] == "not_found"
    for bad in ["0", "-3", "abc", str(2**64)]:
        problem(api.patch(f"{V1}/tasks/{bad}", json={"every": 60}, headers=AUTH), 422, "task_id")
    with client_of(web_app, token=TOKEN, public_read=True) as open_reads:
        problem(open_reads.patch(f"{V1}/tasks/{task['id']}", json={"every": 60}), 401)  # reads open, writes not
    with client_of(web_app, token=None) as no_token:
        problem(no_token.patch(f"{V1}/tasks/{task['id']}", json={"every": 60}, headers=AUTH), 401)
    assert web_app.get(task["id"]).interval == 3600


def test_patch_of_a_running_task_replans_after_its_run(api: Any, web_app: App) -> None:
    task = schedule(api, every=3600, at=(datetime.now(UTC) - timedelta(seconds=5)).isoformat())
    [claim] = web_app.store.claim("node-x", ["web.ok"], 1, 30.0)
    assert claim.task.id == task["id"]
    running = patch(api, task["id"], {"every": 60})
    assert running.status_code == 200, running.text
    body = running.json()
    assert body["status"] == "RUNNING" and body["interval"] == 60 and body["replan_at"] is not None
    assert body["scheduled_at"] == task["scheduled_at"]  # the run goes on as it was claimed
    assert body["replan_at"] == api.get(f"{V1}/tasks/{task['id']}", headers=AUTH).json()["replan_at"]


# -- retry -----------------------------------------------------------------------------------


def test_retry_of_failed_and_cancelled_tasks(api: Any, web_app: App) -> None:
    failing = api.post(f"{V1}/tasks", json={"name": "web.fail"}, headers=AUTH).json()
    run_worker_until(web_app, lambda: web_app.get(failing["id"]).status is Status.FAILED)
    retried = api.post(f"{V1}/tasks/{failing['id']}/retry", headers=AUTH)
    assert retried.status_code == 200, retried.text
    body = retried.json()
    assert body["id"] == failing["id"] and body["status"] == "PENDING" and body["attempt"] == 0
    assert datetime.fromisoformat(body["next_run_at"]) <= datetime.now(UTC) + timedelta(seconds=1)
    assert (
        "cannot retry a task that is PENDING"
        in problem(api.post(f"{V1}/tasks/{failing['id']}/retry", headers=AUTH), 409)["message"]
    )
    recurring = schedule(api, every=3600)
    api.post(f"{V1}/tasks/{recurring['id']}/cancel", headers=AUTH)
    again = api.post(f"{V1}/tasks/{recurring['id']}/retry", headers=AUTH)
    assert again.status_code == 200 and again.json()["status"] == "PENDING" and again.json()["triggered"] is True
    assert len(web_app.executions(failing["id"])) == 1  # its history is kept


def test_retry_refusals(api: Any, web_app: App) -> None:
    done = completed(api, web_app)
    assert "COMPLETED" in problem(api.post(f"{V1}/tasks/{done['id']}/retry", headers=AUTH), 409)["message"]
    paused = schedule(api, every=60)
    api.post(f"{V1}/tasks/{paused['id']}/pause", headers=AUTH)
    problem(api.post(f"{V1}/tasks/{paused['id']}/retry", headers=AUTH), 409)
    problem(api.post(f"{V1}/tasks/999999/retry", headers=AUTH), 404)
    problem(api.post(f"{V1}/tasks/0/retry", headers=AUTH), 422, "task_id")
    keyed = schedule(api, delay=600, key="nightly")
    api.post(f"{V1}/tasks/{keyed['id']}/cancel", headers=AUTH)
    holder = schedule(api, delay=600, key="nightly")  # the key is free again: a new task takes it
    assert holder["id"] != keyed["id"]
    held = problem(api.post(f"{V1}/tasks/{keyed['id']}/retry", headers=AUTH), 409)
    assert f"held by live task {holder['id']}" in held["message"]
    assert web_app.get(keyed["id"]).status is Status.CANCELLED
    problem(api.post(f"{V1}/tasks/{keyed['id']}/retry"), 401)
    assert web_app.get(keyed["id"]).status is Status.CANCELLED


# -- scheduling: until, max_runs, replace, 200 vs 201 ------------------------------------------


def test_schedule_answers_201_new_and_200_for_the_task_holding_the_key(api: Any, web_app: App) -> None:
    until = (datetime.now(UTC) + timedelta(days=7)).replace(microsecond=0)
    body = {"name": "web.ok", "every": 600, "key": "sync", "until": until.isoformat(), "max_runs": 5}
    new = api.post(f"{V1}/tasks", json=body, headers=AUTH)
    assert new.status_code == 201 and new.headers[EXISTED] == "false"
    assert datetime.fromisoformat(new.json()["until"]) == until and new.json()["max_runs"] == 5
    assert new.json() == api.get(f"{V1}/tasks/{new.json()['id']}", headers=AUTH).json()  # the task's shape
    held = api.post(f"{V1}/tasks", json={"name": "web.ok", "every": 60, "key": "sync"}, headers=AUTH)
    assert held.status_code == 200 and held.headers[EXISTED] == "true"
    assert held.json() == new.json()  # the live task holding the key, unchanged
    replace = {"name": "web.ok", "every": 60, "key": "sync", "replace": True, "max_runs": 2}
    replaced = api.post(f"{V1}/tasks", json=replace, headers=AUTH)
    assert replaced.status_code == 200 and replaced.headers[EXISTED] == "true"
    edited = replaced.json()
    assert edited["id"] == new.json()["id"] and edited["revision"] == new.json()["revision"] + 1
    assert edited["interval"] == 60 and edited["max_runs"] == 2 and edited["until"] is None
    fresh = api.post(f"{V1}/tasks", json={**replace, "key": "other"}, headers=AUTH)  # nothing to replace
    assert fresh.status_code == 201 and fresh.headers[EXISTED] == "false"
    assert len(web_app.tasks()) == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"until": "2030-01-01T00:00:00Z"}, "until"),  # one-time: no schedule to end
        ({"every": 60, "until": "2030-01-01T00:00:00"}, "until"),
        ({"every": 60, "until": 1893456000}, "until"),
        ({"every": 60, "max_runs": 0}, "max_runs"),
        ({"every": 60, "max_runs": True}, "max_runs"),
        ({"every": 60, "max_runs": 2**70}, "max_runs"),
        ({"every": 60, "replace": "yes"}, "replace"),
        ({"every": 60, "replace": 1}, "replace"),
    ],
)
def test_schedule_refuses_bad_ends_and_replace(api: Any, web_app: App, body: dict[str, Any], field: str) -> None:
    problem(api.post(f"{V1}/tasks", json={"name": "web.ok", **body}, headers=AUTH), 422, field)
    assert web_app.tasks() == []


def test_replace_cannot_change_the_task_or_kind_holding_the_key(api: Any, web_app: App) -> None:
    held = schedule(api, every=60, key="k")
    problem(api.post(f"{V1}/tasks", json={"name": "web.fail", "key": "k", "replace": True}, headers=AUTH), 422, "key")
    problem(api.post(f"{V1}/tasks", json={"name": "web.ok", "key": "k", "replace": True}, headers=AUTH), 422, "key")
    assert web_app.get(held["id"]).interval == 60 and len(web_app.tasks()) == 1


# -- schedules in code: the dry-run plan ---------------------------------------------------------


def test_schedules_plan_is_a_dry_run_that_needs_the_token(store_url: str) -> None:
    application = make_app(store_url)
    ok = application.registry.get("web.ok")
    assert ok is not None
    application.periodic(every=3600, key="web-hourly", kwargs={"value": 1})(ok.func)
    try:
        with client_of(application, token=TOKEN, public_read=True) as api:
            problem(api.get(f"{V1}/schedules"), 401)  # even with open reads: it takes the sync lock
            plan = api.get(f"{V1}/schedules", headers=AUTH)
            assert plan.status_code == 200, plan.text
            assert [(c["action"], c["key"], c["name"]) for c in plan.json()["items"]] == [
                ("create", "web-hourly", "web.ok")
            ]
            assert application.tasks() == []  # nothing was written
            application.sync_schedules()
            [stored] = application.tasks()
            assert stored.origin == "code"
            assert api.get(f"{V1}/tasks/{stored.id}").json()["origin"] == "code"
            [line] = api.get(f"{V1}/schedules", headers=AUTH).json()["items"]
            assert (line["action"], line["task_id"]) == ("unchanged", stored.id)
            application.update(stored.id, every=60)  # by hand: a sync would set it back
            [line] = api.get(f"{V1}/schedules", headers=AUTH).json()["items"]
            assert line["action"] == "update" and line["fields"]["interval"] == {"old": 60.0, "new": 3600.0}
            assert application.get(stored.id).interval == 60
            problem(api.get(f"{V1}/schedules", params={"dry_run": "false"}, headers=AUTH), 422, "dry_run")
    finally:
        application.close()


def test_openapi_describes_the_new_routes(api: Any) -> None:
    spec = api.get("/openapi.json").json()
    paths = spec["paths"]
    edit = paths["/api/v1/tasks/{task_id}"]["patch"]
    assert {"200", "401", "404", "409", "422"} <= set(edit["responses"])
    assert edit["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/TaskEditIn")
    edit_in = spec["components"]["schemas"]["TaskEditIn"]
    assert edit_in["additionalProperties"] is False
    assert {"args", "kwargs", "cron", "every", "timezone", "until", "max_runs", "max_runtime"} <= set(
        edit_in["properties"]
    )
    assert {"type": "null"} in edit_in["properties"]["timeout"]["anyOf"]
    assert "anyOf" not in edit_in["properties"]["args"]  # null is not an edit of the arguments
    retry = paths["/api/v1/tasks/{task_id}/retry"]["post"]
    assert {"200", "401", "404", "409"} <= set(retry["responses"])
    create = paths["/api/v1/tasks"]["post"]
    for code in ("200", "201"):
        answer = create["responses"][code]
        assert answer["content"]["application/json"]["schema"]["$ref"].endswith("/TaskOut")
        assert EXISTED in answer["headers"]
    assert {"until", "max_runs", "replace"} <= set(spec["components"]["schemas"]["ScheduleIn"]["properties"])
    task_out = spec["components"]["schemas"]["TaskOut"]["properties"]
    assert {"until", "max_runs", "origin", "declared_at", "revision", "replan_at", "replan_run_at"} <= set(task_out)
    assert "/api/v1/schedules" in paths
