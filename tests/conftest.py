"""Shared fixtures. ``store_url`` / ``store`` are parametrised over every store so the
contract suite runs unchanged against each (SQLite now; server stores plug in here).
``fake_store`` is the in-memory one (tests/fake_store.py) for unit tests of the node;
the contract suite runs against it too, as the store kind ``FAKE``."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_store import FakeStore
from tests.redis_support import redis_prefix, redis_url  # noqa: F401  # fixtures for every test module
from tests.workers import Fleet, client_for
from tickwork import App
from tickwork.store import Store, open_store

STORE_KINDS = ["sqlite", "postgres"]
FAKE = "fake"
"""The in-memory store's kind: built directly, it has no URL to open it by."""
PG_ADMIN_URL = os.environ.get("TICKWORK_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
TABLES = (
    "tickwork_executions, tickwork_tasks, tickwork_nodes, tickwork_schedule_sets, tickwork_queue_samples, "
    "tickwork_queues, tickwork_limits"
)


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


def _unavailable(reason: str) -> None:
    """Without PostgreSQL a developer's run skips its tests; in CI that is a failure."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"PostgreSQL is required in CI: {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL not available: {reason}")


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A database of its own for this test session (created, migrated, dropped), so
    parallel runs on one server never see each other's rows."""
    import psycopg

    name = f"tickwork_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.Error as exc:
        _unavailable(f"{PG_ADMIN_URL}: {exc}".strip())
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    store = open_store(url)
    store.migrate()
    store.close()
    yield url
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_database: str) -> str:
    """The session database, emptied for this test."""
    import psycopg

    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")
    return pg_database


def url_of(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database of a real store kind, for this test."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'tickwork.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture(params=STORE_KINDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return url_of(request.param, request, tmp_path)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def fake_store() -> Iterator[FakeStore]:
    """An empty in-memory store on the real clock (build ``FakeStore(clock)`` for a driven one)."""
    s = FakeStore()
    yield s
    s.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tickwork.db'}"


@pytest.fixture
def records(tmp_path: Path) -> Path:
    """Where the test app's tasks record their runs (one file per worker process)."""
    folder = tmp_path / "records"
    folder.mkdir()
    return folder


@pytest.fixture
def claim(request: pytest.FixtureRequest) -> str:
    """The claim strategy of a test parametrised over ``db_url`` as "sqlite" or
    "postgres-<strategy>" ("" for SQLite: its default)."""
    param = str(request.node.callspec.params.get("db_url", ""))
    return param.split("-", 1)[1] if "-" in param else ""


@pytest.fixture
def client(db_url: str) -> Iterator[App]:
    """An App on the module's ``db_url`` that knows the test app's task names."""
    app: App = client_for(db_url)
    yield app
    app.close()


@pytest.fixture
def fleet(db_url: str, records: Path) -> Iterator[Fleet]:
    """Worker processes of the test app on the module's ``db_url``, killed at the end."""
    fleet = Fleet(db_url, records)
    yield fleet
    fleet.kill_all()


@pytest.fixture
def web_app(store_url: str) -> Iterator[App]:
    """The web tests' App (tests/http_support.py), on each store."""
    from tests.http_support import make_app

    application = make_app(store_url)
    yield application
    application.close()


@pytest.fixture
def api(web_app: App) -> Iterator[Any]:
    """A client of the real ASGI app (its lifespan run), with the token configured."""
    from tests.http_support import TOKEN, client_of

    with client_of(web_app, token=TOKEN) as client:
        yield client
