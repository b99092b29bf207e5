"""Registered task functions: the only code a node will ever run.

A stored task names its function; the node looks the name up here. Names never come
with import paths, so nothing read from the database can make a node import or call
anything that was not registered in the application's own code.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from tickwork.binding import check_signature
from tickwork.errors import InvalidInput, UnknownTask
from tickwork.model import Misfire, OnLost, Overlap

SHOWN_NAMES = 10
"""An unknown task name's message lists at most this many registered names."""


class Isolation(enum.StrEnum):
    """Where a task's function runs on its node."""

    THREAD = "thread"  # one of the node's run threads (async tasks: its event loop)
    PROCESS = "process"  # a child process, terminated when the run is cancelled


@dataclasses.dataclass(frozen=True)
class TaskOptions:
    """Per-task defaults set at registration; ``schedule()`` may override them."""

    timeout: float | None = None
    max_retries: int = 0
    retry_backoff: float = 1.0
    misfire: Misfire | None = None
    misfire_grace: float | None = None
    jitter: float = 0.0
    priority: int = 0
    max_catchup: int = 100
    overlap: Overlap = Overlap.SKIP
    on_lost: OnLost = OnLost.RETRY
    max_lost: int = 3
    queue: str = "default"
    max_running: int | None = None
    """At most this many runs of the name at once, across every node (None: no limit)."""
    rate_limit: str | None = None
    """At most this many starts of the name per window, across every node: ``"100/m"``."""
    max_runtime: float | None = None
    isolation: Isolation = Isolation.THREAD
    kill_grace: float = 5.0
    context: bool = True
    """Whether the node passes the run's ``Context`` as the first argument; False
    calls ``func(*args, **kwargs)``, for functions that have no use for it."""


@dataclasses.dataclass(frozen=True)
class TaskDef:
    name: str
    func: Callable[..., Any]
    options: TaskOptions

    is_async: bool = dataclasses.field(init=False, repr=False, compare=False)
    """Whether ``func`` is a coroutine function: read once, not on every run."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.func))


class Registry:
    def __init__(self) -> None:
        self._by_name: dict[str, TaskDef] = {}
        self._by_func: dict[Callable[..., Any], TaskDef] = {}

    def add(self, name: str, func: Callable[..., Any], options: TaskOptions) -> TaskDef:
        """Register ``func`` under ``name``; refused, and nothing registered, when a node
        could not call it as ``options.context`` says (checked here so that every way of
        registering checks it)."""
        check_signature(func, options.context)
        existing = self._by_name.get(name)
        if existing is not None and existing.func is not func:
            raise InvalidInput("name", name, "another function is already registered under this name")
        definition = TaskDef(name, func, options)
        self._by_name[name] = definition
        self._by_func[func] = definition
        return definition

    def resolve(self, task: str | Callable[..., Any]) -> TaskDef:
        """The definition for a name or a registered function."""
        if isinstance(task, str):
            found = self._by_name.get(task)
            if found is None:
                raise UnknownTask("name", task, self._unknown_reason(task))
            return found
        found = self._by_func.get(task)
        if found is None:
            label = getattr(task, "__qualname__", repr(task))
            raise UnknownTask("task", label, "function is not registered with @app.task")
        return found

    def _unknown_reason(self, name: str) -> str:
        """Why ``name`` is refused: the registered names (the first few) and the closest one."""
        names = self.names()
        if not names:
            return "no task is registered under this name (no task is registered at all)"
        shown = ", ".join(names[:SHOWN_NAMES]) + (
            f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else ""
        )
        reason = f"no task is registered under this name; registered: {shown}"
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        if not close:  # a short name given for a dotted one: "send_email" for "myproject.tasks.send_email"
            close = [n for n in names if n.rsplit(".", 1)[-1] == name.rsplit(".", 1)[-1]][:1]
        return f"{reason}; did you mean {close[0]}?" if close else reason

    def get(self, name: str) -> TaskDef | None:
        return self._by_name.get(name)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def queues(self) -> list[str]:
        """The queues the registered tasks go to by default: what a node serves unless told."""
        return sorted({d.options.queue for d in self._by_name.values()})

    def __iter__(self) -> Iterator[TaskDef]:
        return iter(self._by_name.values())
