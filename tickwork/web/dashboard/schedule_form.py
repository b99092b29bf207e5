"""The "Schedule a task" form: what was typed, read into ``App.schedule()``'s keywords.

A person types text, so every value is read here with the edit form's readers
(``edit_form``): JSON for the arguments, numbers, ISO 8601 for ``at``. A mistake raises
``InvalidInput`` naming the field, shown next to the form with what was typed kept; the
values themselves are then checked by ``App.schedule()``, exactly as from Python or the
API (the registered name, the cron expression, the zone, the payload's size).

``when`` picks one way to schedule; a field that belongs to another way and is filled
in is refused rather than silently dropped: a cron expression typed under "once now"
would otherwise schedule a single run at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from tickwork.errors import InvalidInput
from tickwork.web.dashboard import edit_form

WHEN = {
    "now": "once, now",
    "delay": "once, after a delay",
    "at": "once, at a time",
    "cron": "recurring, on a cron schedule",
    "every": "recurring, at a fixed interval",
}
"""The ways to schedule (the ``when`` field's values), with their labels."""
WHEN_FIELDS = {"delay": ("delay",), "at": ("at",), "cron": ("cron", "timezone"), "every": ("every",)}
"""The fields each way reads (the timezone is only read for cron, and may stay filled in)."""
FIELDS = (
    "name",
    "args",
    "kwargs",
    "when",
    "delay",
    "at",
    "cron",
    "timezone",
    "every",
    "key",
    "priority",
    "max_retries",
)
KEY_LIMIT = 300
NAME_LIMIT = 300


class ScheduleForm(BaseModel):
    """The posted form: every field is text, empty when left out."""

    csrf: str = ""
    name: str = ""
    args: str = ""
    kwargs: str = ""
    when: str = "now"
    delay: str = ""
    at: str = ""
    cron: str = ""
    timezone: str = ""
    every: str = ""
    key: str = ""
    priority: str = ""
    max_retries: str = ""

    def values(self) -> dict[str, str]:
        """What was typed, by field (without the CSRF token), to show again."""
        return {field: getattr(self, field) for field in FIELDS}


def blank() -> dict[str, str]:
    """The form as first shown: run once now, no arguments, in UTC."""
    return {**{field: "" for field in FIELDS}, "when": "now", "args": "[]", "kwargs": "{}", "timezone": "UTC"}


def request_of(form: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """The task name and ``schedule()``'s keywords that ``form`` asks for; raises
    ``InvalidInput`` naming the field for a value that cannot be read."""
    name = edit_form.text_field("name", form.get("name", "").strip())
    if not name:
        raise InvalidInput("name", "", "choose a registered task name")
    if len(name) > NAME_LIMIT:
        raise InvalidInput("name", name, f"must be at most {NAME_LIMIT} characters")
    keywords: dict[str, Any] = {
        "args": edit_form.READERS["args"]("args", form.get("args", "")),
        "kwargs": edit_form.READERS["kwargs"]("kwargs", form.get("kwargs", "")),
        **_when(form),
    }
    key = form.get("key", "")
    if key.strip():
        if len(key) > KEY_LIMIT:
            raise InvalidInput("key", key, f"must be at most {KEY_LIMIT} characters")
        keywords["key"] = edit_form.text_field("key", key)
    for field in ("priority", "max_retries"):
        value = edit_form.optional(edit_form.count)(field, form.get(field, ""))
        if value is not None:
            keywords[field] = value
    return name, keywords


def _when(form: Mapping[str, str]) -> dict[str, Any]:
    """The keywords of the chosen way to schedule (none for "once now")."""
    when = form.get("when", "").strip() or "now"
    if when not in WHEN:
        raise InvalidInput("when", when, f"must be one of {', '.join(WHEN)}")
    for other, fields in WHEN_FIELDS.items():
        for field in fields:
            typed = form.get(field, "").strip()
            if other != when and field != "timezone" and typed:
                raise InvalidInput(field, typed, f"is for {WHEN[other]!r}: choose that under When, or clear it")
    if when == "delay":
        return {"delay": edit_form.seconds("delay", form.get("delay", ""))}
    if when == "at":
        return {"at": edit_form.moment("at", form.get("at", ""))}
    if when == "every":
        return {"every": edit_form.seconds("every", form.get("every", ""))}
    if when == "cron":
        cron = form.get("cron", "").strip()
        if not cron:
            raise InvalidInput("cron", "", "give a cron expression, e.g. */5 * * * *")
        return {
            "cron": edit_form.text_field("cron", cron),
            "timezone": edit_form.READERS["timezone"]("timezone", form.get("timezone", "")),
        }
    return {}
