"""Fixtures for tests against the real Redis server (``TICKWORK_TEST_REDIS``).

tests/conftest.py imports them, so every test module can ask for them.
Without a reachable Redis a developer's run skips these tests; in CI that is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from uuid import uuid4

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

REDIS_URL = os.environ.get("TICKWORK_TEST_REDIS", "redis://127.0.0.1:6379/0")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"Redis is required in CI: {reason}", pytrace=False)
    pytest.skip(f"Redis not available: {reason}")


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2, retry=Retry(NoBackoff(), 1))


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test Redis URL, once it answers PING."""
    client = _client(REDIS_URL)
    try:
        client.ping()
    except redis.exceptions.RedisError as exc:
        _unavailable(f"{REDIS_URL}: {exc}")
    finally:
        client.close()
    return REDIS_URL


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own, so parallel runs never share keys; its keys are
    deleted afterwards."""
    prefix = f"tickwork-test:{os.getpid()}:{uuid4().hex[:8]}:"
    yield prefix
    client = _client(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    finally:
        client.close()
