"""A task's arguments checked against its function's signature, before anything is stored.

A node calls a task as ``func(ctx, *args, **kwargs)`` (``func(*args, **kwargs)`` for a
task registered with ``context=False``). Were the arguments not checked, a missing or
misspelled keyword would be stored and only fail on a node, at run time, once per
retry and once per slot of a recurring task. So the checks run where the function is
known, in the process that schedules: ``check_signature`` when a function is
registered, ``check_call`` when a task is scheduled or updated.

Both rely on ``inspect.signature``, which follows ``__wrapped__`` (a decorator written
with ``functools.wraps`` is checked as the function it wraps), sees through
``functools.partial`` and bound methods, and gives a class the signature of its
constructor. A callable whose signature cannot be read (some builtins and C
functions) is accepted unchecked: refusing it would refuse code that works.

This module imports nothing of the registry (which calls it): a definition is
anything with a ``name``, a ``func`` and ``options.context``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from tickwork.errors import InvalidInput

P = inspect.Parameter
POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
CONTEXT = object()
"""Stands for the context in a binding: the node passes the real one at run time."""


class _Options(Protocol):
    @property
    def context(self) -> bool: ...


class Definition(Protocol):
    """What ``check_call`` needs of a registered task (``registry.TaskDef`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def func(self) -> Callable[..., Any]: ...

    @property
    def options(self) -> _Options: ...


def signature_of(func: Callable[..., Any]) -> inspect.Signature | None:
    """``func``'s signature, or None when Python cannot tell it (then nothing is checked)."""
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):
        return None


def label(func: Callable[..., Any]) -> str:
    """How a message names a function: ``module.qualname`` where it has them."""
    qualname = getattr(func, "__qualname__", None)
    if qualname is None:
        return repr(func)
    module = getattr(func, "__module__", None)
    return f"{module}.{qualname}" if module else qualname


def check_signature(func: Callable[..., Any], context: bool) -> None:
    """Refuse, at registration, a function the node could not call with a context.

    With ``context=True`` the node passes the context as the first positional argument,
    so the function needs a positional parameter (or ``*args``) before the task's own;
    refused now, not at each run. With ``context=False`` any signature will do."""
    if not callable(func):
        raise InvalidInput("func", func, "a task must be a function")
    if not context:
        return
    signature = signature_of(func)
    if signature is None:
        return
    first = next(iter(signature.parameters.values()), None)
    if first is not None and (first.kind in POSITIONAL or first.kind is P.VAR_POSITIONAL):
        return
    if first is None:
        shown = "(it takes no parameters)"
    elif first.kind is P.VAR_KEYWORD:
        shown = "(it takes keyword arguments only)"
    else:
        shown = f"({first.name!r} is keyword-only)"
    raise InvalidInput(
        "func",
        label(func),
        f"cannot take the context as its first parameter {shown}: declare it as def f(ctx, ...) "
        "or register it with @app.task(context=False) to be called without one",
    )


def check_call(definition: Definition, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Refuse ``args``/``kwargs`` that the task's function could not be called with.

    Raises ``InvalidInput`` naming ``args`` (too many positional arguments, or a missing
    positional-only one) or ``kwargs`` (a missing, unexpected or doubly given
    argument, whose name is the value), so the caller knows which to fix."""
    shape = _shape_of(definition.func)
    if shape is None:
        return
    # Whether a call binds depends only on how many positional arguments it gives and
    # which names: a bulk schedule of one task checks each such form once.
    form = (definition.options.context, len(args), frozenset(kwargs))
    if form in shape.accepted:
        return
    _Binding(definition, shape, list(args), dict(kwargs)).check()
    if len(shape.accepted) < ACCEPTED_FORMS:
        shape.accepted.add(form)


ACCEPTED_FORMS = 64
"""Forms of call remembered per function: enough for any real task, bounded for one
given a new keyword name per call."""


@dataclasses.dataclass(frozen=True)
class _Shape:
    """What a binding needs of a signature, worked out once per function: reading a
    signature costs more than checking a call, and a bulk schedule checks thousands."""

    signature: inspect.Signature
    positional: tuple[inspect.Parameter, ...]
    var_positional: bool
    var_keyword: bool
    accepted: set[tuple[bool, int, frozenset[Any]]] = dataclasses.field(default_factory=set, compare=False)
    """Forms of call (context, positional count, keyword names) already checked and bound."""


def _shape_of(func: Callable[..., Any]) -> _Shape | None:
    try:
        return _cached_shape(func)
    except TypeError:  # an unhashable callable: worked out each time
        return _shape(func)


def _shape(func: Callable[..., Any]) -> _Shape | None:
    signature = signature_of(func)
    if signature is None:
        return None
    params = list(signature.parameters.values())
    return _Shape(
        signature,
        tuple(p for p in params if p.kind in POSITIONAL),
        any(p.kind is P.VAR_POSITIONAL for p in params),
        any(p.kind is P.VAR_KEYWORD for p in params),
    )


_cached_shape = functools.lru_cache(maxsize=1024)(_shape)


class _Binding:
    """One attempted call, explained parameter by parameter. Python's own
    ``Signature.bind`` says *that* a call fails, in words that vary between versions,
    not which argument; and Python 3.11's refuses a call that works (the name of a
    positional-only parameter given as a key of the function's ``**kwargs``).
    tests/test_binding.py checks these rules against real calls of many signatures."""

    def __init__(self, definition: Definition, shape: _Shape, args: list[Any], kwargs: dict[str, Any]) -> None:
        self.name, self.signature = definition.name, shape.signature
        self.context = definition.options.context
        self.args, self.kwargs = args, kwargs
        self.given = [CONTEXT, *args] if self.context else args
        self.positional = shape.positional
        self.var_positional = shape.var_positional
        self.var_keyword = shape.var_keyword
        self.by_position = {p.name for p in self.positional[: len(self.given)]}
        self.context_param = self.positional[0].name if self.context and self.positional else None

    def check(self) -> None:
        self._positional_count()
        for key in self.kwargs:
            self._keyword(key)
        self._missing()

    def _positional_count(self) -> None:
        if self.var_positional or len(self.given) <= len(self.positional):
            return
        room = len(self.positional) - (1 if self.context else 0)
        raise InvalidInput(
            "args",
            self.args,
            f"{self.name} takes {_count(room, 'positional argument')}{' after the context' if self.context else ''}, "
            f"{len(self.args)} given",
        )

    def _keyword(self, key: str) -> None:
        if not isinstance(key, str):
            raise InvalidInput("kwargs", key, "argument names must be strings")
        param = self.signature.parameters.get(key)
        if param is not None and param.kind is P.POSITIONAL_ONLY and self.var_keyword:
            return  # taken by the function's **kwargs under the same name
        if param is not None and param.kind is P.VAR_POSITIONAL and self.var_keyword:
            return  # a key of **kwargs that happens to share the name of *args
        if key == self.context_param:
            reason = f"{key!r} of {self.name} is the context, which the node passes: it cannot be in kwargs"
        elif param is not None and param.kind is P.POSITIONAL_ONLY:
            reason = f"argument {key!r} of {self.name} is positional-only: give it in args"
        elif key in self.by_position:
            reason = f"argument {key!r} of {self.name} is given twice: in args and in kwargs"
        elif (param is not None and param.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)) or self.var_keyword:
            return
        else:
            reason = self._unexpected(key)
        raise InvalidInput("kwargs", key, reason)

    def _unexpected(self, key: str) -> str:
        keywords = (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)
        names = [
            p.name for p in self.signature.parameters.values() if p.kind in keywords and p.name != self.context_param
        ]
        takes = f"it takes: {', '.join(names)}" if names else "it takes no keyword arguments"
        return f"unexpected argument {key!r} of {self.name}; {takes}"

    def _missing(self) -> None:
        """The required parameters left unbound: positional-only ones first, which only
        ``args`` can give, then the others (named in ``kwargs``)."""
        unbound = [
            p
            for p in self.signature.parameters.values()
            if p.default is P.empty
            and p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)
            and p.name not in self.by_position
            and (p.kind is P.POSITIONAL_ONLY or p.name not in self.kwargs)
        ]
        only = [p.name for p in unbound if p.kind is P.POSITIONAL_ONLY]
        named = [p.name for p in unbound if p.kind is not P.POSITIONAL_ONLY]
        if only:
            them = "it" if len(only) == 1 else "them"
            reason = f"missing required positional-only {_names(only)} of {self.name}: give {them} in args"
            raise InvalidInput("args", only[0], reason)
        if named:
            raise InvalidInput("kwargs", named[0], f"missing required {_names(named)} of {self.name}")


def _names(names: list[str]) -> str:
    listed = ", ".join(repr(n) for n in names)
    return f"argument {listed}" if len(names) == 1 else f"arguments {listed}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
