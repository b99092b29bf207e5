"""The task page's edit form: the task's values as the form shows them, and what a
posted form changes.

A person types text, so every value is parsed here (JSON for the arguments, numbers,
ISO 8601 for ``until``) and a mistake raises ``InvalidInput`` naming the field, shown
next to the form with what was typed kept. Only the fields that differ from the task as
read are passed to ``App.update()``, which checks them as ``schedule()`` would; an empty
``timeout``, ``max_runtime``, ``until`` or ``max_runs`` turns it off.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from tickwork import editing, validate
from tickwork.errors import InvalidInput
from tickwork.model import Kind, Misfire, Overlap, Task
from tickwork.web.schemas import iso_text, plain_text

SCHEDULE_FIELDS = (*editing.SCHEDULE, *editing.ENDS)
"""Only a recurring task's form has these."""
POLICY_FIELDS = editing.POLICIES
FIELDS = (*SCHEDULE_FIELDS, "args", "kwargs", *POLICY_FIELDS)
TEXT_LIMITS = {"cron": 200, "timezone": 64, "until": 40}
NUMBER_LIMIT = 40
"""Characters of a number field read (a longer one is refused, not parsed)."""
CHOICES: dict[str, type[enum.StrEnum]] = {"misfire": Misfire, "overlap": Overlap}
CHOICE_VALUES = {field: [member.value for member in kind] for field, kind in CHOICES.items()}


class EditForm(BaseModel):
    """The posted form: every field is text, empty when left out."""

    csrf: str = ""
    revision: str = ""
    """The task's revision when the form was shown: an edit made since is not undone."""
    cron: str = ""
    every: str = ""
    timezone: str = ""
    until: str = ""
    max_runs: str = ""
    args: str = ""
    kwargs: str = ""
    misfire: str = ""
    misfire_grace: str = ""
    jitter: str = ""
    priority: str = ""
    timeout: str = ""
    max_retries: str = ""
    retry_backoff: str = ""
    overlap: str = ""
    max_runtime: str = ""
    max_catchup: str = ""
    max_lost: str = ""
    """Read only when ``editing.POLICIES`` offers it (the task's lost-run limit)."""
    queue: str = ""

    def values(self) -> dict[str, str]:
        """What was typed, by field (without the CSRF token and revision), to show again."""
        return {field: getattr(self, field) for field in FIELDS}


def fields_of(task: Task) -> tuple[str, ...]:
    """The fields the form offers for this task (a one-time task has no schedule)."""
    return FIELDS if task.kind is Kind.RECURRING else tuple(f for f in FIELDS if f not in SCHEDULE_FIELDS)


def values_of(task: Task) -> dict[str, str]:
    """The form filled in with the task's values."""
    shown: dict[str, Any] = {field: getattr(task, field, None) for field in FIELDS}
    shown["every"] = task.interval
    out = {field: _text(value) for field, value in shown.items()}
    out["args"] = json.dumps(task.args, ensure_ascii=False)
    out["kwargs"] = json.dumps(task.kwargs, ensure_ascii=False)
    return out


def shown(typed: Mapping[str, str]) -> dict[str, str]:
    """What was typed, to show again: a NUL (which no value may hold) as U+FFFD."""
    return {field: text.replace("\x00", "\ufffd") for field, text in typed.items()}


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def changes(task: Task, form: Mapping[str, str]) -> dict[str, Any]:
    """The ``update()`` keywords that make ``task`` as ``form`` says: only the fields
    that differ from it. Raises ``InvalidInput`` for a value that cannot be read."""
    wanted: dict[str, Any] = {}
    offered = fields_of(task)
    if "cron" in offered:
        wanted.update(_schedule(form))
    for field in offered:
        if field not in ("cron", "every"):
            wanted[field] = READERS[field](field, form.get(field, ""))
    current = {field: task.interval if field == "every" else getattr(task, field) for field in wanted}
    return {field: value for field, value in wanted.items() if not _same(value, current[field])}


def _same(typed: Any, stored: Any) -> bool:
    """Numbers and times compared as values (60 is 60.0; an offset is the same instant),
    the rest as JSON, so that ``[1]`` and ``[true]`` differ."""
    if isinstance(typed, datetime) and isinstance(stored, datetime):
        return typed == stored
    if _is_number(typed) and _is_number(stored):
        return bool(typed == stored)
    if isinstance(typed, enum.Enum) or isinstance(stored, enum.Enum):
        return str(getattr(typed, "value", typed)) == str(getattr(stored, "value", stored))
    return json.dumps(typed, sort_keys=True, default=str) == json.dumps(stored, sort_keys=True, default=str)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _schedule(form: Mapping[str, str]) -> dict[str, Any]:
    """``cron`` or ``every``: exactly one of them is filled in."""
    cron, every = form.get("cron", "").strip(), form.get("every", "").strip()
    if cron and every:
        raise InvalidInput("every", every, "give a cron expression or an interval, not both: clear one of them")
    if every:
        return {"every": seconds("every", every)}
    if not cron:
        raise InvalidInput("cron", "", "give a cron expression, or an interval in seconds (every)")
    return {"cron": text_field("cron", cron)}


def text_field(field: str, text: str) -> str:
    if len(text) > TEXT_LIMITS.get(field, 300):
        raise InvalidInput(field, text, f"must be at most {TEXT_LIMITS.get(field, 300)} characters")
    try:
        return plain_text(text)
    except ValueError as exc:
        raise InvalidInput(field, text, str(exc)) from None


def _number(field: str, text: str, kind: Callable[[str], Any], what: str) -> Any:
    text = text.strip()
    if not text or len(text) > NUMBER_LIMIT:
        raise InvalidInput(field, text, f"must be {what}")
    try:
        return kind(text)
    except ValueError:
        raise InvalidInput(field, text, f"must be {what}") from None


def seconds(field: str, text: str) -> float:
    value: float = _number(field, text, float, "a number of seconds")
    return value


def count(field: str, text: str) -> int:
    value: int = _number(field, text, int, "a whole number")
    return value


def optional(read: Callable[[str, str], Any]) -> Callable[[str, str], Any]:
    """Empty turns the option off (None)."""
    return lambda field, text: None if not text.strip() else read(field, text)


def _json(kind: type, what: str) -> Callable[[str, str], Any]:
    def read(field: str, text: str) -> Any:
        try:
            value = json.loads(text or ("[]" if kind is list else "{}"))
        except ValueError as exc:
            raise InvalidInput(field, text, f"not valid JSON: {exc}") from None
        except RecursionError:  # nested deeper than the parser goes: refused, never a 500
            raise InvalidInput(field, f"<{len(text)} characters>", "nested too deeply") from None
        if not isinstance(value, kind):
            raise InvalidInput(field, text, f"must be a JSON {what}")
        return value

    return read


def _choice(field: str, text: str) -> enum.StrEnum:
    kind = CHOICES[field]
    try:
        return kind(text.strip())
    except ValueError:
        raise InvalidInput(field, text, f"must be one of {', '.join(m.value for m in kind)}") from None


def moment(field: str, text: str) -> datetime:
    typed = text_field(field, text.strip())
    try:
        return iso_text(typed)
    except ValueError as exc:
        raise InvalidInput(field, text, str(exc)) from None


READERS: dict[str, Callable[[str, str], Any]] = {
    "timezone": lambda field, text: text_field(field, text.strip() or "UTC"),
    "until": optional(moment),
    "max_runs": optional(count),
    "args": _json(list, 'array, e.g. [1, "two"]'),
    "kwargs": _json(dict, 'object, e.g. {"to": "ops@example.com"}'),
    "misfire": _choice,
    "misfire_grace": seconds,
    "jitter": seconds,
    "priority": count,
    "timeout": optional(seconds),
    "max_retries": count,
    "retry_backoff": seconds,
    "overlap": _choice,
    "max_runtime": optional(seconds),
    "max_catchup": count,
    "max_lost": count,
    "queue": lambda field, text: validate.queue(text.strip()),
}
