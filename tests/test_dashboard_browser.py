"""The dashboard in a real browser: Debian's Chromium, driven by Playwright, against
``tickwork serve --with-worker`` on a free loopback port.

Sign in, see a scheduled task on the overview, open it, cancel it (confirmed on the page
the Cancel button leads to) and see it CANCELLED; markup in a task's name and error shows
as text and runs nothing; schedule a task with the form and see its run and result,
re-run a FAILED task with Retry, filter the runs, see the throughput chart and the
per-name statistics; the pages fit a 390-px screen. Screenshots at 1280 and 390 px go to
the test's tmp dir (and, with TICKWORK_UPDATE_SCREENSHOT=1, the overview to
docs/dashboard.png for the README). Every wait is on a condition, with a deadline.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.http_support import EVIL_ERROR, EVIL_NAME, TOKEN, Served, make_app
from tests.workers import ROOT
from tickwork import App

CHROMIUM = Path("/usr/bin/chromium")
WAIT_MS = 20_000
WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}


def _unavailable(reason: str) -> None:
    """Without a browser a developer's run skips; in CI that is a failure."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"the browser test needs {reason} in CI (./dev test installs it)", pytrace=False)
    pytest.skip(f"{reason} is not installed (./dev test installs it)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        _unavailable(f"Debian's Chromium ({CHROMIUM})")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def seeded(sqlite_url: str) -> Iterator[dict[str, int]]:
    app: App = make_app(sqlite_url)
    ids = {
        "daily": app.schedule("web.ok", cron="30 9 * * 1-5", timezone="Europe/Berlin").id,
        "often": app.schedule("web.ok", every=2, kwargs={"value": "tick"}).id,
        "failing": app.schedule("web.fail").id,
        "evil": app.schedule(EVIL_NAME, kwargs={"x": "<b>bold?</b>"}, delay=3600).id,
        "target": app.schedule("web.ok", kwargs={"value": {"to": "a@b.c"}}, delay=3600).id,
    }
    app.close()
    yield ids


@pytest.fixture
def server(sqlite_url: str, seeded: dict[str, int], tmp_path: Path) -> Iterator[Served]:
    served = Served(sqlite_url, tmp_path / "serve.log", "--with-worker", "--concurrency", "2")
    yield served
    code = served.stop()
    assert code in (0, -signal.SIGTERM), served.output()
    assert re.search(r"node \S+ stopped", served.output()), served.output()  # drained with the server


def test_sign_in_see_open_cancel(browser: Any, server: Served, seeded: dict[str, int], tmp_path: Path) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    dialogs: list[str] = []
    for label, (width, height) in WIDTHS.items():
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

        # Sign in: the dashboard sends a stranger to the sign-in form first.
        page.goto(server.url + "/")
        expect(page).to_have_url(re.compile(r"/login\?next=/$"))
        page.get_by_label("API token").fill(TOKEN)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("heading", name="Overview")).to_be_visible()

        # The overview: the scheduled task, and (auto-refreshed) the failed run.
        target_row = page.locator(f'table.tasks tr[data-task-id="{seeded["target"]}"]')
        expect(target_row).to_contain_text("web.ok")
        expect(target_row).to_contain_text("PENDING" if label == "desktop" else "CANCELLED")  # cancelled below
        expect(page.locator("#failures-last-hour")).not_to_have_text("0")
        expect(page.locator("main")).to_contain_text("ValueError")
        expect(page.locator("main")).to_contain_text(EVIL_NAME)  # the name, as text
        _no_overflow(page, width)
        page.screenshot(path=str(shots / f"overview-{width}.png"), full_page=True)

        # The failed task: its error and traceback, as text.
        page.goto(f"{server.url}/tasks/{seeded['failing']}")
        expect(page.locator("#task-status")).to_have_text("FAILED")
        page.locator("details summary").first.click()
        expect(page.locator("pre.traceback")).to_contain_text("ValueError")
        expect(page.locator("main")).to_contain_text(EVIL_ERROR)
        assert page.locator("main img, main script").count() == 0
        _no_overflow(page, width)
        page.screenshot(path=str(shots / f"task-failed-{width}.png"), full_page=True)

        # The task with markup in its name: the text shows, nothing runs.
        page.goto(f"{server.url}/tasks/{seeded['evil']}")
        expect(page.locator("#task-name")).to_have_text(EVIL_NAME)
        expect(page.locator("#task-kwargs")).to_contain_text("<b>bold?</b>")
        assert page.locator("main script, main b").count() == 0

        if label == "desktop":
            # Open the scheduled task from the overview, cancel it, see it CANCELLED.
            page.goto(server.url + "/")
            page.locator(f'table.tasks tr[data-task-id="{seeded["target"]}"] td.name a').click()
            expect(page.get_by_role("heading", name=f"Task {seeded['target']}")).to_be_visible()
            expect(page.locator("#task-status")).to_have_text("PENDING")
            expect(page.locator("#task-kwargs")).to_contain_text("a@b.c")
            page.screenshot(path=str(shots / f"task-{width}.png"), full_page=True)
            page.get_by_role("button", name="Cancel").click()  # asks first: nothing is cancelled yet
            expect(page.locator("#cancel-consequence")).to_contain_text("It is PENDING")
            expect(page.locator("#task-status")).to_have_text("PENDING")
            page.screenshot(path=str(shots / f"cancel-confirm-{width}.png"), full_page=True)
            page.get_by_role("link", name=f"Back to task {seeded['target']}").click()
            expect(page.locator("#task-status")).to_have_text("PENDING")
            page.get_by_role("button", name="Cancel").click()
            page.get_by_role("button", name="Confirm: cancel it").click()
            expect(page.locator("#task-status")).to_have_text("CANCELLED")
            expect(page.get_by_role("status")).to_have_text("Cancel requested.")
            expect(page.get_by_role("button", name="Cancel")).to_have_count(0)
            page.goto(f"{server.url}/tasks?status=CANCELLED")
            expect(page.locator(f'table.tasks tr[data-task-id="{seeded["target"]}"]')).to_contain_text("CANCELLED")
        else:
            # The recurring task's page: the cron in words and the next 5 fire times.
            page.goto(f"{server.url}/tasks/{seeded['daily']}")
            expect(page.locator("#cron-words")).to_have_text("At 09:30 on Monday through Friday")
            expect(page.locator("#next-fire-times li")).to_have_count(5)
            _no_overflow(page, width)
            page.screenshot(path=str(shots / f"task-{width}.png"), full_page=True)
        context.close()

    assert dialogs == []  # no injected script ever ran
    for name in ["overview-1280", "overview-390", "task-1280", "task-390"]:
        assert (shots / f"{name}.png").stat().st_size > 10_000
    print(f"screenshots: {shots}")
    if os.environ.get("TICKWORK_UPDATE_SCREENSHOT") == "1":
        _readme_screenshot(browser, tmp_path, shots)


def _sign_in(page: Any, url: str) -> None:
    page.goto(url + "/login")
    page.get_by_label("API token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()


def test_schedule_retry_filter_and_insights(
    browser: Any, server: Served, seeded: dict[str, int], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    dialogs: list[str] = []
    for label, (width, height) in WIDTHS.items():
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        _sign_in(page, server.url)
        expect(page.get_by_role("heading", name="Overview")).to_be_visible()

        # Schedule a task with the form: a mistake first (named next to the form, kept as typed).
        page.goto(server.url + "/tasks")
        page.get_by_role("link", name="Schedule a task").click()
        expect(page.get_by_role("heading", name="Schedule a task")).to_be_visible()
        page.locator('select[name="name"]').select_option("web.ok")
        page.locator('textarea[name="kwargs"]').fill('{"value": "from the form", ')
        page.get_by_role("button", name="Schedule").click()
        expect(page.locator("#schedule-error")).to_contain_text("kwargs=")
        expect(page.locator('textarea[name="kwargs"]')).to_have_value('{"value": "from the form", ')
        _no_overflow(page, width)
        page.screenshot(path=str(shots / f"schedule-form-{width}.png"), full_page=True)
        page.locator('textarea[name="kwargs"]').fill(f'{{"value": "from the form at {width}"}}')
        page.get_by_role("button", name="Schedule").click()
        expect(page.get_by_role("status")).to_have_text("Scheduled.")
        expect(page.locator("#task-name")).to_have_text("web.ok")
        # The node runs it; the page refreshes itself until the run and its result show.
        expect(page.locator("#task-status")).to_have_text("COMPLETED")
        expect(page.locator("table.runs")).to_contain_text(f'"from the form at {width}"')
        expect(page.locator("#task-next")).to_have_text("—")

        if label == "desktop":
            # Re-run the FAILED task with Retry: a second run, FAILED again.
            page.goto(f"{server.url}/tasks/{seeded['failing']}")
            expect(page.locator("#task-status")).to_have_text("FAILED")
            page.get_by_role("button", name="Retry").click()
            expect(page.get_by_role("status")).to_have_text("Retried: pending again, due now.")
            expect(page.locator("table.runs tbody tr")).to_have_count(2)
            expect(page.locator("#task-status")).to_have_text("FAILED")

            # Filter the runs by name and status.
            page.goto(server.url + "/runs")
            page.get_by_label("Task name").fill("web.fail")
            page.locator('select[name="status"]').select_option("FAILED")
            page.get_by_role("button", name="Filter").click()
            expect(page).to_have_url(re.compile(r"/runs\?name=web.fail&status=FAILED"))
            rows = page.locator("table.runs tbody tr")
            expect(rows).to_have_count(2)
            for row in rows.all():
                expect(row).to_contain_text("web.fail")
                expect(row).to_contain_text("FAILED")

        # The throughput chart (an inline SVG) and the per-name statistics.
        page.goto(server.url + "/names")
        expect(page.locator("svg#throughput")).to_be_visible()
        expect(page.locator("svg#throughput rect.bar").first).to_be_attached()
        ok_row = page.locator('table.names tr[data-name="web.ok"]').first
        expect(ok_row).to_be_visible()
        expect(ok_row.locator('td[data-label="runs"]')).not_to_have_text("0")
        _no_overflow(page, width)
        page.screenshot(path=str(shots / f"names-{width}.png"), full_page=True)

        # The tasks list sorted by a column's link, and recurring tasks only.
        page.goto(server.url + "/tasks")
        page.locator("table.tasks thead").get_by_role("link", name="name").click()
        expect(page).to_have_url(re.compile(r"/tasks\?sort=name$"))
        page.locator('select[name="kind"]').select_option("RECURRING")
        page.get_by_role("button", name="Filter").click()
        expect(page.locator("table.tasks tbody tr")).to_have_count(2)  # the cron task and the interval one
        _no_overflow(page, width)
        page.screenshot(path=str(shots / f"tasks-sorted-{width}.png"), full_page=True)
        context.close()

    assert dialogs == []
    for name in ["schedule-form", "names", "tasks-sorted"]:
        for width in (1280, 390):
            assert (shots / f"{name}-{width}.png").stat().st_size > 10_000
    print(f"screenshots: {shots}")


def _readme_screenshot(browser: Any, tmp_path: Path, shots: Path) -> None:
    """The README's picture: the overview at 1280 px of a server running everyday tasks
    (docs/dashboard.png)."""
    from playwright.sync_api import expect

    url = f"sqlite:///{tmp_path / 'readme.db'}"
    app: App = make_app(url)
    for to in ["ada@example.com", "grace@example.com", "alan@example.com"]:
        app.schedule("emails.send_welcome", kwargs={"to": to})
    app.schedule("emails.send_welcome", kwargs={"to": "edsger@example.com"}, delay=3600)
    app.schedule("reports.daily", cron="0 9 * * 1-5", timezone="Europe/Berlin", kwargs={"format": "csv"})
    app.pause(app.schedule("reports.daily", cron="0 0 1 * *", kwargs={"format": "pdf"}).id)
    app.schedule("cache.warm", every=2)
    app.schedule("sync.inventory", every=5)
    app.close()
    served = Served(url, tmp_path / "readme-serve.log", "--with-worker", "--concurrency", "2")
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(WAIT_MS)
        page.goto(served.url + "/login")
        page.get_by_label("API token").fill(TOKEN)
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("#failures-last-hour")).not_to_have_text("0")
        expect(page.locator("#runs-per-minute")).to_have_text(re.compile(r"^([89]|\d\d+)$"))
        page.screenshot(path=str(shots / "readme-overview-1280.png"), full_page=True)
        page.close()
    finally:
        served.stop()
    (ROOT / "docs").mkdir(exist_ok=True)
    shutil.copyfile(shots / "readme-overview-1280.png", ROOT / "docs" / "dashboard.png")


def _no_overflow(page: Any, width: int) -> None:
    """The page itself never scrolls sideways: wide tables scroll inside their own box."""
    assert page.evaluate("document.documentElement.scrollWidth") <= width
