"""A task as the API shows it: its JSON, or — for a row that cannot be decoded, or whose
values do not fit the task's shape — what can be read of it and why.

Shared by every route that answers with tasks, so a row the API cannot show is answered
the same way everywhere, and an operation on it is refused before anything changes.
"""

from __future__ import annotations

from pydantic import ValidationError

from tickwork.app import App
from tickwork.model import Task
from tickwork.web import reading
from tickwork.web.reading import Undecodable
from tickwork.web.schemas import AnyTaskOut, TaskOut, UndecodableTaskOut


def task_out(task: Task) -> TaskOut:
    return TaskOut.model_validate(task)


def with_waiting(app: App, found: Task | Undecodable) -> AnyTaskOut:
    """One task's JSON, with why it waits if it is due and held back (a read per task:
    the single task's answer only)."""
    shown = any_task(found)
    if isinstance(shown, TaskOut) and isinstance(found, Task):
        shown.waiting = app.why_waiting(found)
    return shown


def showable(app: App, task_id: int, operation: str) -> None:
    """Refuse (409) an operation on a task this API cannot show: a row that cannot be
    decoded, or whose values do not fit the task's shape. Nothing is changed."""
    shown = any_task(reading.decodable(app, task_id, operation))
    if isinstance(shown, UndecodableTaskOut):
        raise reading.TaskUndecodable(Undecodable(shown.id, shown.name, shown.status, shown.reason), operation)


def any_task(task: Task | Undecodable) -> AnyTaskOut:
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
