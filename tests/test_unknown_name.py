"""An unknown task name is refused with the registered names and the closest one, the
same through Python, the command line and the HTTP API (422 naming ``name``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from tests.http_support import AUTH, TOKEN, client_of
from tests.workers import ROOT
from tickwork import App, Context, UnknownTask
from tickwork.cli import main
from tickwork.registry import SHOWN_NAMES, Registry, TaskOptions

NAMES = ["myproject.tasks.send_email", "myproject.tasks.daily_report", "billing.invoice"]


def _app(url: str) -> App:
    app = App(url)
    for name in NAMES:

        @app.task(name=name)
        def one(ctx: Context, to: str = "") -> None:
            return None

    return app


@pytest.fixture
def named_app(sqlite_url: str) -> Iterator[App]:
    application = _app(sqlite_url)
    yield application
    application.close()


def test_python_names_the_registered_tasks_and_the_closest(named_app: App) -> None:
    with pytest.raises(UnknownTask) as refused:
        named_app.schedule("myproject.tasks.send_emial", kwargs={"to": "a@b.c"})
    assert refused.value.field == "name" and refused.value.value == "myproject.tasks.send_emial"
    message = str(refused.value)
    assert "did you mean myproject.tasks.send_email?" in message
    assert all(name in message for name in NAMES)
    assert named_app.tasks() == []


def test_a_short_name_suggests_the_dotted_one(named_app: App) -> None:
    with pytest.raises(UnknownTask, match=r"did you mean myproject\.tasks\.send_email\?"):
        named_app.schedule("send_email")


def test_nothing_close_suggests_nothing_and_the_list_is_bounded() -> None:
    registry = Registry()
    for n in range(SHOWN_NAMES + 5):
        registry.add(f"jobs.task_{n:02d}", lambda ctx: None, TaskOptions())
    with pytest.raises(UnknownTask) as refused:
        registry.resolve("zzz")
    message = str(refused.value)
    assert "did you mean" not in message
    assert "jobs.task_09" in message and "jobs.task_10" not in message and "and 5 more" in message
    with pytest.raises(UnknownTask, match="no task is registered at all"):
        Registry().resolve("anything")


def test_cli_schedule_suggests_the_closest(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("TICKWORK_DB", sqlite_url)
    result = CliRunner().invoke(main, ["schedule", "tests.apps.basic:app", "test.recrod"], catch_exceptions=False)
    assert result.exit_code != 0
    assert "name='test.recrod'" in result.output and "did you mean test.record?" in result.output
    assert "Traceback" not in result.output


def test_http_schedule_is_422_naming_name_with_the_suggestion(named_app: App) -> None:
    with client_of(named_app, token=TOKEN) as api:
        response = api.post("/api/v1/tasks", json={"name": "billing.invoise"}, headers=AUTH)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "invalid_input" and body["field"] == "name"
    assert "did you mean billing.invoice?" in body["reason"] and "did you mean billing.invoice?" in body["message"]
    assert "myproject.tasks.send_email" in body["reason"]
    assert named_app.tasks() == []
