"""Helpers for tests of the command line."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from click.testing import CliRunner

from tickwork import App
from tickwork.cli import main


def worker_options(monkeypatch: pytest.MonkeyPatch, *args: str) -> dict[str, Any]:
    """What ``tickwork worker tests.apps.limited:app ARGS`` passes to ``App.run_worker``;
    the node is not started (nor its store opened)."""
    importlib.import_module("tests.apps.limited")  # here: at import it needs a real stderr, not CliRunner's
    seen: dict[str, Any] = {}
    monkeypatch.setattr(App, "open_store", lambda self: None)
    monkeypatch.setattr(App, "run_worker", lambda self, **options: seen.update(options))
    result = CliRunner().invoke(main, ["worker", "tests.apps.limited:app", *args])
    assert result.exit_code == 0, result.output
    return seen
