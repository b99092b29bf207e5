"""What the demo shows: one row per example task (its latest run, runs so far, next due)
above a log of the latest runs, sized to the terminal; plain lines when not a terminal."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from tickwork.app import App
from tickwork.model import Execution, ExecutionStatus, Status

STATUS_STYLE = {
    ExecutionStatus.RUNNING: "yellow",
    ExecutionStatus.COMPLETED: "green",
    ExecutionStatus.FAILED: "red",
    ExecutionStatus.CANCELLED: "magenta",
    ExecutionStatus.TIMED_OUT: "red",
    ExecutionStatus.SKIPPED: "dim",
}
TABLE_LINES = 8
"""Lines the table of examples takes: title, header, rule, five rows."""
_COUNT_LIMIT = 10_000


@dataclass(frozen=True)
class Example:
    """One example task of the demo and the kind of schedule it shows."""

    task_id: int
    kind: str
    name: str


def _short(name: str) -> str:
    return name.removeprefix("demo.")


def _took(e: Execution) -> str:
    if e.started_at and e.finished_at:
        return f"{(e.finished_at - e.started_at).total_seconds() * 1000:.0f} ms"
    return ""


def _detail(e: Execution) -> str:
    if e.error:
        return f"{e.error.type}: {e.error.message}"
    return "" if e.result is None else str(e.result)


def examples_table(app: App, examples: Sequence[Example]) -> Table:
    table = Table(title="example tasks", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=True)
    for column, width in (("kind", 14), ("task", 15), ("latest run", 10), ("runs", 4), ("next due", 9)):
        table.add_column(
            column,
            no_wrap=True,
            overflow="ellipsis",
            min_width=width,
            max_width=width,
            justify="right" if column == "runs" else "left",
        )
    table.add_column("result / error", no_wrap=True, overflow="ellipsis", ratio=1)
    for example in examples:
        table.add_row(*_example_row(app, example))
    return table


def _example_row(app: App, example: Example) -> list[str]:
    task = app.get(example.task_id)
    runs = app.executions(example.task_id, limit=_COUNT_LIMIT)
    latest = runs[0] if runs else None
    status = "waiting" if latest is None else f"[{STATUS_STYLE.get(latest.status, '')}]{latest.status.value}[/]"
    due = f"{task.next_run_at.astimezone():%H:%M:%S}" if task.status is Status.PENDING else task.status.value.lower()
    detail = "" if latest is None else _detail(latest)
    return [example.kind, _short(example.name), status, str(len(runs)), due, escape(detail)]


def log_line(e: Execution, names: dict[int, str]) -> Text:
    """One run as a line: when it started (or its slot, before), task (try), status, how
    long, result or error."""
    name = _short(names.get(e.task_id, str(e.task_id)))
    line = Text(no_wrap=True, overflow="ellipsis")
    when = e.started_at or e.scheduled_for
    line.append(f"{when.astimezone():%H:%M:%S} {name + f' ({e.attempt})':<20} ")
    line.append(f"{e.status.value:<9}", style=STATUS_STYLE.get(e.status, ""))
    line.append(f" {_took(e):>7}  {_detail(e)}")
    return line


def screen(app: App, examples: Sequence[Example], height: int) -> RenderableType:
    """The live part of the demo in ``height`` lines: the examples, then the latest runs."""
    names = {x.task_id: x.name for x in examples}
    room = max(height - TABLE_LINES - 2, 1)
    runs = app.executions(limit=room)
    log = [log_line(e, names) for e in runs]
    title = Text("latest runs (Ctrl-C stops)", style="bold", no_wrap=True, overflow="ellipsis")
    return Group(examples_table(app, examples), title, *log)


class PlainLog:
    """Outside a terminal: each run once it has ended, as a plain line."""

    def __init__(self, console: Console, examples: Sequence[Example]) -> None:
        self.console = console
        self.names = {x.task_id: x.name for x in examples}
        self.shown: set[int] = set()

    def poll(self, app: App) -> None:
        ended = [e for e in app.executions(limit=100) if e.status is not ExecutionStatus.RUNNING]
        for e in sorted(ended, key=lambda e: e.id):
            if e.id not in self.shown:
                self.shown.add(e.id)
                self.console.print(
                    log_line(e, self.names), highlight=False, no_wrap=True, overflow="ellipsis", crop=True
                )


def tickwork_command() -> list[str]:
    """How to run ``tickwork`` as this process was run, from the working directory."""
    script = Path(sys.argv[0])
    if script.name == "tickwork" and script.exists():
        return [_near(script)]
    return [_near(Path(sys.executable)), "-m", "tickwork.cli"]


def _near(path: Path) -> str:
    """``path`` relative to the working directory when that is shorter, else absolute."""
    absolute = path.absolute()
    relative = os.path.relpath(absolute)
    if relative.startswith(".."):
        return str(absolute)
    return relative if "/" in relative else f"./{relative}"


def sqlite_url(db_path: str) -> str:
    path = Path(db_path)
    shown = _near(path).removeprefix("./")
    return f"sqlite:///{shown}"


def shell_lines(words: Sequence[str], width: int, indent: str = "  ") -> list[str]:
    """A command as shell lines of at most ``width`` columns (continued with ``\\``) when
    its words allow: pasted into a shell, it runs as printed."""
    quoted = [shlex.quote(w) for w in words]
    lines: list[str] = []
    current = indent + quoted[0]
    for word in quoted[1:]:
        if len(current) + 1 + len(word) + 2 > width:
            lines.append(current + " \\")
            current = indent * 2 + word
        else:
            current += " " + word
    lines.append(current)
    return lines


def closing_hint(console: Console, db_path: str, examples: Sequence[Example]) -> None:
    """Commands to look at what the demo did, each runnable as printed from here."""
    base = [*tickwork_command(), "--db", sqlite_url(db_path)]
    flaky = next((x for x in examples if x.name == "demo.flaky_sync"), examples[0])
    console.print(f"Inspect them (from {Path.cwd()}):", markup=False, highlight=False)
    width = min(console.width, 80)
    for words in ([*base, "tasks", "list"], [*base, "executions", str(flaky.task_id)]):
        for line in shell_lines(words, width):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
