"""The dashboard's insights through the real ASGI app on each store: the task names page
and the task page's statistics, the throughput chart (inline SVG), the runs page's
filters (and what a bad filter says), the tasks each node runs, and the narrow-screen
rule of the runs tables. Runs are made as in tests/test_store_insights.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
from markupsafe import escape

from tests.http_support import EVIL_NAME, TOKEN, client_of
from tests.test_store_insights import A, B, C, F, T, X, ago, ran
from tickwork import App
from tickwork.model import Kind, Node
from tickwork.store import NewTask
from tickwork.web.auth import LOGIN_COOKIE


@pytest.fixture
def api(web_app: App) -> Iterator[Any]:
    with client_of(web_app, token=TOKEN) as client:
        client.get("/login")
        nonce = client.cookies.get(LOGIN_COOKIE)
        client.post("/login", data={"token": TOKEN, "csrf": nonce, "next": "/"}, follow_redirects=False)
        yield client


def some_runs(app: App) -> dict[str, int]:
    """A: 3 of 5 succeeded in the last hour (durations 1 2 3 4 10 s); B: one cancelled;
    an evil name's failed run two hours ago. Returns a task id of each name."""
    store = app.store
    ids = {}
    for status, took, late, seconds in [(C, 1, 0.5, 900), (F, 2, 0.5, 800), (C, 3, 1, 700), (T, 4, 2, 600)]:
        ids[A] = ran(store, A, status, ended=ago(store, seconds), late=late, took=took)
    ran(store, A, C, ended=ago(store, 500), late=3, took=10)
    ids[B] = ran(store, B, X, ended=ago(store, 300), late=0, took=0.25)
    ids[EVIL_NAME] = ran(store, EVIL_NAME, F, ended=ago(store, 7200), late=1, took=1)
    return ids


def row_of(page: str, name: str) -> str:
    found = re.search(rf'<tr data-name="{re.escape(str(escape(name)))}">(.*?)</tr>', page, re.S)
    assert found, page
    return found.group(1)


def cells(row: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def test_the_names_page_shows_each_name_over_the_hour_and_the_day(api: Any, web_app: App) -> None:
    some_runs(web_app)
    page = api.get("/names")
    assert page.status_code == 200 and "script-src 'self'" in page.headers["content-security-policy"]
    hour, day = page.text.split("<h3>Last day</h3>")
    assert "<h3>Last hour</h3>" in hour
    assert cells(row_of(hour, A)) == [A, "5", "60 %", "2", "3 s", "8.8 s", "1 s", "2.8 s", cells(row_of(hour, A))[-1]]
    assert cells(row_of(hour, A))[-1].endswith("UTC")
    assert cells(row_of(hour, B))[1:4] == ["1", "0 %", "0"] and "none in this window" in row_of(hour, B)
    assert escape(EVIL_NAME) not in hour and str(escape(EVIL_NAME)) in day  # ended two hours ago
    assert EVIL_NAME not in page.text and page.text.count("<script") == 1
    assert f'href="/runs?name={quote(A)}"' in hour
    assert 'href="/names" aria-current="page"' in page.text


def test_the_throughput_chart_is_inline_svg_with_words(api: Any, web_app: App) -> None:
    some_runs(web_app)
    for path in ["/", "/names"]:
        page = api.get(path).text
        svg = re.search(r'<svg [^>]*id="throughput".*?</svg>', page, re.S)
        assert svg, path
        chart = svg.group(0)
        assert 'role="img"' in chart and '<title id="throughput-title">Runs per minute by status' in chart
        assert "3 COMPLETED, 1 CANCELLED, 1 FAILED, 1 TIMED_OUT" in chart  # the <desc>
        bars = re.findall(r'<rect [^>]*class="bar bar-([a-z-]+)"><title>([^<]+)</title>', chart)
        assert sorted(status for status, _ in bars) == [
            "cancelled",
            "completed",
            "completed",
            "completed",
            "failed",
            "timed-out",
        ]
        assert all(re.fullmatch(r"\d\d:\d\d UTC: 1 [A-Z_]+", label) for _, label in bars)
    assert "Queue depth per minute, last hour" in api.get("/").text  # drawn beside it


def test_an_empty_chart_and_tables_say_so(api: Any) -> None:
    page = api.get("/names").text
    assert "No run ended in the last hour." in page and "No run ended in the last day." in page
    assert "<rect" not in page and "no runs" in page


def test_the_task_page_shows_the_statistics_of_its_name(api: Any, web_app: App) -> None:
    ids = some_runs(web_app)
    page = api.get(f"/tasks/{ids[A]}").text
    section = page.split('<section id="name-stats">', 1)[1].split("</section>", 1)[0]
    assert cells(row_of(section, A))[1:4] == ["5", "60 %", "2"] and B not in section
    assert f'href="/runs?name={quote(A)}"' in section
    evil = api.get(f"/tasks/{ids[EVIL_NAME]}").text.split('<section id="name-stats">', 1)[1]
    assert "No run ended in the last hour." in evil and cells(row_of(evil, EVIL_NAME))[1:3] == ["1", "0 %"]


def run_ids(page: str) -> list[int]:
    return [int(n) for n in re.findall(r'<td class="num" data-label="run">(\d+)</td>', page)]


def test_the_runs_page_filters_by_name_status_and_slot(api: Any, web_app: App) -> None:
    some_runs(web_app)
    every = api.get("/runs")
    assert every.status_code == 200 and len(run_ids(every.text)) == 7
    by_name = api.get("/runs", params={"name": A})
    assert len(run_ids(by_name.text)) == 5 and f'value="{A}"' in by_name.text and "Searched the newest" in by_name.text
    assert len(run_ids(api.get("/runs", params={"name": A, "status": "completed"}).text)) == 3
    assert len(run_ids(api.get("/runs", params={"status": "TIMED_OUT"}).text)) == 1
    assert len(run_ids(api.get("/runs", params={"since": "1h"}).text)) == 6
    assert len(run_ids(api.get("/runs", params={"since": "2h30m", "until": "1h"}).text)) == 1
    iso = (web_app.store.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    assert len(run_ids(api.get("/runs", params={"until": iso}).text)) == 1  # no offset: UTC
    assert len(run_ids(api.get("/runs", params={"since": iso + "+00:00"}).text)) == 6
    assert "No runs." in api.get("/runs", params={"name": "nobody"}).text


@pytest.mark.parametrize(
    ("params", "note"),
    [
        ({"status": "nope"}, "Unknown status ignored."),
        ({"since": "yesterday"}, "Bad since ignored"),
        ({"until": "2030-02-30T00:00"}, "Bad until ignored"),
        ({"since": "0001-01-01T00:00:00+01:00"}, "Bad since ignored"),
        ({"since": "9" * 500}, "Bad since ignored"),
        ({"since": "99999999d"}, "Bad since ignored"),
        ({"since": "1h", "until": "2h"}, "since must be before until"),
        ({"name": "a\x00b"}, "Unusable name ignored."),
    ],
)
def test_a_bad_runs_filter_is_named_on_the_page(api: Any, web_app: App, params: dict[str, str], note: str) -> None:
    some_runs(web_app)
    page = api.get("/runs", params=params)
    assert page.status_code == 200 and note in page.text
    assert len(run_ids(page.text)) == 7  # the bad filter dropped, the others kept


def test_the_nodes_page_lists_what_each_node_runs(api: Any, web_app: App) -> None:
    store = web_app.store
    now = store.now()
    for node in ["node-a", "node-b"]:
        store.register_node(Node(node, "host", 1, now, now, 4, 0))
    for name in [A, EVIL_NAME]:
        new = NewTask(
            name=name, args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=ago(store, 5), next_run_at=ago(store, 5)
        )
        store.insert_tasks([new])
    [on_a] = store.claim("node-a", [A], 1, 30.0)
    [gone] = store.claim("node-gone", [EVIL_NAME], 1, 30.0)
    page = api.get("/nodes").text
    row_a = page.split('<tr data-node="node-a">', 1)[1].split("</tr>", 1)[0]
    row_b = page.split('<tr data-node="node-b">', 1)[1].split("</tr>", 1)[0]
    assert f'<a href="/tasks/{on_a.task.id}">{A}</a>' in row_a and "nothing" in row_b
    orphans = page.split("Running on nodes that are gone", 1)[1]
    assert f'href="/tasks/{gone.task.id}">{escape(EVIL_NAME)}</a>' in orphans and EVIL_NAME not in page


def test_runs_tables_stack_on_a_narrow_screen(api: Any, web_app: App) -> None:
    css = api.get("/static/app.css").text
    narrow = css.split("@media (max-width: 600px)", 1)[1]
    assert "table.runs td.detail" in narrow and "flex-basis: 100%" in narrow and "table.runs td.none" in narrow
    some_runs(web_app)
    page = api.get("/runs").text
    assert page.count('class="detail none" data-label="error / note"') == 7  # none has an error: no empty rows


def test_the_overview_draws_the_queue_depth_of_the_last_hour(api: Any, web_app: App) -> None:
    empty = api.get("/").text
    assert 'id="queue-depth-chart"' in empty and "No queue samples in this window" in empty
    store = web_app.store
    due = ago(store, 90)
    store.insert_tasks([NewTask(name=A, args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=due, next_run_at=due)] * 4)
    store.sample_queue()
    page = api.get("/").text
    chart = page.split('id="queue-depth-chart"', 1)[1].split("</svg>", 1)[0]
    assert re.search(r'<rect [^>]*class="bar bar-depth"><title>\d\d:\d\d UTC: 4 due and unclaimed, the oldest', chart)
    assert "at most 4 due and unclaimed" in chart and ">4 due</text>" in chart
