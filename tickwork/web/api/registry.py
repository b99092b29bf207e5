"""``/api/v1/fire-times`` and ``/api/v1/task-names``: what can be scheduled, and when a
schedule would fire.

Answered from the registry and the schedule rules alone: these routes never touch the
database, so they are not run through ``Database.guard`` and stay up while it is away.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Query

from tickwork import timing
from tickwork.app import App
from tickwork.errors import InvalidInput
from tickwork.validate import MAX_SPAN_S
from tickwork.web.errors import responses
from tickwork.web.schemas import FireTimesOut, NameList, Text, iso_text


def router(app: App, read: Any) -> APIRouter:
    r = APIRouter()

    @r.get(
        "/fire-times",
        response_model=FireTimesOut,
        dependencies=[read],
        responses=responses(401, 422),
        tags=["schedules"],
        summary="The next n fire times of a cron expression (in a zone, with the DST rule) or an interval",
    )
    def fire_times(
        cron: Annotated[Text | None, Query(max_length=200, description="A 5-field expression or @macro.")] = None,
        every: Annotated[float | None, Query(gt=0, le=MAX_SPAN_S, description="Seconds between fires.")] = None,
        timezone: Annotated[Text, Query(max_length=100, description="IANA zone of the cron expression.")] = "UTC",
        after: Annotated[Text | None, Query(max_length=40, description="ISO 8601 with offset; default now.")] = None,
        anchor: Annotated[Text | None, Query(max_length=40, description="For every: a time on the grid.")] = None,
        n: Annotated[int, Query(ge=1, le=1000)] = 5,
    ) -> FireTimesOut:
        times = timing.fire_times(
            cron=cron,
            every=every,
            timezone=timezone,
            after=_moment("after", after),
            n=n,
            anchor=_moment("anchor", anchor),
        )
        zone = ZoneInfo(timezone if cron is not None else "UTC")
        return FireTimesOut(timezone=zone.key, times=times, local=[t.astimezone(zone).isoformat() for t in times])

    @r.get("/task-names", response_model=NameList, dependencies=[read], responses=responses(401))
    def task_names() -> NameList:
        return NameList(names=app.registry.names())

    return r


def _moment(field: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return iso_text(text)
    except ValueError as exc:
        raise InvalidInput(field, text, str(exc)) from None
