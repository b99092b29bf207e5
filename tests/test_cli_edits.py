"""The commands that edit in place and sync code schedules, driven as a user drives them:
``schedules sync`` / ``schedules list``, ``worker --no-sync``, ``tasks update``,
``tasks retry``, ``schedule --key`` (``--replace``, ``--until``, ``--max-runs``),
durations on every option that takes seconds, and ``tasks show``'s new rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from rich.console import Console

from tests.apps import periodic_app
from tests.apps.basic import app as basic_app
from tests.conftest import wait_for
from tests.workers import ROOT
from tickwork import App
from tickwork.cli import common as cli
from tickwork.cli import main
from tickwork.model import ExecutionStatus, Status, Task
from tickwork.schedules import outcome_of

V1 = "tests.apps.periodic_app:app"
V2 = "tests.apps.periodic_app:app_v2"
BASIC = "tests.apps.basic:app"
Run = Callable[..., tuple[int, str]]
APPS = (basic_app, periodic_app.app, periodic_app.app_v2)


@pytest.fixture
def url(store_url: str) -> str:
    """A fresh database of each store kind (SQLite, PostgreSQL)."""
    return store_url


def _runner(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Run]:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("TICKWORK_DB", db_url)
    monkeypatch.setattr(cli, "console", Console(width=200))
    for app in APPS:
        app.close()  # an imported app re-reads TICKWORK_DB when it next opens its store
    runner = CliRunner()

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(main, list(args))
        assert "Traceback" not in result.output, result.output
        return result.exit_code, result.output

    yield invoke
    for app in APPS:
        app.close()


@pytest.fixture
def run(url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Run]:
    """The command line on a fresh database of each store kind."""
    yield from _runner(url, monkeypatch)


@pytest.fixture
def run1(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Run]:
    """The command line on a fresh SQLite file."""
    yield from _runner(sqlite_url, monkeypatch)


@pytest.fixture
def reader(url: str) -> Iterator[App]:
    app = App(url)
    yield app
    app.close()


def ok(result: tuple[int, str]) -> str:
    code, out = result
    assert code == 0, out
    return out


def lines_of(out: str) -> list[str]:
    lines = out.rstrip("\n").splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    return lines


def by_key(app: App) -> dict[str, Task]:
    return {str(t.key): t for t in app.tasks(limit=100) if t.key is not None and not t.status.is_terminal}


# -- schedules sync / list ----------------------------------------------------------------


def test_sync_creates_updates_removes_and_a_dry_run_changes_nothing(run: Run, reader: App) -> None:
    lines = lines_of(ok(run("schedules", "sync", V1, "--dry-run")))
    assert lines == [
        "+ create     daily   (periodic.report, cron 0 9 * * * (Europe/Berlin))",
        "+ create     tick    (periodic.tick, every 3600 s)",
        "+ create     weekly  (periodic.report, cron 0 8 * * 1 (UTC))",
        "3 schedules: 3 to create",
        "dry run: nothing was changed",
    ]
    assert reader.tasks() == []
    assert lines_of(ok(run("schedules", "sync", V1)))[-1] == "3 schedules: 3 created"
    v1 = by_key(reader)
    assert sorted(v1) == ["daily", "tick", "weekly"] and all(t.origin == "code" for t in v1.values())
    again = lines_of(ok(run("schedules", "sync", V1)))
    assert again[-1] == "3 schedules: 3 unchanged"
    assert f"= unchanged  tick    task {v1['tick'].id}" in again

    planned = lines_of(ok(run("schedules", "sync", V2, "--dry-run")))
    daily, weekly, tick = v1["daily"].id, v1["weekly"].id, v1["tick"].id
    assert planned == [
        f"~ update     daily    task {daily}",
        '    cron: "0 9 * * *" → "0 10 * * *"',
        "    jitter: 0 → 30",
        "+ create     monthly  (periodic.report, cron 0 7 1 * * (UTC))",
        f"= unchanged  tick     task {tick}",
        f"- remove     weekly   task {weekly}",
        "    removed: code no longer declares this schedule",
        "4 schedules: 1 to create, 1 to update, 1 to remove, 1 unchanged",
        "dry run: nothing was changed",
    ]
    assert by_key(reader) == v1  # the dry run wrote nothing

    assert lines_of(ok(run("schedules", "sync", V2)))[-1] == "4 schedules: 1 created, 1 updated, 1 removed, 1 unchanged"
    v2 = by_key(reader)
    assert sorted(v2) == ["daily", "monthly", "tick"]
    assert v2["daily"].id == daily and v2["daily"].cron == "0 10 * * *" and v2["daily"].jitter == 30
    assert reader.get(weekly).status is Status.CANCELLED


def test_an_older_release_is_kept_out_unless_forced_and_json_tells_the_plan(run: Run, reader: App) -> None:
    ok(run("schedules", "sync", V1))
    ok(run("schedules", "sync", V2))
    daily = by_key(reader)["daily"]
    out = ok(run("schedules", "sync", V1))
    lines = lines_of(out)
    assert f"! kept       daily    task {daily.id}" in lines and "written by a newer declaration" in out
    assert by_key(reader)["daily"].cron == "0 10 * * *"

    plan = json.loads(ok(run("schedules", "sync", V1, "--dry-run", "--json")))
    assert plan["dry_run"] is True and plan["counts"] == {"kept": 3, "unchanged": 1}
    assert {c["key"]: c["action"] for c in plan["changes"]}["daily"] == "kept"

    forced = lines_of(ok(run("schedules", "sync", V1, "--force", "--dry-run")))  # the preview of the rollback
    assert forced[-2:] == [
        "4 schedules: 1 to create, 1 to update, 1 to remove, 1 unchanged",
        "dry run: nothing was changed",
    ]
    assert by_key(reader)["daily"].cron == "0 10 * * *"

    plan = json.loads(ok(run("schedules", "sync", V1, "--force", "--json")))
    assert plan["dry_run"] is False and plan["counts"] == {"create": 1, "update": 1, "remove": 1, "unchanged": 1}
    [update] = [c for c in plan["changes"] if c["action"] == "update"]
    assert update["key"] == "daily" and update["fields"]["cron"] == {"old": "0 10 * * *", "new": "0 9 * * *"}
    assert by_key(reader)["daily"].cron == "0 9 * * *" and by_key(reader)["daily"].id == daily.id


def test_a_runtime_task_holding_a_declared_key_is_a_conflict_left_alone(run: Run, reader: App) -> None:
    held = ok(
        run("schedule", V1, "periodic.report", "--kwargs", '{"kind": "mine"}', "--cron", "5 5 * * *", "--key", "daily")
    )
    assert held.startswith("scheduled task 1 ")
    out = ok(run("schedules", "sync", V1))
    assert "! conflict   daily   task 1" in lines_of(out) and "scheduled at runtime: left alone" in out
    assert "1 conflict" in out.splitlines()[-1]
    runtime = reader.get(1)
    assert runtime.origin is None and runtime.cron == "5 5 * * *" and runtime.kwargs == {"kind": "mine"}


def test_list_shows_declared_beside_stored_within_80_columns(run: Run, reader: App) -> None:
    before = lines_of(ok(run("schedules", "list", V1)))
    assert before[0].split() == ["key", "task", "schedule", "stored", "differs"]
    assert all("not stored" in line for line in before[1:]) and len(before) == 4
    ok(run("schedules", "sync", V1))
    ids = {key: task.id for key, task in by_key(reader).items()}
    rows = {line.split()[0]: line for line in lines_of(ok(run("schedules", "list", V2)))[1:]}
    assert rows["daily"].endswith(f"{ids['daily']} PENDING   yes: cron, jitter")
    assert "…" in rows["daily"]  # the schedule column was cut to fit
    assert rows["monthly"].split()[-2:] == ["stored", "-"] and "not stored" in rows["monthly"]
    assert rows["tick"].endswith(f"{ids['tick']} PENDING   no")
    assert rows["weekly"].endswith("stored only") and "cron 0 8 * * 1 (UTC)" in rows["weekly"]
    listed = {r["key"]: r for r in json.loads(ok(run("schedules", "list", V2, "--json")))}
    assert listed["daily"]["fields"] == ["cron", "jitter"] and listed["daily"]["task_id"] == ids["daily"]
    assert listed["weekly"]["declared"] is False and listed["weekly"]["state"] == "remove"
    assert listed["monthly"]["task_id"] is None and listed["monthly"]["schedule"] == "cron 0 7 1 * * (UTC)"
    assert by_key(reader)["daily"].cron == "0 9 * * *"  # listing changed nothing


def test_sync_refuses_a_bad_app_in_one_line(run1: Run) -> None:
    for command in ("sync", "list"):
        code, out = run1("schedules", command, "tests.apps.nosuch:app")
        assert code == 2 and out.startswith("Error: APP=") and len(out.strip().splitlines()) == 1


# -- worker --no-sync ---------------------------------------------------------------------


def _worker(db_url: str, *options: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TICKWORK_DB": db_url}
    command = [sys.executable, "-m", "tickwork.cli", "worker", V1, "--concurrency", "1", *options]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.parametrize("sync", [True, False])
def test_the_worker_syncs_at_start_unless_no_sync(sqlite_url: str, sync: bool) -> None:
    reader = App(sqlite_url)
    reader.store.migrate()  # the file exists before the node starts: the test can watch it
    proc = _worker(sqlite_url, *(() if sync else ("--no-sync",)))
    try:
        wait_for(lambda: reader.nodes(), timeout=30)  # the node starts after its sync
        keys = sorted(by_key(reader))
        assert keys == (["daily", "tick", "weekly"] if sync else [])
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
        reader.close()


# -- tasks update -------------------------------------------------------------------------


def test_update_changes_only_the_options_given(run: Run, reader: App, url: str) -> None:
    ok(run("schedule", BASIC, "test.record", "--cron", "0 9 * * *", "--jitter", "5"))
    before = reader.get(1)
    out = ok(run("--db", url, "tasks", "update", "1", "--cron", "30 6 * * 1-5", "--timezone", "Europe/Berlin",
                 "--timeout", "2h", "--until", "2031-01-01T00:00:00+01:00", "--max-runs", "3"))  # fmt: skip
    lines = lines_of(out)
    assert lines[0] == "task 1 (test.record) updated: cron, max_runs, timeout, timezone, until"
    assert "  schedule: cron 30 6 * * 1-5 (Europe/Berlin)" in lines and "(0 so far)" in out
    task = reader.get(1)
    assert (task.cron, task.timezone, task.timeout, task.max_runs) == ("30 6 * * 1-5", "Europe/Berlin", 7200, 3)
    assert task.until == datetime(2030, 12, 31, 23, tzinfo=UTC)
    assert task.jitter == before.jitter == 5 and task.revision == before.revision + 1
    ok(run("tasks", "update", "1", "--timeout", "none", "--until", "none", "--max-runs", "none", "--jitter", "1m"))
    task = reader.get(1)
    assert (task.timeout, task.until, task.max_runs, task.jitter, task.cron) == (None, None, None, 60, "30 6 * * 1-5")
    ok(run("tasks", "update", "1", "--every", "1h30m", "--kwargs", "{}", "--misfire", "skip", "--overlap", "replace"))
    task = reader.get(1)
    assert (task.cron, task.interval, task.misfire.value, task.overlap.value) == (None, 5400, "SKIP", "replace")


BAD_UPDATES = [
    (["--cron", "61 * * * *"], "cron='61 * * * *'"),
    (["--jitter", "-5"], "'--jitter': '-5': must be 0s or longer"),
    (["--every", "0s"], "'--every': '0s': must be longer than 0s"),
    (["--timeout", "soon"], "'--timeout': 'soon': expected a number of seconds or a duration"),
    (["--kwargs", "{nope"], "kwargs='{nope': not valid JSON"),
    (["--args", '{"a": 1}'], "args="),
    (["--until", "2030-01-01T09:00"], "'--until': '2030-01-01T09:00': give the offset too"),
    (["--max-runs", "0"], "'--max-runs': '0': expected a whole number, 1 or more"),
    (["--timezone", "Mars/Olympus"], "timezone='Mars/Olympus'"),
    (["--max-retries", "-1"], "'--max-retries'"),
    ([], "nothing to change"),
]


@pytest.mark.parametrize(("options", "needle"), BAD_UPDATES)
def test_bad_update_input_is_a_usage_error_and_changes_nothing(
    run1: Run, sqlite_url: str, options: list[str], needle: str
) -> None:
    ok(run1("schedule", BASIC, "test.record", "--cron", "0 9 * * *"))
    reader = App(sqlite_url)
    before = reader.get(1)
    code, out = run1("tasks", "update", "1", *options)
    assert code == 2 and needle in out, out
    assert out.strip().splitlines()[-1].startswith("Error: ")
    assert reader.get(1) == before
    reader.close()


def _run_by_hand(app: App, task_id: int, status: ExecutionStatus | None) -> None:
    """Claim task ``task_id`` as a node would (no node runs); end its run with ``status``."""
    [claim] = app.store.claim("node-x", ["test.record"], 1, 30.0)
    assert claim.task.id == task_id
    if status is not None:
        assert app.store.finish("node-x", [outcome_of(claim, status, app.store.now())]) == [True]


def test_an_ended_or_missing_task_cannot_be_updated(run1: Run, sqlite_url: str) -> None:
    ok(run1("schedule", BASIC, "test.record"))
    reader = App(sqlite_url)
    _run_by_hand(reader, 1, ExecutionStatus.COMPLETED)
    before = reader.get(1)
    code, out = run1("tasks", "update", "1", "--priority", "5")
    assert code == 1 and out.strip() == (
        "Error: task_id=1: the task has ended (COMPLETED) and cannot be updated: schedule a new one"
    )
    assert reader.get(1) == before
    code, out = run1("tasks", "update", "99", "--priority", "5")
    assert code == 1 and out.strip() == "Error: task_id=99: no such task"
    reader.close()


def test_an_update_with_app_checks_the_arguments_against_the_function(run1: Run, sqlite_url: str) -> None:
    ok(run1("schedule", BASIC, "test.slow", "--kwargs", '{"seconds": 1}', "--every", "1h"))
    code, out = run1("--app", BASIC, "tasks", "update", "1", "--kwargs", '{"minutes": 1}')
    assert code == 2 and "kwargs=" in out and "minutes" in out, out
    ok(run1("--app", BASIC, "tasks", "update", "1", "--kwargs", '{"seconds": 2}'))
    reader = App(sqlite_url)
    assert reader.get(1).kwargs == {"seconds": 2}
    reader.close()


def test_a_running_task_takes_its_new_schedule_after_its_run(run1: Run, sqlite_url: str) -> None:
    ok(run1("schedule", BASIC, "test.record", "--every", "1s"))
    reader = App(sqlite_url)
    wait_for(lambda: reader.store.now() >= reader.get(1).next_run_at, timeout=10)
    _run_by_hand(reader, 1, None)
    out = ok(run1("tasks", "update", "1", "--every", "2h"))
    assert "running: the edited schedule takes over when this run ends" in out
    task = reader.get(1)
    assert task.status is Status.RUNNING and task.replan_at is not None and task.interval == 7200
    shown = ok(run1("tasks", "show", "1"))
    assert "replan_at" in shown and "once the current run ends" in shown
    reader.close()


# -- tasks retry --------------------------------------------------------------------------


def test_retry_runs_a_cancelled_or_failed_task_again(run1: Run, sqlite_url: str) -> None:
    ok(run1("schedule", BASIC, "test.record", "--delay", "1h"))
    ok(run1("schedule", BASIC, "test.record"))
    reader = App(sqlite_url)
    _run_by_hand(reader, 2, ExecutionStatus.FAILED)
    ok(run1("tasks", "cancel", "1"))
    for task_id in (1, 2):
        assert ok(run1("tasks", "retry", str(task_id))).strip() == f"task {task_id} (test.record): PENDING, due now"
        task = reader.get(task_id)
        assert task.status is Status.PENDING and task.next_run_at <= reader.store.now()
    code, out = run1("tasks", "retry", "1")
    assert code == 1 and out.strip() == "Error: task_id=1: cannot retry a task that is PENDING"
    reader.close()


# -- schedule --key / --replace / --until / --max-runs ------------------------------------------


def test_schedule_says_when_a_key_is_held_and_replace_updates_in_place(run1: Run, sqlite_url: str) -> None:
    first = ok(run1("schedule", BASIC, "test.record", "--cron", "0 9 * * *", "--key", "nightly"))
    assert first.startswith("scheduled task 1 (test.record)")
    again = ok(run1("schedule", BASIC, "test.record", "--cron", "0 3 * * *", "--key", "nightly"))
    assert again == "task 1 already exists for key nightly (unchanged)\n"
    reader = App(sqlite_url)
    assert reader.get(1).cron == "0 9 * * *"
    replaced = ok(run1("schedule", BASIC, "test.record", "--cron", "0 3 * * *", "--key", "nightly", "--replace"))
    assert replaced == "task 1 for key nightly replaced\n"
    assert reader.get(1).cron == "0 3 * * *" and len(reader.tasks()) == 1
    code, out = run1("schedule", BASIC, "test.record", "--replace")
    assert code == 2 and "--replace needs --key" in out
    reader.close()


def test_schedule_takes_the_ends_and_show_tells_them(run1: Run, sqlite_url: str) -> None:
    ok(run1("schedule", BASIC, "test.record", "--every", "1h", "--until", "2031-06-01T00:00:00Z", "--max-runs", "4"))
    reader = App(sqlite_url)
    task = reader.get(1)
    assert task.until == datetime(2031, 6, 1, tzinfo=UTC) and task.max_runs == 4
    shown = ok(run1("tasks", "show", "1"))
    rows = {parts[0]: parts[1] for line in shown.splitlines() if len(parts := line.strip("│ ").split("│")) == 2}
    rows = {k.strip(): v.strip() for k, v in rows.items()}
    assert rows["until"] == "2031-06-01T00:00:00+00:00" and rows["max_runs"] == "4 (0 run so far)"
    assert rows["origin"] == "runtime" and "replan_at" not in rows
    code, out = run1("schedule", BASIC, "test.record", "--every", "1h", "--max-runs", "x")
    assert code == 2 and "'--max-runs': 'x'" in out
    reader.close()


def test_show_tells_a_code_schedule(run1: Run, sqlite_url: str) -> None:
    ok(run1("schedules", "sync", V1))
    reader = App(sqlite_url)
    tick = by_key(reader)["tick"]
    assert "code (@app.periodic)" in ok(run1("tasks", "show", str(tick.id)))
    out = ok(run1("tasks", "update", str(tick.id), "--every", "2h"))
    assert "the next sync puts it back as declared" in out
    reader.close()


# -- durations ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "field", "seconds"),
    [
        (["--every", "90"], "interval", 90),
        (["--every", "15m"], "interval", 900),
        (["--every", "1h30m"], "interval", 5400),
        (["--every", "7d"], "interval", 7 * 86400),
        (["--every", "1h", "--jitter", "30s"], "jitter", 30),
        (["--every", "1h", "--timeout", "12h"], "timeout", 12 * 3600),
        (["--every", "1h", "--retry-backoff", "1m"], "retry_backoff", 60),
    ],
)
def test_options_in_seconds_take_durations(
    run1: Run, sqlite_url: str, options: list[str], field: str, seconds: int
) -> None:
    ok(run1("schedule", BASIC, "test.record", *options))
    reader = App(sqlite_url)
    assert getattr(reader.get(1), field) == seconds
    reader.close()


def test_delay_takes_a_duration(run1: Run, sqlite_url: str) -> None:
    ok(run1("schedule", BASIC, "test.record", "--delay", "15m"))
    reader = App(sqlite_url)
    wait = reader.get(1).next_run_at - reader.store.now()
    assert timedelta(minutes=14) < wait <= timedelta(minutes=15)
    reader.close()


@pytest.mark.parametrize(
    "command",
    [
        ["schedule", BASIC, "test.record", "--delay"],
        ["schedule", BASIC, "test.record", "--every"],
        ["schedule", BASIC, "test.record", "--timeout"],
        ["tasks", "update", "1", "--misfire-grace"],
        ["tasks", "update", "1", "--max-runtime"],
        ["tasks", "update", "1", "--retry-backoff"],
        ["worker", BASIC, "--scale-up-age"],
        ["worker", BASIC, "--scale-down-after"],
        ["demo", "--duration"],
        ["prune", BASIC, "--older-than"],
    ],
)
@pytest.mark.parametrize("value", ["5x", "-1m", "1h-5m", "nan"])
def test_a_bad_duration_names_the_option_and_the_value(run1: Run, command: list[str], value: str) -> None:
    code, out = run1(*command, value)
    assert code == 2, out
    assert f"'{command[-1]}'" in out and repr(value) in out, out
