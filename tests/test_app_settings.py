"""Unit tests of ``tickwork.app_settings`` and ``tickwork.lazy_store``'s URL rule: the
App's settings are checked once when built, and App attributes read and write them.
Nothing here opens a store."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tickwork import App
from tickwork.app_settings import AppSettings, Setting
from tickwork.errors import InvalidInput
from tickwork.lazy_store import DEFAULT_URL, LazyStore, resolve_url
from tickwork.node.redis_locks import RedisMode

PG = "postgresql://postgres@127.0.0.1:5432/test"


def test_values_are_normalised_once() -> None:
    settings = AppSettings(lease=20, heartbeat=5, poll_interval=1, redis_mode="required", lock_ttl=60)
    assert (settings.lease, settings.heartbeat, settings.lock_ttl) == (20.0, 5.0, 60.0)
    assert all(isinstance(v, float) for v in (settings.lease, settings.heartbeat, settings.poll_interval))
    assert settings.redis_mode is RedisMode.REQUIRED
    assert AppSettings() == AppSettings(lease=30.0, heartbeat=10.0, redis_mode=RedisMode.BEST_EFFORT)


@pytest.mark.parametrize(
    ("given", "field", "reason"),
    [
        (dict(url=""), "url", "must be a database URL"),
        (dict(lease=0), "lease", "must be a positive number"),
        (dict(lease=10, heartbeat=30), "heartbeat", "shorter than the lease (10 s)"),
        (dict(poll_interval=-1.5), "poll_interval", "must be a positive number"),
        (dict(misfire_grace=-1), "misfire_grace", "must be a number >= 0"),
        (dict(shutdown_grace=True), "shutdown_grace", "must be a number >= 0"),
        (dict(claim="fastest"), "claim", "must be 'skip_locked' or 'optimistic'"),
        (dict(url="sqlite:///x.db", claim="skip_locked"), "claim", "SQLite supports only 'optimistic'"),
        (dict(max_payload=True), "max_payload", "positive number of bytes"),
        (dict(max_payload=0), "max_payload", "positive number of bytes"),
        (dict(max_pending=0), "max_pending", "or None (no limit)"),
        (dict(redis_url="http://x"), "redis_url", "redis://, rediss:// or unix://"),
        (dict(redis_prefix=""), "redis_prefix", "non-empty string"),
        (dict(redis_mode="sometimes"), "redis_mode", "'best_effort' or 'required'"),
        (dict(lock_ttl=10), "lock_ttl", "at least the lease (30.0 s)"),
    ],
)
def test_a_bad_setting_is_refused_by_name(given: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        AppSettings(**given)
    assert refused.value.field == field and reason in refused.value.reason
    assert refused.value.value == given[field]  # quoted as given, not as normalised


def test_the_claim_strategy_is_judged_by_the_url_a_store_would_open(monkeypatch: pytest.MonkeyPatch) -> None:
    assert AppSettings(url=PG, claim="skip_locked").claim == "skip_locked"
    monkeypatch.setenv("TICKWORK_DB", PG)
    assert AppSettings(claim="skip_locked").claim == "skip_locked"
    monkeypatch.delenv("TICKWORK_DB")
    with pytest.raises(InvalidInput, match="claim='skip_locked'"):
        AppSettings(claim="skip_locked")  # the default is a SQLite file


def test_the_url_is_the_given_one_else_tickwork_db_else_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TICKWORK_DB", raising=False)
    assert resolve_url(None) == DEFAULT_URL and resolve_url(PG) == PG
    lazy = LazyStore(None)
    monkeypatch.setenv("TICKWORK_DB", PG)
    assert lazy.url == PG  # read when asked (and when the store opens), not when built
    lazy.close()  # closing a store never opened is a no-op


def test_app_attributes_read_and_write_the_settings_rechecked() -> None:
    app = App(PG, lease=12, heartbeat=3, max_pending=5)
    assert (app.lease, app.heartbeat, app.claim_strategy, app.max_pending) == (12.0, 3.0, None, 5)
    assert app.settings.lease == 12.0 and isinstance(App.lease, Setting)
    app.max_pending = 2
    assert app.settings.max_pending == 2 and app.max_pending == 2
    app.redis_mode = "required"  # type: ignore[assignment]
    assert app.redis_mode is RedisMode.REQUIRED
    before = app.settings
    with pytest.raises(InvalidInput, match="heartbeat=20"):
        app.heartbeat = 20
    assert app.settings is before  # a refused assignment changes nothing
    assert dataclasses.replace(before, lease=60.0).heartbeat == 3.0


def test_the_settings_repr_never_shows_a_password() -> None:
    settings = AppSettings(url="postgresql://u:s3cret@db/x", redis_url="redis://:r3dis@cache:6379/0")
    assert "s3cret" not in repr(settings) and "r3dis" not in repr(settings)
    assert settings.url == "postgresql://u:s3cret@db/x"  # kept, only not shown
