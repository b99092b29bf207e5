"""The read commands, driven as a user drives them: ``tasks list`` (newest first, its
filters and pages), ``tasks show ID`` and ``executions ID`` (a run's full error, its
traceback, result, duration and lateness), every line within 80 columns, ``--json`` on
every read command, and bad filter values refused in one line (exit 2)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from tests.apps.basic import app as basic_app
from tests.workers import ROOT
from tickwork import App
from tickwork.cli import common as cli
from tickwork.cli import main
from tickwork.model import ErrorInfo, ExecutionStatus, Kind, Status
from tickwork.schedules import outcome_of

LONG_NAME = "reports." + "very_long_task_name_" * 6
LONG_KEY = "key-" + "k" * 120
NODE = "node-" + "n" * 60
MESSAGE = "could not reach the upstream service: " + " ".join(f"word{i}" for i in range(60)) + " THE-END"
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/jobs.py", line 12, in run\n'
    "    fetch(" + ", ".join(f"argument_{i}" for i in range(20)) + ")\n"
    f"ValueError: {MESSAGE}\n"
)
Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Run]:
    """The command line on a fresh database of each store kind: (exit code, stdout, all
    output). The console is wider than 80 columns, as on a wide terminal."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("TICKWORK_DB", store_url)
    monkeypatch.setattr(cli, "console", Console(width=200))
    basic_app.close()
    runner = CliRunner()

    def invoke(*args: str) -> tuple[int, str, str]:
        result = runner.invoke(main, list(args))
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        return result.exit_code, result.stdout, result.output

    yield invoke
    basic_app.close()


@pytest.fixture
def app(store_url: str) -> Iterator[App]:
    """An App on the same database, with a task of a very long name registered."""
    app = App(store_url)
    app.task(name=LONG_NAME)(lambda ctx: None)
    yield app
    app.close()


def ok(result: tuple[int, str, str]) -> str:
    code, out, output = result
    assert code == 0, output
    return out


def fitted(out: str) -> list[str]:
    """The output's lines, each asserted to fit in 80 columns."""
    lines = out.rstrip("\n").splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    return lines


def words(lines: list[str]) -> str:
    """The lines' text with the folding undone (indents and line breaks as spaces)."""
    return " ".join(" ".join(line.split()) for line in lines)


def one_run(app: App, task_id: int, status: ExecutionStatus, **details: Any) -> None:
    """Claim task ``task_id`` as a node would and end its run: started 2.5 s after its
    slot, 1.25 s long."""
    [claim] = app.store.claim(NODE, [app.get(task_id).name], 1, 30.0)
    assert claim.task.id == task_id
    started = claim.scheduled_for + timedelta(seconds=2.5)
    outcome = outcome_of(claim, status, started + timedelta(seconds=1.25), started_at=started, **details)
    assert app.store.finish(NODE, [outcome]) == [True]


def test_a_failed_run_shows_its_full_error_and_on_request_its_traceback(run: Run, app: App) -> None:
    task = app.schedule(LONG_NAME, key=LONG_KEY, max_retries=0)
    one_run(app, task.id, ExecutionStatus.FAILED, error=ErrorInfo("ValueError", MESSAGE, TRACEBACK))
    for command in (["executions", str(task.id)], ["tasks", "show", str(task.id)]):
        lines = fitted(ok(run(*command)))
        assert f"error: ValueError: {MESSAGE}" in words(lines), command
        assert not any("Traceback" in line for line in lines)
        with_traceback = fitted(ok(run(*command, "--traceback")))
        text = words(with_traceback)
        assert "Traceback (most recent call last):" in text and "argument_19)" in text
        assert f"ValueError: {MESSAGE}" in text.partition("traceback:")[2]
    [row] = json.loads(ok(run("executions", str(task.id), "--json")))
    assert row["error"] == {"type": "ValueError", "message": MESSAGE, "traceback": TRACEBACK}
    assert row["status"] == "FAILED" and row["node"] == NODE


def test_a_run_shows_its_result_duration_and_lateness(run: Run, app: App) -> None:
    task = app.schedule(LONG_NAME)
    one_run(app, task.id, ExecutionStatus.COMPLETED, result={"rows": 3, "name": "ü"})
    lines = fitted(ok(run("executions", str(task.id))))
    assert lines[0].split()[:6] == ["id", "try", "scheduled", "for", "(UTC)", "status"]
    row = lines[1].split()
    assert row[0] == "1" and row[1] == "1" and row[4:7] == ["COMPLETED", "1.250s", "2.500s"], lines
    assert 'run 1 result: {"name": "ü", "rows": 3}' in lines
    shown = fitted(ok(run("tasks", "show", str(task.id))))
    assert "latest runs:" in shown and any("1.250s  2.500s" in line for line in shown)
    [data] = json.loads(ok(run("executions", str(task.id), "--json")))
    assert data["result"] == {"rows": 3, "name": "ü"}
    assert data["duration"] == pytest.approx(1.25) and data["lateness"] == pytest.approx(2.5)
    for field in ("scheduled_for", "started_at", "finished_at"):
        assert datetime.fromisoformat(data[field]).utcoffset() == timedelta(0)


def _listed(run: Run, *options: str) -> list[int]:
    return [t["id"] for t in json.loads(ok(run("tasks", "list", "--json", *options)))]


def test_list_is_newest_first_with_filters_limit_and_offset(run: Run, app: App) -> None:
    for _ in range(3):
        app.schedule(LONG_NAME, delay=3600)  # 1, 2, 3
    app.task(name="short.one")(lambda ctx: None)
    app.schedule("short.one", every=3600)  # 4
    app.schedule(LONG_NAME, cron="0 9 * * *")  # 5
    app.cancel(2)
    assert _listed(run) == [5, 4, 3, 2, 1]
    assert _listed(run, "--kind", "RECURRING") == [5, 4]
    assert _listed(run, "--kind", "one_time") == [3, 2, 1]
    assert _listed(run, "--status", "CANCELLED") == [2]
    assert _listed(run, "--status", "pending", "--kind", "ONE_TIME") == [3, 1]
    assert _listed(run, "--name", "short.one") == [4]
    assert _listed(run, "--limit", "2") == [5, 4]
    assert _listed(run, "--limit", "2", "--offset", "1") == [4, 3]
    assert _listed(run, "--offset", "5") == []
    lines = fitted(ok(run("tasks", "list", "--limit", "3", "--offset", "1")))
    assert lines[0].split()[:3] == ["id", "name", "schedule"]
    assert [line.split()[0] for line in lines[1:]] == ["4", "3", "2"]
    assert "no tasks on this page" in ok(run("tasks", "list", "--offset", "9"))


def test_every_line_fits_80_columns_with_long_names_keys_and_errors(run: Run, app: App) -> None:
    long_kwargs = {"recipient": "x" * 300}
    app.task(name="mail." + "m" * 150)(lambda ctx, recipient: None)
    task = app.schedule("mail." + "m" * 150, kwargs=long_kwargs, key=LONG_KEY, cron="*/5 * * * *",
                        timezone="America/Argentina/ComodRivadavia")  # fmt: skip
    app.schedule(LONG_NAME, key=LONG_KEY + "-2")
    one_run(app, 2, ExecutionStatus.FAILED, error=ErrorInfo("Very" * 20 + "Error", MESSAGE * 3, TRACEBACK))
    listing = fitted(ok(run("tasks", "list")))
    assert len(listing) == 3 and all("…" in line for line in listing[1:])  # cut cells, one line a task
    assert listing[1].split()[0] == "2" and listing[2].split()[0] == str(task.id)
    for command in (["tasks", "show", "1"], ["tasks", "show", "2", "--traceback"], ["executions", "2", "--traceback"]):
        out = fitted(ok(run(*command)))
        assert out, command
    shown = words(fitted(ok(run("tasks", "show", "1"))))
    assert "x" * 50 in shown.replace(" ", "").replace("│", "")  # a long value is folded, not lost
    assert MESSAGE * 3 in words(fitted(ok(run("executions", "2"))))


def test_json_on_every_read_command(run: Run, app: App) -> None:
    task = app.schedule(LONG_NAME, cron="30 2 * * *", timezone="Europe/Berlin")
    one_run_later = app.schedule(LONG_NAME)
    one_run(app, one_run_later.id, ExecutionStatus.COMPLETED, result=[1, 2])
    [first, second] = json.loads(ok(run("tasks", "list", "--json")))
    assert first["id"] == one_run_later.id and second == app.get(task.id).to_dict()
    assert second["kind"] == Kind.RECURRING.value and second["created_at"].endswith("+00:00")
    shown = json.loads(ok(run("tasks", "show", str(task.id), "--json")))
    assert shown["task"]["cron"] == "30 2 * * *" and len(shown["next_fire_times"]) == 5
    assert all(datetime.fromisoformat(t).tzinfo is not None for t in shown["next_fire_times"])
    assert shown["executions"] == []
    done = json.loads(ok(run("tasks", "show", str(one_run_later.id), "--json")))
    assert done["task"]["status"] == Status.COMPLETED.value and done["next_fire_times"] == []
    assert done["executions"][0]["result"] == [1, 2] and done["executions"][0]["duration"] == pytest.approx(1.25)
    stats = json.loads(ok(run("stats", "--json")))
    assert stats["by_status"] == {"PENDING": 1, "COMPLETED": 1}
    cron = json.loads(ok(run("cron", "30 2 * * *", "--timezone", "Europe/Berlin", "--after", "2026-07-01T00:00Z",
                             "-n", "2", "--json")))  # fmt: skip
    assert cron["fire_times"] == ["2026-07-01T00:30:00+00:00", "2026-07-02T00:30:00+00:00"]
    assert cron["explanation"] and cron["timezone"] == "Europe/Berlin"


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (["tasks", "list", "--status", "DONE"], "--status='DONE': expected one of PENDING, RUNNING"),
        (["tasks", "list", "--kind", "WEEKLY"], "--kind='WEEKLY': expected one of ONE_TIME, RECURRING"),
        (["tasks", "list", "--offset", "-1"], "--offset='-1': expected a whole number, 0 or more"),
        (["tasks", "list", "--offset", "x"], "--offset='x': expected a whole number"),
        (["tasks", "list", "--limit", "0"], "--limit='0': expected a whole number, from 1 to 10000"),
        (["executions", "1", "--limit", "-5"], "--limit='-5'"),
        (["tasks", "show", "1", "--runs", "0"], "--runs='0'"),
    ],
)
def test_bad_filter_values_are_one_line_errors_naming_the_option(
    run: Run, app: App, options: list[str], needle: str
) -> None:
    app.schedule(LONG_NAME, delay=60)
    code, _, output = run(*options)
    assert code == 2 and output.startswith(f"Error: {needle}") and len(output.strip().splitlines()) == 1, output


def test_the_newest_page_is_the_newest_however_many_tasks_there_are(run: Run, app: App) -> None:
    for _ in range(4):
        app.schedule(LONG_NAME, delay=3600)
    code, out, _ = run("tasks", "list", "--json", "--limit", "2")
    assert code == 0 and [t["id"] for t in json.loads(out)] == [4, 3]  # read newest first by the store
    code, out, _ = run("tasks", "list", "--json", "--limit", "2", "--offset", "2")
    assert code == 0 and [t["id"] for t in json.loads(out)] == [2, 1]
