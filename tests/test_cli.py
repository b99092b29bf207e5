"""The command line, driven as a user drives it."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from tests.apps.basic import app as basic_app
from tests.workers import ROOT
from tickwork import App, Status
from tickwork.cli import common as cli  # the console every command prints through
from tickwork.cli import main
from tickwork.demo import make_app as make_demo_app

APP = "tests.apps.basic:app"


@pytest.fixture
def run(sqlite_url: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("TICKWORK_DB", sqlite_url)
    monkeypatch.setattr(cli, "console", Console(width=200))
    basic_app.close()  # the imported app re-reads TICKWORK_DB when it next opens its store
    runner = CliRunner()

    def invoke(*args: str, ok: bool = True) -> str:
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert (result.exit_code == 0) is ok, result.output
        return result.output

    return invoke


def test_schedule_list_show_and_manage(run, sqlite_url: str) -> None:  # type: ignore[no-untyped-def]
    out = run("schedule", APP, "test.record", "--cron", "30 2 * * *", "--timezone", "Europe/Berlin")
    assert "scheduled task 1 (test.record)" in out
    run("schedule", APP, "test.slow", "--kwargs", '{"seconds": 1}', "--delay", "60")
    listing = run("tasks", "list")
    assert "test.record" in listing and "cron 30 2 * * *" in listing and "test.slow" in listing
    shown = run("tasks", "show", "1")
    assert "Europe/Berlin" in shown and "next fire times" in shown
    assert run("tasks", "pause", "1").strip() == "task 1: PAUSED"
    assert "cannot trigger a task that is PAUSED" in run("tasks", "trigger", "1", ok=False)
    assert run("tasks", "resume", "1").strip() == "task 1: PENDING"
    assert "due now" in run("tasks", "trigger", "2")
    assert "CANCELLED" in run("tasks", "cancel", "2")
    app = App(sqlite_url)
    assert app.get(1).status is Status.PENDING and app.get(2).status is Status.CANCELLED
    app.close()


def test_schedule_errors_are_one_line_messages(run) -> None:  # type: ignore[no-untyped-def]
    out = run("schedule", APP, "test.record", "--cron", "61 * * * *", ok=False)
    assert "cron='61 * * * *'" in out and "Traceback" not in out
    assert "kwargs=" in run("schedule", APP, "test.record", "--kwargs", "{nope", ok=False)
    assert "name='no.such.task'" in run("schedule", APP, "no.such.task", ok=False)
    assert "timezone-aware" in run("schedule", APP, "test.record", "--at", "2030-01-01T09:00:00", ok=False)
    assert "no database at" in run("tasks", "show", "42", ok=False)  # refused input created none
    run("db", "upgrade")
    assert "task_id=42" in run("tasks", "show", "42", ok=False)
    assert "APP='nomodule'" in run("schedule", "nomodule", "x", ok=False)


def test_executions_and_db_upgrade(run, sqlite_url: str) -> None:  # type: ignore[no-untyped-def]
    assert "no database at" in run("tasks", "list", ok=False)  # a mistyped path creates nothing
    assert not Path(sqlite_url.removeprefix("sqlite:///")).exists()
    assert "schema at version 13" in run("db", "upgrade")
    assert "schema at version 13" in run("db", "upgrade")  # idempotent
    run("schedule", APP, "test.record")
    assert "id" in run("executions", "1")


def test_cron_explains_and_lists_fire_times(run) -> None:  # type: ignore[no-untyped-def]
    out = run("cron", "30 2 * * *", "--timezone", "Europe/Berlin", "-n", "3")
    assert "At 02:30 every day" in out
    assert out.count("UTC)") == 3
    assert "never fires" in run("cron", "0 0 31 2 *", ok=False)
    assert "Mars/Olympus" in run("cron", "* * * * *", "--timezone", "Mars/Olympus", ok=False)


def test_cron_takes_after_and_prints_each_fire_time_in_its_zone_and_utc(run) -> None:  # type: ignore[no-untyped-def]
    out = run("cron", "*/30 * * * *", "--timezone", "America/New_York", "--after", "2024-11-03T05:00Z", "-n", "3")
    lines = [line.strip() for line in out.splitlines()[1:]]
    assert lines == [
        "2024-11-03 01:30:00 EDT -0400  (2024-11-03 05:30:00 UTC)",
        "2024-11-03 01:00:00 EST -0500  (2024-11-03 06:00:00 UTC)",  # the repeated hour's second pass
        "2024-11-03 01:30:00 EST -0500  (2024-11-03 06:30:00 UTC)",
    ]
    assert "timezone-aware" in run("cron", "* * * * *", "--after", "2024-01-01T00:00", ok=False)
    assert "after='soon'" in run("cron", "* * * * *", "--after", "soon", ok=False)
    assert "no fire time before the year 9999" in run("cron", "0 0 * * *", "--after", "9999-12-31T12:00Z")


@pytest.mark.parametrize(
    ("expression", "needle"),
    [
        ("-1 * * * *", "minute field '-1' is invalid"),  # an argument, not an unknown option
        ("1" * 5000 + " * * * *", "minute field '11111111111111111...': number too long"),
        ("*/" + "9" * 40 + " * * * *", "number too long"),
        ("* * * 13 *", "month field '13' is invalid"),
        ("* * * JAN-FOO *", "month field 'JAN-FOO' is invalid"),
        ("--bogus", "expected 5 fields"),
    ],
)
def test_cron_refuses_bad_expressions_in_one_line(run, expression: str, needle: str) -> None:  # type: ignore[no-untyped-def]
    out = run("cron", expression, ok=False)
    assert needle in out and "Traceback" not in out and "never fires" not in out
    assert len(out.strip().splitlines()) == 1


def test_tasks_show_prints_fire_times_in_the_task_zone_beside_utc(run) -> None:  # type: ignore[no-untyped-def]
    run("schedule", APP, "test.record", "--cron", "30 2 * * *", "--timezone", "Europe/Berlin")
    shown = run("tasks", "show", "1")
    assert "next fire times (Europe/Berlin):" in shown
    times = [line.strip() for line in shown.splitlines() if line.strip().endswith(" UTC)")]
    assert len(times) == 5
    for line in times:  # 02:30 local is 00:30 or 01:30 UTC, or 03:00 local on a spring-forward day
        local, _, utc = line.partition("  (")
        assert local.split()[1] in ("02:30:00", "03:00:00") and local.split()[2] in ("CET", "CEST")
        assert utc.split()[1] in ("00:30:00", "01:30:00", "01:00:00")


def test_demo_runs_every_kind_of_task(tmp_path: Path) -> None:
    db_path = tmp_path / "demo.db"
    result = subprocess.run(
        [sys.executable, "-m", "tickwork.cli", "demo", "--duration", "5", "--db-path", str(db_path)],
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "160"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    app = App(f"sqlite:///{db_path}")
    runs = app.executions(limit=1000)
    names = {app.get(e.task_id).name for e in runs if e.status.value == "COMPLETED"}
    assert {"demo.send_welcome", "demo.heartbeat_check", "demo.flaky_sync"} <= names
    flaky = next(t for t in app.tasks() if t.name == "demo.flaky_sync")
    assert flaky.status is Status.COMPLETED
    assert [e.status.value for e in sorted(app.executions(flaky.id), key=lambda e: e.attempt)] == [
        "FAILED",
        "FAILED",
        "COMPLETED",
    ]
    assert "runs logged" in result.stdout
    app.close()


def _foreign_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Files the demo must refuse to delete, each with the reason it must give."""
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "notes.db").write_text("not a database\n")
    for name, journal in (("other-rollback.db", "DELETE"), ("other-wal.db", "WAL")):
        with contextlib.closing(sqlite3.connect(tmp_path / name)) as conn:
            conn.execute(f"PRAGMA journal_mode={journal}")
            conn.execute("CREATE TABLE things (x)")
            conn.commit()
    app = App(f"sqlite:///{tmp_path / 'work.db'}")
    for name in ("demo.mine", "work.report", "work.sync"):
        app.task(name=name)(lambda ctx: None)
        app.schedule(name, delay=3600)
    app.close()
    return {
        "directory": (tmp_path / "a-directory", "is a directory"),
        "text": (tmp_path / "notes.db", "exists and is not a tickwork demo database (file is not a database)"),
        "rollback": (tmp_path / "other-rollback.db", "exists and is not a tickwork demo database (not in WAL mode"),
        "wal": (tmp_path / "other-wal.db", "exists and is not a tickwork demo database (no such table"),
        "work": (tmp_path / "work.db", "holds 2 tasks that are not the demo's; choose another path"),
    }


@pytest.mark.parametrize("case", ["directory", "text", "rollback", "wal", "work"])
def test_demo_refuses_a_file_that_is_not_its_own_and_leaves_it_as_it_was(run, tmp_path: Path, case: str) -> None:  # type: ignore[no-untyped-def]
    path, reason = _foreign_files(tmp_path)[case]
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    out = run("demo", "--duration", "0", "--db-path", str(path), ok=False)
    assert out.startswith(f"Error: db_path={str(path)!r}: {reason}") and len(out.strip().splitlines()) == 1, out
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_demo_starts_afresh_on_a_file_of_its_own(tmp_path: Path) -> None:
    db_path = tmp_path / "demo.db"
    old = make_demo_app(f"sqlite:///{db_path}")
    old.schedule("demo.minute_report", cron="* * * * *")
    old.schedule("demo.send_welcome", kwargs={"user": "old@example.com"}, delay=3600)
    old.close()
    result = subprocess.run(
        [sys.executable, "-m", "tickwork.cli", "demo", "--duration", "0", "--db-path", str(db_path)],
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "160"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    app = App(f"sqlite:///{db_path}")
    tasks = app.tasks()
    assert [t.id for t in tasks] == [1, 2, 3, 4, 5] and all(t.kwargs.get("user") != "old@example.com" for t in tasks)
    app.close()


def test_db_upgrade_and_listing_on_postgresql(run, pg_url: str) -> None:  # type: ignore[no-untyped-def]
    assert "schema at version 15" in run("--db", pg_url, "db", "upgrade")
    run("--db", pg_url, "schedule", APP, "test.record", "--delay", "3600")
    assert "test.record" in run("--db", pg_url, "tasks", "list")


BAD_APPS = [
    "../x:app",
    ".:app",
    "..:app",
    ".x:app",
    "x/y:app",
    "tests/apps/basic.py:app",
    "tests.apps.basic:",
    ":app",
    "tests.apps.basic:app()",
    "tests.apps.basic:registry",
    "tests.apps.nosuch:app",
    "tests.apps.broken:app",
    "a" * 5000 + ":app",
]


@pytest.mark.parametrize("spec", BAD_APPS)
def test_every_command_refuses_a_bad_app_in_one_line(run, spec: str) -> None:  # type: ignore[no-untyped-def]
    for command in (
        ["schedule", spec, "test.record"],
        ["worker", spec],
        ["serve", spec],
        ["--app", spec, "tasks", "list"],
        ["--app", spec, "stats"],
    ):
        out = run(*command, ok=False)
        assert out.startswith("Error: APP=") and "Traceback" not in out, (command, out)
        assert len(out.strip().splitlines()) == 1 and len(out) < 500, (command, out)
    if spec == "tests.apps.broken:app":
        assert "RuntimeError: this module is broken on purpose" in out


@pytest.mark.parametrize("option", ["--kwargs", "--args"])
@pytest.mark.parametrize("depth", [150, 990, 10_000, 100_000])
def test_deeply_nested_json_options_are_one_line_errors(run, option: str, depth: int) -> None:  # type: ignore[no-untyped-def]
    field = option.removeprefix("--")
    text = '{"a": ' * depth + "1" + "}" * depth if field == "kwargs" else "[" * depth + "]" * depth
    out = run("schedule", APP, "test.record", option, text, ok=False)
    assert out.startswith(f"Error: {field}") and "Traceback" not in out and len(out.strip().splitlines()) == 1
    assert "nested" in out
