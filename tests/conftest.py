"""Shared fixtures. ``store_url`` / ``store`` are parametrised over every store so the
contract suite runs unchanged against each (SQLite now; server stores plug in here)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tickwork.store import Store, open_store

STORE_KINDS = ["sqlite"]


def wait_for(condition: Callable[[], object], timeout: float = 20.0, interval: float = 0.02) -> object:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {condition}")
        time.sleep(interval)


@pytest.fixture(params=STORE_KINDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tickwork.db'}"
    raise AssertionError(request.param)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tickwork.db'}"
