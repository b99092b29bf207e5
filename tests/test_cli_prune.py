"""``tickwork prune APP``: counts printed, dry runs, and bad input as usage errors."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from click.testing import CliRunner
from rich.console import Console

from tests.apps.basic import app as basic_app
from tests.conftest import wait_for
from tests.workers import ROOT
from tickwork import App
from tickwork.cli import common as cli
from tickwork.cli import main
from tickwork.model import ExecutionStatus, Status
from tickwork.schedules import outcome_of

APP = "tests.apps.basic:app"
Run = Callable[..., tuple[int, str]]


@pytest.fixture
def run(store_url: str, monkeypatch: pytest.MonkeyPatch) -> Run:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("TICKWORK_DB", store_url)
    monkeypatch.setattr(cli, "console", Console(width=300))
    basic_app.close()  # the imported app re-reads TICKWORK_DB when it next opens its store
    runner = CliRunner()

    def invoke(*args: str) -> tuple[int, str]:
        result = runner.invoke(main, list(args))
        return result.exit_code, result.output

    return invoke


def ended_tasks(n: int) -> App:
    """``n`` one-time tasks run and COMPLETED (by hand, without a node) and one pending."""
    app = basic_app
    for _ in range(n):
        task = app.schedule("test.record")
        [claim] = app.store.claim("node-x", ["test.record"], 1, 30.0)
        assert claim.task.id == task.id
        assert app.store.finish("node-x", [outcome_of(claim, ExecutionStatus.COMPLETED, app.store.now())]) == [True]
    app.schedule("test.record", delay=3600)
    return app


def test_prune_prints_counts_and_dry_run_changes_nothing(run: Run) -> None:
    app = ended_tasks(3)
    code, out = run("prune", APP, "--older-than", "7d")
    assert code == 0 and "deleted 0 executions and 0 ended one-time tasks" in out  # all younger than 7 days
    code, out = run("prune", APP)  # APP's retention: 30 days
    assert code == 0 and "deleted 0 executions" in out and "keeping the newest 20 runs" in out
    wait_a_second(app)
    code, out = run("prune", APP, "--older-than", "1s", "--dry-run")
    assert code == 0 and "would delete 3 executions and 3 ended one-time tasks" in out, out
    assert len(app.tasks(limit=100)) == 4
    code, out = run("prune", APP, "--older-than", "1s")
    assert code == 0 and "deleted 3 executions and 3 ended one-time tasks" in out, out
    assert [t.status for t in app.tasks(limit=100)] == [Status.PENDING]


def wait_a_second(app: App) -> None:
    """Until every ended row is more than 1 s old by the store's clock (no fixed sleep)."""
    last = max(t.updated_at for t in app.tasks(limit=100))
    wait_for(lambda: app.store.now() - last > timedelta(seconds=1.05), timeout=10)


@pytest.mark.parametrize("value", ["abc", "7", "-1d", "0s", ""])
def test_a_bad_duration_is_a_usage_error_naming_option_and_value(run: Run, value: str) -> None:
    code, out = run("prune", APP, "--older-than", value)
    assert code == 2, out
    assert "--older-than" in out and repr(value) in out and "Traceback" not in out


def test_a_bad_keep_last_is_a_usage_error(run: Run) -> None:
    code, out = run("prune", APP, "--keep-last", "-3")
    assert code == 2 and "--keep-last" in out and "Traceback" not in out
