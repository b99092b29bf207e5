"""What a person typed into the dashboard's URLs and forms, read leniently: a bad filter
is dropped with a note on the page rather than refused (the API is the strict
interface), and a redirect target stays on this site."""

from __future__ import annotations

import enum
from typing import TypeVar

from tickwork.errors import InvalidInput
from tickwork.web.schemas import plain_text

E = TypeVar("E", bound=enum.StrEnum)


def task_id(value: str) -> int:
    if not (value.isascii() and value.isdigit()) or len(value) > 19:  # "²".isdigit() is True
        raise InvalidInput("task_id", value, "must be a positive integer")
    return int(value)


def offset(value: str, notes: list[str]) -> int:
    if value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    notes.append("Bad offset ignored.")
    return 0


def choice(kind: type[E], value: str, field: str, notes: list[str]) -> E | None:
    if not value:
        return None
    try:
        return kind(value.upper())
    except ValueError:
        notes.append(f"Unknown {field} ignored.")
        return None


def text(value: str, field: str, notes: list[str]) -> str:
    """A filter the stores can compare (no NUL, valid Unicode), else none."""
    try:
        return plain_text(value)
    except ValueError:
        notes.append(f"Unusable {field} ignored.")
        return ""


def local(target: str) -> str:
    """Only same-site paths: a crafted ?next= must not send a signed-in user elsewhere."""
    if not target.startswith("/") or target.startswith(("//", "/\\")) or any(c in target for c in "\r\n\\"):
        return "/"
    return target
