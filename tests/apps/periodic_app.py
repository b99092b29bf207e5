"""Two releases of one application with schedules in code, for the command line's tests
(``tests.apps.periodic_app:app`` and ``tests.apps.periodic_app:app_v2``).

Both register the same task names; from the first release to the second, ``daily``
moves from 09:00 to 10:00 and gains jitter, ``tick`` stays as it is, ``weekly`` is no
longer declared and ``monthly`` is new. Nothing here runs a task: the tests only sync."""

from __future__ import annotations

from tickwork import App, Context


def report(ctx: Context, kind: str) -> str:
    return kind


def tick(ctx: Context) -> None:
    return None


def release(version: int) -> App:
    app = App()  # TICKWORK_DB, read when the store is first opened
    app.task(name="periodic.report")(report)
    app.task(name="periodic.tick")(tick)
    if version == 1:
        app.periodic("0 9 * * *", key="daily", timezone="Europe/Berlin", kwargs={"kind": "daily"})(report)
        app.periodic("0 8 * * 1", key="weekly", kwargs={"kind": "weekly"})(report)
    else:
        app.periodic("0 10 * * *", key="daily", timezone="Europe/Berlin", kwargs={"kind": "daily"}, jitter=30)(report)
        app.periodic("0 7 1 * *", key="monthly", kwargs={"kind": "monthly"})(report)
    app.periodic(every=3600, key="tick")(tick)
    return app


app = release(1)
app_v2 = release(2)
