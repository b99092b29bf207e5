"""The dashboard's edit form and Retry button, through the real ASGI app on each store:
an edit posts with the session's CSRF token and changes the task in place; a refused
edit shows the reason next to the form with what was typed, and changes nothing; Retry
is offered for FAILED and CANCELLED tasks only; the task page shows the schedule's ends,
its origin and a pending replan, and the task list marks code schedules."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from markupsafe import escape

from tests.http_support import EVIL, TOKEN, client_of, run_worker_until
from tickwork import App, Status
from tickwork.web.auth import LOGIN_COOKIE, Auth


@pytest.fixture
def page(web_app: App) -> Iterator[Any]:
    """A signed-in dashboard client."""
    with client_of(web_app, token=TOKEN) as client:
        client.get("/login")
        nonce = client.cookies.get(LOGIN_COOKIE)
        signed = client.post("/login", data={"token": TOKEN, "csrf": nonce}, follow_redirects=False)
        assert signed.status_code == 303
        yield client


def csrf_of(text: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', text)
    assert found, text
    return found.group(1)


def form_of(text: str) -> dict[str, str]:
    """The edit form's fields as the page fills them in (inputs, selects, textareas)."""
    found = re.search(r'action="/tasks/\d+/edit"', text)
    assert found, text
    form = text[found.start() : text.index("</form>", found.start())]
    fields = {name: html.unescape(value) for name, value in re.findall(r'<input name="(\w+)" value="([^"]*)"', form)}
    for name, options in re.findall(r'<select name="(\w+)"[^>]*>(.*?)</select>', form, re.S):
        chosen = re.search(r'<option value="([^"]*)" selected>', options)
        fields[name] = chosen.group(1) if chosen else ""  # a value not among the choices
    for name, value in re.findall(r'<textarea name="(\w+)"[^>]*>(.*?)</textarea>', form, re.S):
        fields[name] = html.unescape(value)
    fields["csrf"] = csrf_of(form)
    revision = re.search(r'name="revision" value="(\d+)"', form)
    assert revision, form
    fields["revision"] = revision.group(1)
    return fields


def edit(page: Any, task_id: int, **changes: str) -> Any:
    """Post the task's edit form as the page shows it, with ``changes`` typed in."""
    shown = page.get(f"/tasks/{task_id}")
    assert shown.status_code == 200
    return page.post(f"/tasks/{task_id}/edit", data={**form_of(shown.text), **changes}, follow_redirects=False)


def test_the_edit_form_changes_the_task_in_place(page: Any, web_app: App) -> None:
    task = web_app.schedule("web.ok", every=3600, kwargs={"value": 1}, timeout=30)
    shown = form_of(page.get(f"/tasks/{task.id}").text)
    assert shown["every"] == "3600" and shown["cron"] == "" and shown["timeout"] == "30"
    assert shown["kwargs"] == '{"value": 1}' and shown["misfire"] == task.misfire.value
    saved = edit(
        page,
        task.id,
        every="",
        cron="30 9 * * 1-5",
        timezone="Europe/Berlin",
        kwargs='{"value": [1, "two"]}',
        timeout="",
        max_runs="7",
        until="2031-01-01T00:00:00+01:00",
        priority="4",
        overlap="replace",
    )
    assert saved.status_code == 303 and saved.headers["location"] == f"/tasks/{task.id}?done=edit"
    edited = web_app.get(task.id)
    assert (edited.cron, edited.timezone, edited.interval) == ("30 9 * * 1-5", "Europe/Berlin", None)
    assert edited.kwargs == {"value": [1, "two"]} and edited.timeout is None and edited.max_runs == 7
    assert edited.until == datetime(2030, 12, 31, 23, tzinfo=UTC) and edited.priority == 4
    assert edited.overlap.value == "replace" and edited.revision == task.revision + 1
    assert [t.id for t in web_app.tasks()] == [task.id]
    after = page.get(saved.headers["location"])
    assert "Saved." in after.text and "At 09:30 on Monday through Friday" in after.text
    unchanged = edit(page, task.id)  # the form as shown: nothing to change
    assert unchanged.headers["location"] == f"/tasks/{task.id}?done=unchanged"
    assert web_app.get(task.id).revision == edited.revision
    assert "Nothing changed." in page.get(unchanged.headers["location"]).text


@pytest.mark.parametrize(
    ("typed", "field", "reason"),
    [
        ({"cron": "61 * * * *", "every": ""}, "cron", "minute field"),
        ({"every": "soon"}, "every", "must be a number of seconds"),
        ({"every": "0"}, "every", "every="),
        ({"cron": "0 9 * * *"}, "every", "not both"),
        ({"every": ""}, "cron", "give a cron expression"),
        ({"timezone": "Mars/Olympus", "cron": "0 9 * * *", "every": ""}, "timezone", "Mars/Olympus"),
        ({"args": "[1,"}, "args", "not valid JSON"),
        ({"args": '{"a": 1}'}, "args", "must be a JSON array"),
        ({"kwargs": "[1]"}, "kwargs", "must be a JSON object"),
        ({"kwargs": '{"unexpected": 1}'}, "kwargs", "unexpected argument"),
        ({"until": "2030-01-01 09:00"}, "until", "timezone-aware"),
        ({"until": "next week"}, "until", "ISO 8601"),
        ({"max_runs": "0"}, "max_runs", "1 or more"),
        ({"max_runs": "9" * 5000}, "max_runs", "whole number"),
        ({"priority": "1.5"}, "priority", "whole number"),
        ({"priority": str(2**40)}, "priority", "between"),
        ({"jitter": "-1"}, "jitter", ">= 0"),
        ({"misfire_grace": ""}, "misfire_grace", "number of seconds"),
        ({"misfire": "SOMETIMES"}, "misfire", "must be one of"),
        ({"cron": "0 9 * * *\x00", "every": ""}, "cron", "cron="),
    ],
)
def test_a_refused_edit_shows_why_next_to_the_form_keeps_the_input_and_changes_nothing(
    page: Any, web_app: App, typed: dict[str, str], field: str, reason: str
) -> None:
    task = web_app.schedule("web.ok", every=3600, kwargs={"value": 1})
    refused = edit(page, task.id, **typed)
    assert refused.status_code == 422, refused.text
    error = re.search(r'<p class="error" role="alert" id="edit-error">(.*?)</p>', refused.text, re.S)
    assert error and reason in html.unescape(error.group(1)), refused.text
    assert re.search(rf'<(input|select) name="{field}"[^>]*aria-invalid="true"', refused.text) or field in (
        "args",
        "kwargs",
    )
    kept = form_of(refused.text)
    for name, value in typed.items():
        if name != "misfire":  # a select offers its choices only
            assert kept[name] == value.replace("\x00", "\ufffd"), name  # a NUL is shown as U+FFFD
    assert '<details id="edit" open>' in refused.text
    assert 'data-refresh="0"' in refused.text  # what was typed is not refreshed away
    assert web_app.get(task.id) == task


def test_an_edit_made_since_the_form_was_shown_is_not_undone(page: Any, web_app: App) -> None:
    task = web_app.schedule("web.ok", every=3600, kwargs={"value": 1})
    old_form = form_of(page.get(f"/tasks/{task.id}").text)
    web_app.update(task.id, max_retries=5)  # meanwhile, from elsewhere
    stale = page.post(f"/tasks/{task.id}/edit", data={**old_form, "priority": "3"})
    assert stale.status_code == 409 and "was changed since this form was shown" in stale.text
    assert form_of(stale.text)["priority"] == "3"  # what was typed is kept
    assert web_app.get(task.id).max_retries == 5 and web_app.get(task.id).priority == 0
    no_revision = {k: v for k, v in old_form.items() if k != "revision"}
    assert page.post(f"/tasks/{task.id}/edit", data={**no_revision, "priority": "3"}).status_code == 409
    assert edit(page, task.id, priority="3").status_code == 303  # the form as shown now
    assert web_app.get(task.id).max_retries == 5 and web_app.get(task.id).priority == 3


def test_typed_markup_is_shown_as_text(page: Any, web_app: App) -> None:
    task = web_app.schedule("web.ok", every=3600)
    refused = edit(page, task.id, cron=EVIL, every="", kwargs=f'{{"value": "{EVIL}"}}')
    assert refused.status_code == 422
    assert "<script>alert" not in refused.text and refused.text.count("<script") == 1
    assert str(escape(EVIL)) in refused.text
    assert web_app.get(task.id) == task


def test_an_edit_needs_the_session_and_its_csrf_token(web_app: App) -> None:
    task = web_app.schedule("web.ok", every=3600)
    url = f"/tasks/{task.id}"
    with client_of(web_app, token=TOKEN) as anonymous:
        away = anonymous.post(f"{url}/edit", data={"every": "60"}, follow_redirects=False)
        assert away.status_code == 303 and away.headers["location"] == f"/login?next={url}"
    with client_of(web_app, token=TOKEN, public_read=True) as reader:
        shown = reader.get(url)
        assert shown.status_code == 200 and 'action="/tasks/' not in shown.text and 'name="csrf"' not in shown.text
        assert "retry or edit it" in shown.text
    with client_of(web_app, token=TOKEN) as client:
        client.get("/login")
        client.post("/login", data={"token": TOKEN, "csrf": client.cookies.get(LOGIN_COOKIE)})
        form = form_of(client.get(url).text)
        other = Auth(TOKEN).session(Auth(TOKEN).new_session())
        assert other is not None
        for bad in ["", "0" * 64, other.csrf]:
            refused = client.post(f"{url}/edit", data={**form, "every": "60", "csrf": bad}, follow_redirects=False)
            assert refused.status_code == 403 and "The form expired" in refused.text
        missing = {k: v for k, v in form.items() if k != "csrf"}
        assert client.post(f"{url}/edit", data={**missing, "every": "60"}).status_code == 403
    assert web_app.get(task.id) == task


def test_the_form_offers_what_the_task_has(page: Any, web_app: App) -> None:
    once = web_app.schedule("web.ok", delay=600, args=[1])
    shown = page.get(f"/tasks/{once.id}").text
    fields = form_of(shown)
    assert "cron" not in fields and "until" not in fields and fields["args"] == "[1]"  # one-time: no schedule
    assert edit(page, once.id, args="[2]", max_retries="2").status_code == 303
    assert web_app.get(once.id).args == [2] and web_app.get(once.id).max_retries == 2
    done = web_app.schedule("web.ok")
    run_worker_until(web_app, lambda: web_app.get(done.id).status is Status.COMPLETED)
    ended = page.get(f"/tasks/{done.id}").text
    assert f'action="/tasks/{done.id}/edit"' not in ended and "btn-retry" not in ended
    # an ended task's form posted anyway (an old page): 409 with the reason, nothing changed
    refused = page.post(f"/tasks/{done.id}/edit", data={**fields, "args": "[3]"})
    assert refused.status_code == 409 and "cannot update a task that is COMPLETED" in refused.text
    assert web_app.get(done.id).args == []
    assert page.post("/tasks/999999/edit", data=fields).status_code == 404
    assert page.post("/tasks/abc/edit", data=fields).status_code == 404


def test_retry_is_offered_for_failed_and_cancelled_tasks_only_and_works(page: Any, web_app: App) -> None:
    pending = web_app.schedule("web.ok", every=3600)
    assert "btn-retry" not in page.get(f"/tasks/{pending.id}").text
    failing = web_app.schedule("web.fail")
    run_worker_until(web_app, lambda: web_app.get(failing.id).status is Status.FAILED)
    failed_page = page.get(f"/tasks/{failing.id}").text
    assert "btn-retry" in failed_page and f'action="/tasks/{failing.id}/edit"' not in failed_page
    token = csrf_of(failed_page)
    retried = page.post(f"/tasks/{failing.id}/retry", data={"csrf": token}, follow_redirects=False)
    assert retried.status_code == 303 and retried.headers["location"] == f"/tasks/{failing.id}?done=retry"
    assert web_app.get(failing.id).status is Status.PENDING and web_app.get(failing.id).attempt == 0
    assert "Retried" in page.get(retried.headers["location"]).text
    again = page.post(f"/tasks/{failing.id}/retry", data={"csrf": token})  # an old page's button
    assert again.status_code == 409 and "cannot retry a task that is PENDING" in again.text
    web_app.cancel(pending.id)
    assert "btn-retry" in page.get(f"/tasks/{pending.id}").text
    assert page.post(f"/tasks/{pending.id}/retry", data={"csrf": "forged"}).status_code == 403
    assert web_app.get(pending.id).status is Status.CANCELLED
    assert page.post(f"/tasks/{pending.id}/retry", data={"csrf": token}, follow_redirects=False).status_code == 303
    assert web_app.get(pending.id).status is Status.PENDING


def test_the_page_shows_ends_runs_origin_and_a_pending_replan(page: Any, web_app: App) -> None:
    until = datetime.now(UTC) + timedelta(days=3)
    ending = web_app.schedule("web.ok", every=60, until=until, max_runs=4, at=datetime.now(UTC) - timedelta(seconds=5))
    shown = page.get(f"/tasks/{ending.id}").text
    ends = re.search(r'id="task-ends">(.*?)</dd>', shown, re.S)
    assert ends and f"{until:%Y-%m-%d %H:%M:%S} UTC" in ends.group(1) and "after 4 runs" in ends.group(1)
    assert re.search(r'id="task-runs">0 / 4', shown)
    assert re.search(r'id="task-origin">runtime', shown) and 'id="task-replan"' not in shown
    [claim] = web_app.store.claim("node-x", ["web.ok"], 1, 30.0)  # it runs, on a node of our own
    assert claim.task.id == ending.id
    web_app.update(ending.id, every=600)
    running = page.get(f"/tasks/{ending.id}").text
    replan = web_app.get(ending.id).replan_at
    assert replan is not None and re.search(rf'id="task-replan">[^<]*{replan:%Y-%m-%d %H:%M:%S} UTC', running)
    assert "It is running" in running
    ok = web_app.registry.get("web.ok")
    assert ok is not None
    web_app.periodic(every=3600, key="web-hourly")(ok.func)
    web_app.sync_schedules()
    [code] = [t for t in web_app.tasks() if t.origin == "code"]
    listed = page.get("/tasks").text
    row = re.search(rf'<tr data-task-id="{code.id}">(.*?)</tr>', listed, re.S)
    assert row and '<span class="badge"' in row.group(1)
    other = re.search(rf'<tr data-task-id="{ending.id}">(.*?)</tr>', listed, re.S)
    assert other and "badge" not in other.group(1)
    code_page = page.get(f"/tasks/{code.id}").text
    assert re.search(r'id="task-origin"><span class="badge">code</span> declared with @app.periodic', code_page)
    assert "an edit lasts until the next sync" in code_page


def test_the_edit_form_moves_a_task_to_another_queue(page: Any, web_app: App) -> None:
    task = web_app.schedule("web.ok", delay=600)
    shown = page.get(f"/tasks/{task.id}").text
    assert form_of(shown)["queue"] == "default" and '<dd class="mono">default</dd>' in shown
    assert edit(page, task.id, queue="reports").status_code == 303
    assert web_app.get(task.id).queue == "reports"
    refused = edit(page, task.id, queue="two words")
    assert refused.status_code == 422 and "queue" in refused.text
    assert web_app.get(task.id).queue == "reports"
