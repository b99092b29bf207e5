"""How the long-running commands (``tickwork worker``, ``tickwork serve``) log: the level
(``--log-level``) and the line format (``--log-format``: text, or one JSON object per
line for log shippers).

The default level, WARNING, keeps what a node has always shown: warnings and errors,
and the node's own start, stop and outage lines (the "tickwork" loggers at INFO).
Lines about each routine run (a completed run) are marked ``routine`` and shown only
from INFO on, so a busy node's default output stays the lines worth reading.

A JSON line has ``time`` (ISO 8601, UTC), ``level``, ``logger`` and ``message``, then
every field the record was given with ``extra=`` (a run's ``task_name``, ``task_id``,
``execution_id``, ``attempt``, ``status``, ...), then ``exception`` when it has one.
Secrets are masked in the fields as in the message (tickwork/redact.py).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any

from tickwork.redact import REDACTOR
from tickwork.urls import masked

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMATS = ("text", "json")
DEFAULT_LEVEL = "WARNING"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
ROUTINE = "routine"
"""The ``extra=`` key that marks a routine line (shown from INFO on, not by default)."""

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", ROUTINE}
_STANDARD |= {"color_message"}  # uvicorn's copy of the message with terminal colours


def database_of(store: object) -> str:
    """A store's database as a URL with its password masked, for a node's start-up line
    (the store protocol names none: read from the SQL stores' dialects, else the type)."""
    dialect = getattr(store, "dialect", None)
    url = getattr(dialect, "url", None)
    if isinstance(url, str):
        return masked(url)
    path = getattr(dialect, "path", None)
    if isinstance(path, str):
        return f"sqlite:///{os.path.abspath(path)}"
    return type(store).__name__


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        line: dict[str, Any] = {
            "time": moment.replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = REDACTOR.scrub(value) if isinstance(value, str) else value
        if record.exc_info and not record.exc_text:
            record.exc_text = REDACTOR.scrub(self.formatException(record.exc_info))
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(line, ensure_ascii=False, default=str)


_routine_from = logging.NOTSET
"""The level from which routine lines show, as configure() set it (NOTSET: not set up
here, the loggers' own levels decide)."""
_format = "text"


def json_lines() -> bool:
    """The process logs one JSON object per line (``configure(fmt="json")``): a server's
    own loggers (uvicorn's) must then write through the same handlers."""
    return _format == "json"


def routine_shown() -> bool:
    """Whether a routine line would show: lets a node skip building one per run at the
    default level, where it would be dropped anyway (a hot path)."""
    return _routine_from <= logging.INFO


class RoutineFilter(logging.Filter):
    """Drops routine records (``extra={"routine": True}``) below ``level``."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return not (getattr(record, ROUTINE, False) and record.levelno < self.level)


def configure(level: str | None = None, fmt: str = "text") -> None:
    """Set up the process's log lines for a node or a server.

    ``level`` None keeps the level the global -v / -vv chose (WARNING without them);
    a level given here replaces it. At WARNING the "tickwork" loggers still tell the
    node's INFO lines (start, stop, outages), as a node always has; routine lines show
    from INFO on. ``fmt``: "text" or "json", on every handler of the root logger."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: expected one of {', '.join(FORMATS)}")
    root = logging.getLogger()
    if level is not None:
        if level.upper() not in LEVELS:
            raise ValueError(f"log level {level!r}: expected one of {', '.join(LEVELS)}")
        root.setLevel(level.upper())
        logging.getLogger("tickwork").setLevel(logging.NOTSET)
    threshold = root.getEffectiveLevel()
    global _routine_from
    _routine_from = threshold
    if threshold == logging.WARNING:
        logging.getLogger("tickwork").setLevel(logging.INFO)
    if not root.handlers:
        root.addHandler(logging.StreamHandler(sys.stderr))
    global _format
    _format = fmt
    formatter = JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)
    for handler in root.handlers:
        handler.setFormatter(formatter)
        for old in [f for f in handler.filters if isinstance(f, RoutineFilter)]:
            handler.removeFilter(old)
        handler.addFilter(RoutineFilter(threshold))
    REDACTOR.install()
