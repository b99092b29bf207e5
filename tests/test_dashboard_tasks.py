"""The dashboard's tasks list and task page, through the real ASGI app on each store:
Cancel asks first and only the confirmed post cancels; the list sorts (newest first by
default, by a column's link) and filters by kind, leniently; the "next run" column says
"paused" or "running since" rather than a past time, and "—" for an ended task."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.http_support import TOKEN, client_of, run_worker_until, wait_until
from tests.test_dashboard_schedule import csrf_of, signed_in
from tests.test_http_api import corrupt, corruptions
from tickwork import App, Status
from tickwork.web.dashboard import task_order


@pytest.fixture
def page(web_app: App) -> Iterator[Any]:
    """A signed-in dashboard client."""
    with client_of(web_app, token=TOKEN) as client:
        yield signed_in(client)


def listed(text: str) -> list[int]:
    """The task ids of a page's task table, in order."""
    return [int(i) for i in re.findall(r'<tr data-task-id="(\d+)"', text)]


def next_cell(text: str, task_id: int) -> str:
    """The text of a task's "next run" cell in a task table."""
    row = re.search(rf'<tr data-task-id="{task_id}">(.*?)</tr>', text, re.S)
    assert row, text
    cell = re.search(r'<td class="nowrap next"[^>]*>(.*?)</td>', row.group(1), re.S)
    assert cell, row.group(1)
    return " ".join(re.sub(r"<[^>]+>", "", cell.group(1)).split())


def claim(app: App, task_id: int) -> None:
    """Claim the due task ``task_id`` on a node of our own: it is RUNNING. (Scheduled
    "now" by the App's estimate of the database's clock, it may be due a moment later.)"""
    claimed: list[Any] = []
    wait_until(lambda: claimed.extend(app.store.claim("node-x", ["web.wait"], 1, 30.0)) or claimed, 10.0)
    assert claimed[0].task.id == task_id


# -- cancel, confirmed ---------------------------------------------------------------------------


def test_cancel_asks_first_and_only_the_confirmed_post_cancels(page: Any, web_app: App) -> None:
    task = web_app.schedule("web.ok", delay=600)
    url = f"/tasks/{task.id}"
    token = csrf_of(page.get(url).text)
    for unconfirmed in ({"csrf": token}, {"csrf": token, "confirm": ""}, {"csrf": token, "confirm": "no"}):
        asked = page.post(f"{url}/cancel", data=unconfirmed, follow_redirects=False)
        assert asked.status_code == 200 and web_app.get(task.id).status is Status.PENDING
    assert f"Cancel task {task.id} (" in asked.text and "web.ok" in asked.text
    assert "It is PENDING, due" in asked.text and "it will not run." in asked.text
    assert 'name="confirm" value="yes"' in asked.text and f'href="{url}"' in asked.text  # Confirm / Back
    assert 'data-refresh="0"' in asked.text
    assert page.get(f"{url}/cancel").text.count('name="confirm" value="yes"') == 1  # the same question by GET
    assert web_app.get(task.id).status is Status.PENDING
    forged = page.post(f"{url}/cancel", data={"csrf": "forged", "confirm": "yes"})
    assert forged.status_code == 403 and web_app.get(task.id).status is Status.PENDING
    done = page.post(f"{url}/cancel", data={"csrf": token, "confirm": "yes"}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == f"{url}?done=cancel"
    assert web_app.get(task.id).status is Status.CANCELLED
    ended = page.post(f"{url}/cancel", data={"csrf": token})  # an old page's button
    assert ended.status_code == 409 and "nothing to cancel" in ended.text and 'name="confirm"' not in ended.text


def test_the_question_says_what_a_cancel_stops(page: Any, web_app: App) -> None:
    running = web_app.schedule("web.wait")
    claim(web_app, running.id)
    paused = web_app.schedule("web.ok", every=60)
    web_app.pause(paused.id)
    cron = web_app.schedule("web.ok", cron="0 9 * * *")
    token = csrf_of(page.get("/tasks").text)
    texts = {t.id: page.post(f"/tasks/{t.id}/cancel", data={"csrf": token}).text for t in (running, paused, cron)}
    assert "It is RUNNING: its run will be interrupted" in texts[running.id]
    assert "It is PAUSED: it will not run again" in texts[paused.id]
    assert "none of its slots will run again" in texts[cron.id]
    assert [web_app.get(t).status for t in texts] == [Status.RUNNING, Status.PAUSED, Status.PENDING]
    done = page.post(f"/tasks/{running.id}/cancel", data={"csrf": token, "confirm": "yes"})
    assert done.status_code == 200 and web_app.get(running.id).cancel_requested
    assert page.get("/tasks/999999/cancel").status_code == 404 and page.get("/tasks/abc/cancel").status_code == 404


def test_the_question_needs_a_session(web_app: App) -> None:
    task = web_app.schedule("web.ok", delay=600)
    with client_of(web_app, token=TOKEN, public_read=True) as reader:
        away = reader.get(f"/tasks/{task.id}/cancel", follow_redirects=False)
        assert away.status_code == 303 and away.headers["location"] == f"/login?next=/tasks/{task.id}/cancel"
        assert (
            reader.post(f"/tasks/{task.id}/cancel", data={"confirm": "yes"}, follow_redirects=False).status_code == 303
        )
    assert web_app.get(task.id).status is Status.PENDING


# -- sorting and the kind filter ------------------------------------------------------------------


@pytest.fixture
def mixed(web_app: App) -> dict[str, int]:
    """Tasks of every kind, status and due time, scheduled in this order (ids ascending)."""
    ids = {
        "b-later": web_app.schedule("web.ok", delay=200_000).id,  # after the cron's next slot
        "a-cron": web_app.schedule("web.fail", cron="0 9 * * *").id,
        "c-soon": web_app.schedule("web.ok", delay=60).id,
        "d-paused": web_app.schedule("web.wait", every=600).id,
        "e-cancelled": web_app.schedule("web.ok", delay=10).id,
    }
    web_app.pause(ids["d-paused"])
    web_app.cancel(ids["e-cancelled"])
    return ids


def test_the_list_is_newest_first_and_sorts_by_a_column(page: Any, web_app: App, mixed: dict[str, int]) -> None:
    ids = sorted(mixed.values())
    default = page.get("/tasks").text
    assert listed(default) == ids[::-1]
    assert listed(page.get("/tasks?sort=oldest").text) == ids
    by_name = listed(page.get("/tasks?sort=name").text)
    assert by_name == sorted(ids, key=lambda i: (web_app.get(i).name, -i))  # ties newest first
    statuses = [web_app.get(i).status.value for i in listed(page.get("/tasks?sort=status").text)]
    assert statuses == sorted(statuses)
    by_next = listed(page.get("/tasks?sort=next").text)
    assert by_next[:3] == [mixed["c-soon"], mixed["a-cron"], mixed["b-later"]]  # pending, soonest first
    assert by_next[3:] == [mixed["d-paused"], mixed["e-cancelled"]]  # then paused, then ended
    for column in ("next", "name", "status"):
        assert f'href="/tasks?sort={column}"' in default  # the headers' links
    assert 'href="/tasks?sort=oldest"' in default and 'aria-sort="descending"' in default
    kept = page.get("/tasks?status=PENDING&sort=name").text
    assert 'href="/tasks?status=PENDING&amp;sort=next"' in kept  # a header link keeps the filters
    assert listed(kept) == sorted(
        [mixed["b-later"], mixed["c-soon"], mixed["a-cron"]], key=lambda i: (web_app.get(i).name, -i)
    )


def test_the_kind_filter_and_bad_values(page: Any, web_app: App, mixed: dict[str, int]) -> None:
    recurring = {mixed["a-cron"], mixed["d-paused"]}
    assert set(listed(page.get("/tasks?kind=recurring").text)) == recurring
    assert set(listed(page.get("/tasks?kind=RECURRING&sort=oldest").text)) == recurring
    assert set(listed(page.get("/tasks?kind=one-time&sort=name").text)) == set(mixed.values()) - recurring
    assert listed(page.get("/tasks?kind=ONE_TIME").text) == sorted(set(mixed.values()) - recurring, reverse=True)
    bad = page.get("/tasks?kind=weekly&sort=sideways")
    assert bad.status_code == 200 and "Unknown kind ignored." in bad.text and "Unknown sort ignored" in bad.text
    assert listed(bad.text) == sorted(mixed.values(), reverse=True)
    assert page.get("/tasks?sort=%00&kind=%ff").status_code == 200


def test_pages_of_a_sorted_list(page: Any, web_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tickwork.web.dashboard.task_list.PAGE_SIZE", 3)
    monkeypatch.setattr(task_order, "WINDOW", 5)
    ids = [web_app.schedule("web.ok", delay=600 - i).id for i in range(7)]  # each due a second before the last
    first = page.get("/tasks?sort=next").text
    assert listed(first) == ids[-1:-4:-1] and "among the newest 5 matching tasks" in first
    assert 'href="/tasks?sort=next&amp;offset=3"' in first
    second = page.get("/tasks?sort=next&offset=3").text
    assert listed(second) == ids[-4:-6:-1] and "next →" not in second
    newest = page.get("/tasks?offset=3").text
    assert listed(newest) == ids[-4:-7:-1] and "among the newest" not in newest


# -- the next-run column --------------------------------------------------------------------------


def test_paused_running_and_ended_tasks_show_no_past_time_as_their_next_run(page: Any, web_app: App) -> None:
    paused = web_app.schedule("web.ok", at=datetime.now(UTC) - timedelta(minutes=5), every=3600)
    web_app.pause(paused.id)
    due = web_app.get(paused.id).next_run_at
    running = web_app.schedule("web.wait")
    claim(web_app, running.id)
    [run] = web_app.executions(running.id)
    assert run.started_at is not None
    done = web_app.schedule("web.ok", delay=3600)
    web_app.cancel(done.id)
    pending = web_app.schedule("web.ok", delay=3600)
    ahead = web_app.pause(web_app.schedule("web.ok", delay=7200).id)  # paused before its slot came
    since = f"running since {run.started_at:%Y-%m-%d %H:%M:%S} UTC"
    for path in ("/tasks", "/"):
        shown = page.get(path).text
        assert next_cell(shown, paused.id) == f"paused (was due {due:%Y-%m-%d %H:%M:%S} UTC)"
        assert next_cell(shown, running.id) == since
        assert next_cell(shown, done.id) == "—"
        assert next_cell(shown, ahead.id) == f"paused (next slot {ahead.next_run_at:%Y-%m-%d %H:%M:%S} UTC)"
        assert next_cell(shown, pending.id) == f"{web_app.get(pending.id).next_run_at:%Y-%m-%d %H:%M:%S} UTC"
    assert re.search(r'id="task-next">paused', page.get(f"/tasks/{paused.id}").text)
    assert re.search(rf'id="task-next">{since}', page.get(f"/tasks/{running.id}").text)
    assert re.search(r'id="task-next">—', page.get(f"/tasks/{done.id}").text)
    web_app.cancel(running.id)
    assert "(cancelling)" in next_cell(page.get("/tasks").text, running.id)


def test_a_completed_task_shows_no_next_run(page: Any, web_app: App) -> None:
    task = web_app.schedule("web.ok")
    run_worker_until(web_app, lambda: web_app.get(task.id).status is Status.COMPLETED)
    assert next_cell(page.get("/tasks").text, task.id) == "—"


def test_a_row_that_cannot_be_decoded_keeps_its_place_in_every_order(page: Any, web_app: App, store_url: str) -> None:
    ids = [web_app.schedule("web.ok", delay=600).id for _ in range(3)]
    recurring = web_app.schedule("web.ok", every=600).id
    column, value = corruptions(store_url)[0]
    corrupt(store_url, ids[1], column, value)
    newest = page.get("/tasks")
    assert newest.status_code == 200 and listed(newest.text) == [recurring, *ids[::-1]]  # exact, newest first
    assert f'<tr data-task-id="{ids[1]}" class="undecodable">' in newest.text
    assert "A stored row cannot be decoded" not in newest.text  # no degraded order: it is exact
    assert f'data-task-id="{ids[1]}" class="undecodable"' in page.get("/").text
    for path in ("/tasks?kind=ONE_TIME", "/tasks?sort=name", "/tasks?sort=status&kind=ONE_TIME", "/tasks?name=web.ok"):
        shown = page.get(path)
        assert shown.status_code == 200, path
        assert f'<tr data-task-id="{ids[1]}" class="undecodable">' in shown.text, path
        assert "A stored row cannot be decoded" in shown.text or "kind" not in path, path
    assert listed(page.get("/tasks?kind=RECURRING").text) == [recurring]  # the store's filter never read that row


# -- lost runs on the task page --------------------------------------------------------------------


def test_the_task_page_says_how_many_lost_runs_are_run_again(page: Any, web_app: App) -> None:
    from tickwork.node.reconciler import reconcile

    task = web_app.schedule("web.wait")
    claimed: list[Any] = []
    wait_until(lambda: claimed.extend(web_app.store.claim("node-x", ["web.wait"], 1, 0.05)) or claimed, 10.0)
    assert claimed[0].task.id == task.id
    wait_until(lambda: reconcile(web_app.store) == 1, 10.0)  # its node "died": the lease ran out
    text = page.get(f"/tasks/{task.id}").text
    assert "run again up to 3 times in a row; 1 so far" in " ".join(text.split())


def test_the_task_list_filters_by_queue_on_the_page_and_the_api(
    page: Any, api: Any, web_app: App, store_url: str
) -> None:
    """Issue 17: the queue is a column and a filter of the tasks page and of GET /tasks,
    a bad one is a note (page) or a 422 naming it (API), and a row that cannot be decoded
    keeps its place in its queue's list."""
    from tests.http_support import AUTH, V1, problem

    emails = [web_app.schedule("web.ok", delay=600, queue="emails").id for _ in range(3)]
    other = web_app.schedule("web.ok", delay=600).id
    shown = page.get("/tasks?queue=emails")
    assert shown.status_code == 200 and listed(shown.text) == emails[::-1]
    assert "<td>emails</td>" in shown.text and 'value="emails"' in shown.text
    assert listed(page.get("/tasks?queue=default").text) == [other]
    assert listed(page.get("/tasks?queue=emails&sort=oldest").text) == emails
    bad = page.get("/tasks?queue=" + "no%20spaces")
    assert bad.status_code == 200 and "Filter ignored" in bad.text and "queue" in bad.text
    assert listed(bad.text) == [other, *emails[::-1]]  # the filter dropped, nothing else
    found = api.get(f"{V1}/tasks", params={"queue": "emails"}, headers=AUTH)
    assert found.status_code == 200 and [t["id"] for t in found.json()["items"]] == emails
    assert {t["queue"] for t in found.json()["items"]} == {"emails"}
    problem(api.get(f"{V1}/tasks", params={"queue": "a b"}, headers=AUTH), 422, "queue")
    problem(api.get(f"{V1}/tasks", params={"queue": "x" * 101}, headers=AUTH), 422, "queue")
    column, value = corruptions(store_url)[0]
    corrupt(store_url, emails[1], column, value)
    mixed = api.get(f"{V1}/tasks", params={"queue": "emails"}, headers=AUTH).json()["items"]
    assert [t["id"] for t in mixed] == emails and "reason" in mixed[1]
    assert f'<tr data-task-id="{emails[1]}" class="undecodable">' in page.get("/tasks?queue=emails").text
