"""What every command shares: loading the App, turning errors and bad input into one-line
click errors, logging set-up, and the output helpers.

It lives apart from the commands, and imports none of them, so that any command module
(``tickwork serve`` included) can use it without pulling in the others: the command
group at the top (``tickwork.cli.root``) is the only module that knows them all.
"""

from __future__ import annotations

import functools
import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from zoneinfo import ZoneInfo

import click

from tickwork import logs
from tickwork.app import App
from tickwork.codec import MAX_DEPTH
from tickwork.errors import InvalidInput, TickworkError
from tickwork.redact import REDACTOR
from tickwork.urls import path_from_url
from tickwork.web.auth import parse_duration

if TYPE_CHECKING:
    from rich.console import Console

    console: Console
    """Every command prints through this one console (tests swap it for a wider one)."""


def __getattr__(name: str) -> Any:
    """``console``, made on first use: rich costs ~20 ms of a command's start, and a
    worker or a server started by the CLI prints nothing through it."""
    if name == "console":
        from rich.console import Console

        return globals().setdefault("console", Console())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


log = logging.getLogger("tickwork.cli")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])


class BadApp(click.ClickException):
    """APP cannot be loaded: a usage error (exit 2), told in one line."""

    exit_code = 2


class BadInput(click.ClickException):
    """A value given on the command line that tickwork refused (``InvalidInput``): a
    usage error (exit 2), told in one line naming the field and the value."""

    exit_code = 2


# -- logging ------------------------------------------------------------------------------


def set_up_logging(verbose: int, db: str | None) -> None:
    """Log at -v / -vv's level, with every secret the process knows masked before the
    first line is written (the URL from --db or TICKWORK_DB and the API token)."""
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)]
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    REDACTOR.add_url(db or os.environ.get("TICKWORK_DB"))
    REDACTOR.add_secrets([os.environ.get("TICKWORK_API_TOKEN")])
    REDACTOR.install()


# -- loading the App ----------------------------------------------------------------------


def _shown(value: str, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(text: str) -> str:
    """A message on one line (a driver's text may span several)."""
    return re.sub(r"\s*\n\s*", " ", text.strip())


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (like uvicorn and celery) from the working directory.

    The module is a dotted path of names (no relative import such as ``.`` or
    ``../x``: the working directory is on the path instead); the attribute may be dotted.
    Anything wrong is a one-line error naming APP."""
    shown = _shown(spec)
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise BadApp(f"APP={shown}: expected module:attribute, e.g. myproject.tasks:app")
    if not all(part.isidentifier() for part in module_name.split(".")):
        raise BadApp(
            f"APP={shown}: {_shown(module_name, 60)} is not a module path: dotted names such as "
            "myproject.tasks, imported from the working directory (no '.', '..' or file paths)"
        )
    if not all(part.isidentifier() for part in attribute.split(".")):
        raise BadApp(f"APP={shown}: {_shown(attribute, 60)} is not an attribute name")
    found: object = _import(module_name, shown)
    for part in attribute.split("."):
        found = getattr(found, part, None)
    if not isinstance(found, App):
        raise BadApp(f"APP={shown}: {_shown(attribute, 60)} is not a tickwork App")
    protect(found)
    return found


def _import(module_name: str, shown: str) -> object:
    """The module, imported from the working directory; its failure told in one line."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module_shown = _shown(module_name, 60)
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise BadApp(f"APP={shown}: cannot import {module_shown}: {_first_line(str(exc), 120)}") from exc
    except Exception as exc:  # the module itself failed: say how, in one line
        log.debug("importing %s failed", module_name, exc_info=True)
        raise BadApp(
            f"APP={shown}: importing {module_shown} failed: {type(exc).__name__}: {_first_line(str(exc), 120)} "
            "(-vv shows the traceback)"
        ) from exc


def protect(app: App) -> None:
    """Mask ``app``'s database and Redis passwords in everything logged from now on."""
    REDACTOR.add_url(app.url)
    REDACTOR.add_url(app.redis_url)


def client(ctx: click.Context, *, create: bool = False) -> App:
    """An App for client commands: the --app one if given, else one on --db / TICKWORK_DB.

    Only ``db upgrade`` creates a database: a mistyped path is an error, not a new file.
    """
    obj = ctx.find_root().obj
    app = load_app(obj["app_spec"]) if obj.get("app_spec") else App(obj.get("db"))
    protect(app)
    if not create and app.url.startswith("sqlite:"):
        path = Path(path_from_url(app.url))
        if not path.exists():
            raise click.ClickException(
                f"no database at {str(path)!r}: check --db / TICKWORK_DB, or create it with `tickwork db upgrade`"
            )
    return app


# -- errors -------------------------------------------------------------------------------


def as_message(exc: TickworkError) -> click.ClickException:
    """tickwork's own error as a click error (exit 1): one line, every known secret masked."""
    return click.ClickException(one_line(REDACTOR.scrub(str(exc))))


def as_input_error(exc: InvalidInput) -> click.ClickException:
    """A refused value as a usage error (exit 2): one line naming the field and the value."""
    return BadInput(one_line(REDACTOR.scrub(str(exc))))


def errors_as_messages(func: Callable[..., R]) -> Callable[..., R]:
    """Show errors as one-line messages, not tracebacks, with every secret the process
    knows masked: refused input (``InvalidInput``) exits 2, like click's usage errors,
    anything else 1. An error that is not tickwork's own (a driver's, say, about a
    malformed URL) is named by its type; -vv logs its traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        try:
            return func(*args, **kwargs)
        except InvalidInput as exc:
            raise as_input_error(exc) from exc
        except TickworkError as exc:
            raise as_message(exc) from exc
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            log.debug("unexpected error", exc_info=True)
            message = _first_line(REDACTOR.scrub(str(exc)))
            raise click.ClickException(f"{type(exc).__name__}: {message} (-vv shows the traceback)") from exc

    return wrapper


# -- input --------------------------------------------------------------------------------


class Clear:
    """What ``none`` on an option that can turn a setting off converts to (a value
    distinct from None, which click gives for an option not given)."""

    def __repr__(self) -> str:
        return "none"


CLEAR = Clear()
_SECONDS = re.compile(r"\d+(?:\.\d+)?")


class Duration(click.ParamType[Any, Any]):
    """An option's duration, written ``30s``, ``15m``, ``12h``, ``7d`` (or ``1h30m``), as
    seconds; anything else is a usage error (exit 2) naming the option and the value.

    ``bare``: a plain number is seconds too (the options that always took seconds);
    without it a bare ``7`` is refused as ambiguous. ``allow_zero``: 0 is accepted.
    ``clearable``: ``none`` gives ``CLEAR`` (the setting turned off)."""

    name = "duration"

    def __init__(self, *, bare: bool = False, allow_zero: bool = False, clearable: bool = False) -> None:
        self.bare, self.allow_zero, self.clearable = bare, allow_zero, clearable

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return self._checked(float(value), value, param, ctx)
        if value is CLEAR or (self.clearable and str(value).strip().lower() == "none"):
            return CLEAR
        text = str(value).strip()
        negative = text.startswith("-")
        try:
            seconds = self._seconds(text.removeprefix("-").strip() if negative else text)
        except ValueError:
            seconds = None
        if seconds is None:
            self.fail(f"{value!r}: expected {self._expected()}", param, ctx)
        return self._checked(-seconds if negative else seconds, value, param, ctx)

    def _seconds(self, text: str) -> float:
        if self.bare and _SECONDS.fullmatch(text):
            return float(text)
        return parse_duration(text)

    def _expected(self) -> str:
        words = "a number of seconds or a duration" if self.bare else "a duration"
        return f"{words} such as 30s, 15m, 12h, 7d or 1h30m" + (", or none" if self.clearable else "")

    def _checked(self, seconds: float, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if seconds < 0 or (seconds == 0 and not self.allow_zero):
            self.fail(f"{value!r}: must be {'0s or longer' if self.allow_zero else 'longer than 0s'}", param, ctx)
        return seconds


DURATION = Duration()
"""A duration that needs its unit (``--older-than 7d``: a bare 7 would be ambiguous)."""
SECONDS = Duration(bare=True)
"""Seconds, as a plain number or a duration; longer than 0."""
SECONDS_OR_ZERO = Duration(bare=True, allow_zero=True)
SECONDS_OR_NONE = Duration(bare=True, clearable=True)
"""Seconds, or ``none`` to turn the limit off (``CLEAR``)."""


class Moment(click.ParamType[Any, Any]):
    """An ISO 8601 time with an offset (``2030-01-01T09:00:00+01:00``, or ``Z``);
    ``clearable``: ``none`` gives ``CLEAR``."""

    name = "iso8601"

    def __init__(self, *, clearable: bool = False) -> None:
        self.clearable = clearable

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime) or value is CLEAR:
            return value
        if self.clearable and str(value).strip().lower() == "none":
            return CLEAR
        try:
            when = datetime.fromisoformat(str(value).strip())
        except ValueError:
            self.fail(f"{value!r}: expected an ISO 8601 time such as 2030-01-01T09:00:00+01:00", param, ctx)
        if when.tzinfo is None:
            self.fail(f"{value!r}: give the offset too, e.g. {when.isoformat()}+00:00 (or Z for UTC)", param, ctx)
        return when


class Count(click.ParamType[Any, Any]):
    """A whole number, 1 or more; ``clearable``: ``none`` gives ``CLEAR``."""

    name = "integer"

    def __init__(self, *, clearable: bool = False) -> None:
        self.clearable = clearable

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is CLEAR or (self.clearable and str(value).strip().lower() == "none"):
            return CLEAR
        try:
            number = int(str(value).strip())
        except ValueError:
            number = 0
        if number < 1:
            self.fail(
                f"{value!r}: expected a whole number, 1 or more" + (", or none" if self.clearable else ""), param, ctx
            )
        return number


def parse_json(field: str, text: str) -> Any:
    """An option's JSON; bad or too deeply nested text is InvalidInput naming ``field``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(field, text, f"not valid JSON: {exc.msg}") from exc
    except RecursionError as exc:
        raise InvalidInput(field, text, f"nested too deeply (at most {MAX_DEPTH} levels)") from exc


def parse_datetime(field: str, text: str | None) -> datetime | None:
    """An option's ISO 8601 time (None when the option was not given)."""
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidInput(field, text, "not an ISO 8601 datetime") from exc


# -- output -------------------------------------------------------------------------------


def both_zones(when: datetime, timezone: str) -> str:
    """``2025-10-26 02:30:00 CEST +0200  (2025-10-26 00:30:00 UTC)``: a fire time in its
    own zone beside UTC, since a wall time alone is ambiguous on fall-back nights."""
    local = when.astimezone(ZoneInfo(timezone))
    return f"{local:%Y-%m-%d %H:%M:%S %Z %z}  ({when:%Y-%m-%d %H:%M:%S} UTC)"


def json_option(help_text: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """The ``--json`` flag of a read command (its value reaches the command as ``as_json``)."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def print_json(value: Any) -> None:
    """``value`` as one line of JSON on stdout (what ``--json`` prints), keys sorted."""
    click.echo(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str))


def refuse_without_tasks(app: App, spec: str) -> None:
    """A node of an App that registers no task would claim nothing, for ever: a usage error."""
    if not app.registry.names():
        raise BadApp(
            f"APP={spec!r} registers no task: a worker would have nothing to run "
            "(register functions with @app.task in the module APP names, or in one it imports)"
        )


def log_options(who: str) -> Callable[[F], F]:
    """``--log-level`` and ``--log-format`` of a long-running command (``who``: what its
    start, stop and outage lines are about, as the help says)."""

    def add(command: F) -> F:
        command = click.option(
            "--log-format",
            type=click.Choice(logs.FORMATS),
            default="text",
            show_default=True,
            help="json: one JSON object per line (time, level, logger, message and the run's fields), "
            "for log shippers.",
        )(command)
        return click.option(
            "--log-level",
            type=click.Choice(logs.LEVELS, case_sensitive=False),
            help=f"WARNING (the default, unless -v / -vv): warnings and errors, and {who} start, stop and "
            "outage lines; INFO adds a line for every completed run; DEBUG everything.",
        )(command)

    return add
