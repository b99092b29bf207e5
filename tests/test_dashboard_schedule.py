"""The dashboard's "Schedule a task" form, through the real ASGI app on each store: it
offers the registered names; a good form schedules through ``App.schedule()`` (once
now, after a delay, at a time, cron in a zone, every N seconds) and leads to the new
task's page; a key a live task holds leads to that task, saying so; a refused value
shows the form again as typed with the reason next to the field, escaped, and stores
nothing; a post needs a signed-in session and its CSRF token."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from markupsafe import escape

from tests.http_support import EVIL, EVIL_NAME, TOKEN, client_of
from tickwork import App, Kind, Status
from tickwork.web.auth import LOGIN_COOKIE, Auth

NEW = "/tasks/new"


def signed_in(client: Any) -> Any:
    """``client`` signed in with the token (its session cookie kept)."""
    client.get("/login")
    signed = client.post(
        "/login", data={"token": TOKEN, "csrf": client.cookies.get(LOGIN_COOKIE)}, follow_redirects=False
    )
    assert signed.status_code == 303
    return client


@pytest.fixture
def page(web_app: App) -> Iterator[Any]:
    """A signed-in dashboard client."""
    with client_of(web_app, token=TOKEN) as client:
        yield signed_in(client)


def csrf_of(text: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', text)
    assert found, text
    return found.group(1)


def post(page: Any, **typed: str) -> Any:
    """Post the form as first shown, with ``typed`` filled in."""
    shown = page.get(NEW)
    assert shown.status_code == 200
    form = {"csrf": csrf_of(shown.text), "args": "[]", "kwargs": "{}", "when": "now", "timezone": "UTC", **typed}
    return page.post(NEW, data=form, follow_redirects=False)


def error_of(text: str) -> str:
    found = re.search(r'<p class="error" role="alert" id="schedule-error">(.*?)</p>', text, re.S)
    assert found, text
    return html.unescape(found.group(1))


def kept_of(text: str) -> dict[str, str]:
    """The form's values as the page shows them again."""
    form = text[text.index('id="schedule-form"') :]
    form = form[: form.index("</form>")]
    kept = {name: html.unescape(value) for name, value in re.findall(r'<input name="(\w+)" value="([^"]*)"', form)}
    for name, value in re.findall(r'<textarea name="(\w+)"[^>]*>(.*?)</textarea>', form, re.S):
        kept[name] = html.unescape(value)
    chosen = re.search(r'<option value="([^"]*)" selected>', form)
    kept["name"] = html.unescape(chosen.group(1)) if chosen else ""
    checked = re.search(r'name="when" value="(\w+)" checked', form)
    kept["when"] = checked.group(1) if checked else ""
    return kept


def test_the_form_offers_every_registered_name_as_text(page: Any, web_app: App) -> None:
    shown = page.get(NEW)
    assert shown.status_code == 200 and 'data-refresh="0"' in shown.text
    offered = [html.unescape(n) for n in re.findall(r'<option value="([^"]*)"', shown.text) if n]
    assert offered == web_app.registry.names()
    assert str(escape(EVIL_NAME)) in shown.text and "<script>alert" not in shown.text
    assert shown.text.count("<script") == 1  # only the dashboard's own script
    assert 'name="when" value="now" checked' in shown.text
    failing = web_app.schedule("web.fail", delay=600)
    assert 'href="/tasks/new?name=web.fail"' in page.get(f"/tasks/{failing.id}").text  # "Schedule another"
    chosen = page.get(NEW, params={"name": "web.fail"}).text
    assert '<option value="web.fail" selected>' in chosen
    unknown = page.get(NEW, params={"name": "web.nope"}).text
    assert re.findall(r'<option value="([^"]*)" selected>', unknown) == [""]  # an unknown name: none chosen
    for path in ("/tasks", "/"):
        assert 'href="/tasks/new"' in page.get(path).text


@pytest.mark.parametrize(
    ("typed", "expect"),
    [
        ({}, {"kind": Kind.ONE_TIME, "due_in": 0}),
        ({"when": "delay", "delay": "600"}, {"kind": Kind.ONE_TIME, "due_in": 600}),
        (
            {"when": "at", "at": "2030-01-01T09:00:00+01:00"},
            {"kind": Kind.ONE_TIME, "at": datetime(2030, 1, 1, 8, tzinfo=UTC)},
        ),
        (
            {"when": "cron", "cron": "30 9 * * 1-5", "timezone": "Europe/Berlin"},
            {"kind": Kind.RECURRING, "cron": "30 9 * * 1-5"},
        ),
        ({"when": "every", "every": "90"}, {"kind": Kind.RECURRING, "interval": 90.0}),
    ],
)
def test_a_good_form_schedules_the_task_and_shows_it(
    page: Any, web_app: App, typed: dict[str, str], expect: dict[str, Any]
) -> None:
    before = datetime.now(UTC)
    done = post(page, name="web.ok", args='[1, "two"]', kwargs='{"value": {"to": "a@b.c"}}', priority="3", **typed)
    assert done.status_code == 303, done.text
    [task] = web_app.tasks()
    assert done.headers["location"] == f"/tasks/{task.id}?done=scheduled"
    assert (task.name, task.args, task.kwargs, task.priority) == ("web.ok", [1, "two"], {"value": {"to": "a@b.c"}}, 3)
    assert task.kind is expect["kind"] and task.status is Status.PENDING and task.key is None
    if "due_in" in expect:
        assert before + timedelta(seconds=expect["due_in"] - 5) <= task.next_run_at
        assert task.next_run_at <= datetime.now(UTC) + timedelta(seconds=expect["due_in"] + 5)
    if "at" in expect:
        assert task.scheduled_at == expect["at"]
    if "cron" in expect:
        assert (task.cron, task.timezone) == (expect["cron"], "Europe/Berlin")
    if "interval" in expect:
        assert task.interval == expect["interval"] and task.cron is None
    shown = page.get(done.headers["location"]).text
    assert "Scheduled." in shown and 'id="task-status">PENDING' in shown


def test_a_held_key_shows_the_task_that_holds_it(page: Any, web_app: App) -> None:
    first = post(page, name="web.ok", key="nightly", max_retries="4", when="every", every="3600")
    assert first.status_code == 303
    [task] = web_app.tasks()
    assert task.key == "nightly" and task.max_retries == 4
    again = post(page, name="web.ok", key="nightly", when="delay", delay="5")
    assert again.status_code == 303 and again.headers["location"] == f"/tasks/{task.id}?done=existed"
    assert web_app.tasks() == [task]  # unchanged, nothing new
    assert "already held this key" in page.get(again.headers["location"]).text


@pytest.mark.parametrize(
    ("typed", "field", "reason"),
    [
        ({"args": "[1,"}, "args", "not valid JSON"),
        ({"args": '{"a": 1}'}, "args", "must be a JSON array"),
        ({"kwargs": "{'value': 1}"}, "kwargs", "not valid JSON"),
        ({"kwargs": "[1]"}, "kwargs", "must be a JSON object"),
        ({"kwargs": '{"unexpected": 1}'}, "kwargs", "unexpected argument"),
        ({"args": "[" * 100_000}, "args", "nested too deeply"),
        ({"kwargs": '{"value": "' + "x" * 5000 + '"}'}, "kwargs", "max_payload"),
        ({"when": "cron", "cron": "61 * * * *"}, "cron", "minute field"),
        ({"when": "cron", "cron": ""}, "cron", "give a cron expression"),
        ({"when": "cron", "cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone", "Mars/Olympus"),
        ({"when": "cron", "cron": "0 9 * * *", "timezone": EVIL}, "timezone", "timezone="),
        ({"when": "delay", "delay": "soon"}, "delay", "must be a number of seconds"),
        ({"when": "delay", "delay": "9" * 5000}, "delay", "must be a number of seconds"),
        ({"when": "at", "at": "2030-01-01 09:00"}, "at", "timezone-aware"),
        ({"when": "every", "every": "0"}, "every", "every="),
        ({"when": "now", "cron": "*/5 * * * *"}, "cron", "choose that under When"),
        ({"when": "tomorrow"}, "when", "must be one of"),
        ({"name": ""}, "name", "choose a registered task"),
        ({"name": "web.nope"}, "name", "web.nope"),
        ({"name": EVIL}, "name", "name="),
        ({"key": "k" * 301}, "key", "at most 300"),
        ({"key": "a\x00b"}, "key", "key="),
        ({"priority": "1.5"}, "priority", "whole number"),
        ({"max_retries": "-1"}, "max_retries", "max_retries"),
    ],
)
def test_a_refused_form_says_why_next_to_the_field_keeps_the_input_and_stores_nothing(
    page: Any, web_app: App, typed: dict[str, str], field: str, reason: str
) -> None:
    refused = post(page, **{"name": "web.ok", **typed})
    assert refused.status_code == 400, refused.text
    error = error_of(refused.text)
    assert error.startswith(f"{field}=") and reason in error, error
    assert re.search(rf'name="{field}"[^>]*aria-invalid="true"', refused.text) or field == "when", refused.text
    kept = kept_of(refused.text)
    for name, value in typed.items():
        if name not in ("name", "when") and len(value) < 1000:  # a select or radio offers its choices only
            assert kept[name] == value.replace("\x00", "\ufffd"), name
    assert "<script>alert" not in refused.text and refused.text.count("<script") == 1
    assert 'data-refresh="0"' in refused.text  # what was typed is not refreshed away
    assert web_app.tasks() == []


def test_typed_markup_is_shown_as_text(page: Any, web_app: App) -> None:
    refused = post(page, name="web.ok", kwargs=f'{{"value": "{EVIL}"', when="cron", cron=EVIL)
    assert refused.status_code == 400
    assert str(escape(f'{{"value": "{EVIL}"')) in refused.text and "<script>alert" not in refused.text
    assert web_app.tasks() == []


def test_a_post_needs_the_session_and_its_csrf_token(web_app: App) -> None:
    good = {"name": "web.ok", "args": "[]", "kwargs": "{}", "when": "now"}
    with client_of(web_app, token=TOKEN) as anonymous:
        away = anonymous.post(NEW, data={**good, "csrf": "x"}, follow_redirects=False)
        assert away.status_code == 303 and away.headers["location"] == f"/login?next={NEW}"
        assert anonymous.get(NEW, follow_redirects=False).headers["location"] == f"/login?next={NEW}"
    with client_of(web_app, token=TOKEN, public_read=True) as reader:
        assert 'href="/tasks/new"' not in reader.get("/tasks").text and 'href="/tasks/new"' not in reader.get("/").text
        assert reader.get(NEW, follow_redirects=False).status_code == 303
        assert reader.post(NEW, data={**good, "csrf": "x"}, follow_redirects=False).status_code == 303
    with client_of(web_app, token=TOKEN) as client:
        token = csrf_of(signed_in(client).get(NEW).text)
        other = Auth(TOKEN).session(Auth(TOKEN).new_session())
        assert other is not None
        for bad in ["", "0" * 64, other.csrf, token[:-1]]:
            refused = client.post(NEW, data={**good, "csrf": bad}, follow_redirects=False)
            assert refused.status_code == 403 and "The form expired" in refused.text
        assert client.post(NEW, data=good, follow_redirects=False).status_code == 403  # no token at all
        assert web_app.tasks() == []
        assert client.post(NEW, data={**good, "csrf": token}, follow_redirects=False).status_code == 303
    assert len(web_app.tasks()) == 1


def test_a_full_queue_says_so_and_stores_nothing(page: Any, web_app: App) -> None:
    web_app.max_pending = 1
    assert post(page, name="web.ok").status_code == 303
    full = post(page, name="web.ok", kwargs='{"value": 2}')
    assert full.status_code == 429 and "max_pending=1" in error_of(full.text)
    assert kept_of(full.text)["kwargs"] == '{"value": 2}'
    assert len(web_app.tasks()) == 1


def test_a_server_without_a_token_is_read_only(web_app: App) -> None:
    with client_of(web_app, token=None) as client:
        client.base_url = "http://127.0.0.1"  # without a token, only a loopback name is answered
        shown = client.get(NEW, follow_redirects=False)
        assert shown.status_code == 403 and "read-only" in shown.text and 'action="/tasks/new"' not in shown.text
        posted = client.post(NEW, data={"name": "web.ok", "when": "now", "csrf": "x"}, follow_redirects=False)
        assert posted.status_code == 403
    assert web_app.tasks() == []
