"""The JSON API under ``/api/v1``: the App's client API over HTTP.

Each route is a thin call into ``tickwork.App``, which validates everything and raises
the errors that ``errors.install`` turns into answers; the routes only parse the
request, check the token, and shape the result. Handlers are plain functions: FastAPI
runs them on its thread pool, where the App's blocking store calls belong.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Depends, Path, Query, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError

from tickwork import timing
from tickwork.app import App
from tickwork.errors import InvalidInput
from tickwork.model import ExecutionStatus, Status, Task
from tickwork.redact import secret_name
from tickwork.urls import MASK
from tickwork.validate import MAX_SPAN_S
from tickwork.web import reading
from tickwork.web.auth import Auth
from tickwork.web.database import Database
from tickwork.web.errors import Unauthorized, responses
from tickwork.web.listing import find_tasks
from tickwork.web.reading import Undecodable
from tickwork.web.schemas import (
    MAX_ID,
    AnyTaskOut,
    BackfillIn,
    ExecutionList,
    ExecutionOut,
    FireTimesOut,
    NameList,
    NodeList,
    NodeOut,
    ScheduleIn,
    StatsOut,
    TaskList,
    TaskOut,
    TaskPage,
    Text,
    UndecodableTaskOut,
    iso_text,
)

TaskId = Annotated[int, Path(ge=1, le=MAX_ID, description="The task's id.")]
Limit = Annotated[int, Query(ge=1, le=1000)]

bearer = HTTPBearer(auto_error=False, scheme_name="token", description="TICKWORK_API_TOKEN, as a bearer token.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]


def guards(auth: Auth) -> tuple[Any, Any]:
    """FastAPI dependencies for reads and for writes (the bearer scheme is declared so
    that ``/openapi.json`` documents it)."""

    def require(request: Request) -> None:
        if not auth.has_token:
            raise Unauthorized("this server has no API token (TICKWORK_API_TOKEN is unset): it authorises nothing")
        header = request.headers.get("authorization")
        if not header:
            raise Unauthorized("missing token: send the header 'Authorization: Bearer <TICKWORK_API_TOKEN>'")
        if not auth.bearer_ok(header):
            raise Unauthorized("invalid token")

    # async: a comparison of digests needs no trip through the thread pool
    async def read(request: Request, _: Credentials) -> None:
        if not auth.public_read:
            require(request)

    async def write(request: Request, _: Credentials) -> None:
        require(request)

    return Depends(read), Depends(write)


async def known_query(request: Request) -> None:
    """Refuse query parameters the route does not take: a misspelt filter (``?stauts=``)
    must not silently answer with everything."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    allowed = {param.alias for param in getattr(dependant, "query_params", [])}
    for name in request.query_params:
        if name not in allowed:
            choices = ", ".join(sorted(allowed)) or "none"
            if secret_name(name):
                # Never echo what looks like a credential (nor log it: see tickwork.redact).
                raise InvalidInput(
                    name,
                    MASK,
                    "credentials are not taken from the URL (it is logged and kept in histories): "
                    "send the header 'Authorization: Bearer <TICKWORK_API_TOKEN>'",
                )
            raise InvalidInput(
                name, request.query_params[name], f"unknown query parameter (this route takes: {choices})"
            )


def router(app: App, auth: Auth, db: Database) -> APIRouter:
    """The routes; each one that uses the store runs through ``db.guard`` (a 503 within
    about a second while the database is away)."""
    read, write = guards(auth)
    guard = db.guard
    r = APIRouter(prefix="/api/v1", tags=["tasks"], dependencies=[Depends(known_query)])

    @r.get(
        "/tasks",
        response_model=TaskPage,
        dependencies=[read],
        responses=responses(401, 422, 503),
        summary="List tasks by status, name and a text search over names",
    )
    @guard
    def list_tasks(
        status: Status | None = None,
        name: Annotated[Text | None, Query(max_length=300, description="Exact task name.")] = None,
        q: Annotated[
            Text | None,
            Query(max_length=300, description="Case-insensitive substring of the name (scans at most 5000 tasks)."),
        ] = None,
        limit: Limit = 100,
        offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
    ) -> TaskPage:
        page = find_tasks(app, status=status, name=name, q=q, limit=limit, offset=offset)
        return TaskPage(
            items=[_any_task(t) for t in page.items],
            limit=page.limit,
            offset=page.offset,
            next_offset=page.next_offset,
            scanned=page.scanned,
        )

    @r.post(
        "/tasks",
        response_model=TaskOut,
        status_code=201,
        dependencies=[write],
        responses=responses(401, 413, 422, 429, 503),
        summary="Schedule a registered task (with a key: the live task holding that key)",
    )
    @guard
    def schedule(body: ScheduleIn) -> TaskOut:
        fields = body.model_dump(exclude_none=True, exclude={"name"})
        return _task(app.schedule(body.name, **fields))

    @r.get(
        "/tasks/{task_id}",
        response_model=AnyTaskOut,
        dependencies=[read],
        responses=responses(401, 404, 422, 503),
        summary="One task (or, for a row that cannot be decoded, what can be read of it and why)",
    )
    @guard
    def get_task(task_id: TaskId) -> AnyTaskOut:
        return _any_task(reading.task(app, task_id))

    @r.post(
        "/tasks/{task_id}/cancel",
        response_model=TaskOut,
        dependencies=[write],
        responses=responses(401, 404, 409, 422, 503),
        summary="Cancel a task (a running one is asked to stop: cancel_requested)",
    )
    @guard
    def cancel(
        task_id: TaskId,
        run_only: Annotated[bool, Query(description="Stop only the current run of a recurring task.")] = False,
    ) -> TaskOut:
        _showable(app, task_id, "cancel")
        return _task(app.cancel(task_id, run_only=run_only))

    @r.post(
        "/tasks/{task_id}/pause",
        response_model=TaskOut,
        dependencies=[write],
        responses=responses(401, 404, 409, 422, 503),
    )
    @guard
    def pause(task_id: TaskId) -> TaskOut:
        _showable(app, task_id, "pause")
        return _task(app.pause(task_id))

    @r.post(
        "/tasks/{task_id}/resume",
        response_model=TaskOut,
        dependencies=[write],
        responses=responses(401, 404, 409, 422, 503),
    )
    @guard
    def resume(
        task_id: TaskId,
        catch_up: Annotated[bool, Query(description="false: skip (and record) the slots missed while paused.")] = True,
    ) -> TaskOut:
        _showable(app, task_id, "resume")
        return _task(app.resume(task_id, catch_up=catch_up))

    @r.post(
        "/tasks/{task_id}/trigger",
        response_model=TaskOut,
        dependencies=[write],
        responses=responses(401, 404, 409, 422, 503),
        summary="Run a pending task now (a recurring one keeps its schedule)",
    )
    @guard
    def trigger(task_id: TaskId) -> TaskOut:
        _showable(app, task_id, "trigger")
        return _task(app.trigger(task_id))

    @r.post(
        "/tasks/{task_id}/backfill",
        response_model=TaskList,
        status_code=201,
        dependencies=[write],
        responses=responses(401, 404, 422, 503),
        summary="Run every slot of a recurring task in [start, end] once",
    )
    @guard
    def backfill(task_id: TaskId, body: BackfillIn) -> TaskList:
        _showable(app, task_id, "backfill")
        return TaskList(items=[_task(t) for t in app.backfill(task_id, body.start, body.end)])

    @r.get(
        "/tasks/{task_id}/executions",
        response_model=ExecutionList,
        dependencies=[read],
        responses=responses(401, 404, 422, 503),
        summary="A task's runs, newest first",
    )
    @guard
    def task_executions(task_id: TaskId, status: ExecutionStatus | None = None, limit: Limit = 100) -> ExecutionList:
        if isinstance(reading.task(app, task_id), Undecodable):  # its runs can still be read
            rows = app.store.list_executions(task_id=task_id, status=status, limit=limit)
        else:
            rows = app.executions(task_id, status=status, limit=limit)
        return ExecutionList(items=[ExecutionOut.model_validate(e) for e in rows])

    @r.get(
        "/executions",
        response_model=ExecutionList,
        dependencies=[read],
        responses=responses(401, 422, 503),
        summary="Recent runs of all tasks, newest first",
    )
    @guard
    def executions(status: ExecutionStatus | None = None, limit: Limit = 100) -> ExecutionList:
        rows = app.executions(status=status, limit=limit)
        return ExecutionList(items=[ExecutionOut.model_validate(e) for e in rows])

    @r.get("/nodes", response_model=NodeList, dependencies=[read], responses=responses(401, 503), tags=["cluster"])
    @guard
    def nodes() -> NodeList:
        return NodeList(items=[NodeOut.model_validate(n) for n in app.nodes()])

    @r.get(
        "/stats",
        response_model=StatsOut,
        dependencies=[read],
        responses=responses(401, 503),
        tags=["cluster"],
        summary="Queue depth and oldest due age, tasks per status, runs per minute and hour",
    )
    @guard
    def stats() -> StatsOut:
        return StatsOut.model_validate(app.stats())

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


def _task(task: Task) -> TaskOut:
    return TaskOut.model_validate(task)


def _showable(app: App, task_id: int, operation: str) -> None:
    """Refuse (409) an operation on a task this API cannot show: a row that cannot be
    decoded, or whose values do not fit the task's shape. Nothing is changed."""
    shown = _any_task(reading.decodable(app, task_id, operation))
    if isinstance(shown, UndecodableTaskOut):
        raise reading.TaskUndecodable(Undecodable(shown.id, shown.name, shown.status, shown.reason), operation)


def _any_task(task: Task | Undecodable) -> AnyTaskOut:
    """A task's JSON, or the undecodable shape for a row that cannot be shown as one
    (its decoded values do not fit the task's shape, say an object for ``args``)."""
    if isinstance(task, Undecodable):
        return UndecodableTaskOut(id=task.id, name=task.name, status=task.status, reason=task.reason)
    try:
        return TaskOut.model_validate(task)
    except ValidationError as exc:
        reason = "its values do not fit the task shape"
        if errors := exc.errors():
            reason = f"{'.'.join(str(part) for part in errors[0]['loc'])}: {errors[0]['msg']}"
        return UndecodableTaskOut(id=task.id, name=task.name, status=str(task.status), reason=reading.short(reason))
