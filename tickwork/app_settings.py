"""The App's settings, checked once when they are built, so that no bad value reaches a
node or the store; App attributes such as ``app.lease`` read and write them."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar, overload

from tickwork import validate
from tickwork.errors import InvalidInput
from tickwork.lazy_store import resolve_url
from tickwork.node.redis_locks import RedisMode
from tickwork.node.settings import DEFAULT_CLAIM_AHEAD as DEFAULT_CLAIM_AHEAD  # App's default too
from tickwork.node.settings import NodeSettings, checked_claim_ahead

DEFAULT_MAX_PAYLOAD = 64 * 1024
DEFAULT_RETENTION = timedelta(days=30)
CLAIM_STRATEGIES = (None, "skip_locked", "optimistic")


@dataclasses.dataclass(frozen=True)
class AppSettings:
    """What ``App(...)`` was given, normalised (seconds as floats, ``RedisMode``)."""

    url: str | None = dataclasses.field(default=None, repr=False)  # may hold a password
    """The database URL as given; None reads ``TICKWORK_DB`` when the store is opened."""
    lease: float = 30.0
    heartbeat: float = 10.0
    poll_interval: float = 1.0
    claim_ahead: float = DEFAULT_CLAIM_AHEAD
    misfire_grace: float = 60.0
    """The default for tasks whose registration and ``schedule()`` call give none."""
    shutdown_grace: float = 30.0
    claim: str | None = None
    """The claim strategy; None lets the store choose."""
    max_payload: int = DEFAULT_MAX_PAYLOAD
    max_pending: int | None = None
    redis_url: str | None = dataclasses.field(default=None, repr=False)  # may hold a password
    redis_prefix: str = "tickwork:"
    redis_mode: RedisMode | str = RedisMode.BEST_EFFORT
    """A ``RedisMode`` once built (given as its value, ``"required"``, or as one)."""
    lock_ttl: float | None = None
    retention: timedelta | float | None = DEFAULT_RETENTION
    """How long ended history is kept (a ``timedelta`` once built); None keeps everything."""
    keep_last: int = 20

    def __post_init__(self) -> None:
        # Each group raises on its first bad value, in the order of App's parameters;
        # values are set only once all are good (the messages quote them as given).
        checked = {**self._url(), **self._timing(), **self._claim(), **self._limits(), **self._redis()}
        checked |= self._retention()
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def _url(self) -> dict[str, Any]:
        if self.url is not None and (not isinstance(self.url, str) or not self.url):
            raise InvalidInput("url", self.url, "must be a database URL such as sqlite:///tickwork.db")
        return {}

    def _timing(self) -> dict[str, Any]:
        lease = validate.positive("lease", self.lease)
        heartbeat = validate.positive("heartbeat", self.heartbeat)
        if heartbeat >= lease:
            raise InvalidInput("heartbeat", self.heartbeat, f"must be shorter than the lease ({self.lease} s)")
        return {
            "claim_ahead": checked_claim_ahead(self.claim_ahead),
            "lease": lease,
            "heartbeat": heartbeat,
            "poll_interval": validate.positive("poll_interval", self.poll_interval),
            "misfire_grace": validate.non_negative("misfire_grace", self.misfire_grace),
            "shutdown_grace": validate.non_negative("shutdown_grace", self.shutdown_grace),
        }

    def _claim(self) -> dict[str, Any]:
        if self.claim not in CLAIM_STRATEGIES:
            raise InvalidInput("claim", self.claim, "must be 'skip_locked' or 'optimistic'")
        if self.claim == "skip_locked" and resolve_url(self.url).startswith("sqlite:"):
            raise InvalidInput("claim", self.claim, "SQLite supports only 'optimistic' (SKIP LOCKED needs PostgreSQL)")
        return {}

    def _limits(self) -> dict[str, Any]:
        validate.count("max_payload", self.max_payload, "must be a positive number of bytes")
        if self.max_pending is not None:
            validate.count("max_pending", self.max_pending, "must be a positive number of tasks, or None (no limit)")
        return {}

    def _redis(self) -> dict[str, Any]:
        if self.redis_url is not None and (
            not isinstance(self.redis_url, str) or not self.redis_url.startswith(("redis://", "rediss://", "unix://"))
        ):
            raise InvalidInput("redis_url", self.redis_url, "must be a redis://, rediss:// or unix:// URL")
        validate.text("redis_prefix", self.redis_prefix)
        try:
            mode = RedisMode(self.redis_mode)
        except ValueError as exc:
            raise InvalidInput("redis_mode", self.redis_mode, "must be 'best_effort' or 'required'") from exc
        lock_ttl = validate.optional_positive("lock_ttl", self.lock_ttl)
        if lock_ttl is not None and lock_ttl < self.lease:
            raise InvalidInput(
                "lock_ttl", self.lock_ttl, f"must be at least the lease ({self.lease} s): heartbeats extend it"
            )
        return {"redis_mode": mode, "lock_ttl": lock_ttl}

    def _retention(self) -> dict[str, Any]:
        validate.integer("keep_last", self.keep_last)
        if self.keep_last < 0:
            raise InvalidInput("keep_last", self.keep_last, "must be 0 or more executions")
        if self.retention is None:
            return {}
        retention = validate.seconds("retention", self.retention, allow_zero=False)
        return {"retention": timedelta(seconds=retention)}

    def node(self) -> NodeSettings:
        """What a node of this App runs by."""
        retention = self.retention  # a timedelta or None once built
        assert not isinstance(retention, (int, float))
        return NodeSettings(
            lease=self.lease, heartbeat=self.heartbeat, poll_interval=self.poll_interval,
            claim_ahead=self.claim_ahead, shutdown_grace=self.shutdown_grace, max_payload=self.max_payload,
            retention=retention, keep_last=self.keep_last,
        )  # fmt: skip


class _HasSettings(Protocol):
    settings: AppSettings


T = TypeVar("T")


class Setting(Generic[T]):
    """An App attribute that is a field of its ``settings``.

    Assigning one replaces the settings with a copy that is checked again, so an App
    never holds a value its constructor would have refused."""

    def __init__(self, field: str | None = None) -> None:
        self._field = field or ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._field = self._field or name

    @overload
    def __get__(self, instance: None, owner: type) -> Setting[T]: ...

    @overload
    def __get__(self, instance: _HasSettings, owner: type) -> T: ...

    def __get__(self, instance: _HasSettings | None, owner: type) -> Setting[T] | T:
        if instance is None:
            return self
        value: T = getattr(instance.settings, self._field)
        return value

    def __set__(self, instance: _HasSettings, value: T) -> None:
        changed: dict[str, Any] = {self._field: value}
        instance.settings = dataclasses.replace(instance.settings, **changed)
