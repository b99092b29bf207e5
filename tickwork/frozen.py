"""Frozen dataclasses built at a fraction of their own ``__init__``'s cost, for the paths
that make one per task (a claim's Task per row, a bulk schedule's NewTask per item).

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: ~8 µs
for Task's 51 fields here. An unfrozen twin with the same slots and defaults is filled
the plain way (~1 µs), then given the real class: the very object ``cls(...)`` makes,
frozen from then on. tests/test_task_decoding.py checks the result is an ordinary
instance; where the runtime refuses the class change, the class itself is used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")


def constructor(cls: type[_T]) -> Callable[..., _T]:
    """``cls(...)``, by position or by name, for a frozen dataclass with slots whose
    defaults are plain values (a ``default_factory`` makes it fall back to ``cls``)."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if any(f.default_factory is not dataclasses.MISSING for f in fields):
        return cls
    specs = [(f.name, Any, dataclasses.field(default=f.default)) for f in fields]
    twin = dataclasses.make_dataclass(f"_{cls.__name__}BeingBuilt", specs, slots=True)
    if twin.__slots__ != getattr(cls, "__slots__", None):  # type: ignore[attr-defined]
        return cls

    def make(*values: Any, **named: Any) -> _T:
        built: Any = twin(*values, **named)  # (not typing.cast: a call more per object)
        built.__class__ = cls
        return built  # type: ignore[no-any-return]

    try:
        make(*range(len(fields)))
    except TypeError:
        return cls
    return make
