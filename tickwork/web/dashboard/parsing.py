"""What a person typed into the dashboard's URLs and forms, read leniently: a bad filter
is dropped with a note on the page rather than refused (the API is the strict
interface), and a redirect target stays on this site."""

from __future__ import annotations

import enum
import re
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from tickwork.errors import InvalidInput
from tickwork.web.schemas import plain_text

E = TypeVar("E", bound=enum.StrEnum)
AGO = re.compile(r"(?:(\d{1,4})d)?(?:(\d{1,5})h)?(?:(\d{1,6})m)?(?:(\d{1,8})s)?")
TIME_TEXT_LIMIT = 40


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


def moment(value: str, field: str, notes: list[str], now: datetime) -> datetime | None:
    """A time filter: how long ago (``15m``, ``2h``, ``7d``, ``1h30m``) or an ISO 8601
    time (UTC unless it has an offset), else none, with a note naming the filter."""
    value = value.strip()
    if not value:
        return None
    ago = AGO.fullmatch(value.lower()) if len(value) <= TIME_TEXT_LIMIT else None
    if ago and any(ago.groups()):
        days, hours, minutes, secs = (int(g or 0) for g in ago.groups())
        try:
            return now - timedelta(days=days, hours=hours, minutes=minutes, seconds=secs)
        except OverflowError:
            pass
    else:
        try:
            parsed = datetime.fromisoformat(value) if len(value) <= TIME_TEXT_LIMIT else None
            if parsed is not None:
                return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
        except (ValueError, OverflowError):  # 2030-02-30; year 1 at +01:00 is before UTC's year 1
            pass
    notes.append(f"Bad {field} ignored: give how long ago (15m, 2h, 7d) or an ISO 8601 time.")
    return None


def local(target: str) -> str:
    """Only same-site paths: a crafted ?next= must not send a signed-in user elsewhere."""
    if not target.startswith("/") or target.startswith(("//", "/\\")) or any(c in target for c in "\r\n\\"):
        return "/"
    return target
