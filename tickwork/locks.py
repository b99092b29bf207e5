"""Per-task locks in Redis: owned, expiring, extended by heartbeat, released only by their owner.

A node that is about to run a task takes ``{prefix}lock:task:{id}`` with
``SET key token NX PX ttl`` (in a script, so that a retried call recognises its own token).
Other nodes that see the key skip the task without touching the database. The design
avoids the usual mistakes of Redis schedulers:

- *Owned*: the value is a random token known only to the holder. Extension and release are
  compare-token-then-act Lua scripts, so a node whose lock expired and was taken by another
  node cannot extend or delete the new holder's lock.
- *Expiring*: every lock has a TTL, so a node that dies or is partitioned away never blocks a
  task for ever; the holder keeps it alive by extending it with its heartbeat.
- *Never the only defence*: a Redis lock can be lost (failover to a replica that did not get the
  write, a restart, a process paused past its TTL). The database claim and the fencing of every
  write by ``version`` and ``lease_owner`` stay authoritative; the lock only saves work and gives
  the reconciler a second liveness signal.

Every call works in batches (one round trip for many tasks), because a node holds many locks.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from tickwork.errors import InvalidInput, TickworkError

if TYPE_CHECKING:
    from redis.client import Pipeline

T = TypeVar("T")

# A token is "<random>:<ttl in ms>": the holder's TTL travels with the lock, so any node
# can tell how long ago the holder last extended it (ttl - PTTL) and so whether it is
# still being extended by a live node, whatever the TTL.
_AGE = """
local function age(key, value)
    local ttl = tonumber(string.match(value, ':(%d+)$'))
    local left = redis.call('PTTL', key)
    if not ttl or left < 0 then return 0 end
    return ttl - left
end
"""

# SET key token NX PX ttl, made idempotent (a retried call that finds its own token got
# the lock), and taking over a lock its holder stopped extending ARGV[3] ms ago (0: never).
_ACQUIRE = (
    _AGE
    + """
local held = redis.call('GET', KEYS[1])
if not held then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 1
end
if held == ARGV[1] then
    return 1
end
local stale = tonumber(ARGV[3])
if stale > 0 and age(KEYS[1], held) > stale then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 2
end
return 0
"""
)

# Extend the TTL only if the key still holds our token (atomic compare-then-PEXPIRE).
# With ARGV[3] == '1', a key that no longer exists at all (Redis restarted without its
# data, or flushed) is taken again: nobody else holds it, and the caller has just
# confirmed in the database that the run is still its own.
_EXTEND = """
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if not held then
    if ARGV[3] == '1' then
        redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
        return 1
    end
    return -1
end
return 0
"""

# Delete the key only if it still holds our token (atomic compare-then-DEL).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""

# The ids among KEYS whose lock was extended within the last ARGV[1] ms.
_FRESH = (
    _AGE
    + """
local fresh = {}
for i, key in ipairs(KEYS) do
    local held = redis.call('GET', key)
    if held and age(key, held) <= tonumber(ARGV[1]) then
        fresh[#fresh + 1] = i
    end
end
return fresh
"""
)


class LockStoreUnavailable(TickworkError):
    """Redis could not be reached or did not answer; the lock state is unknown.

    The one exception callers catch: they decide between failing closed (no new runs) and
    running on the database claim alone.
    """


def _ttl_ms(ttl_seconds: float) -> int:
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, int | float):
        raise InvalidInput("ttl_seconds", ttl_seconds, "must be a number of seconds")
    if not math.isfinite(ttl_seconds) or ttl_seconds <= 0:
        raise InvalidInput("ttl_seconds", ttl_seconds, "must be a finite number of seconds > 0")
    return max(1, math.ceil(ttl_seconds * 1000))


class RedisLocks:
    """The lock set of one deployment: keys ``{prefix}lock:task:{task_id}`` in one Redis.

    Socket timeouts are short and a failed command is retried once, at once (that replaces
    a pooled connection Redis closed, e.g. after a restart), so an unreachable or hung Redis
    raises :class:`LockStoreUnavailable` within about ``2 * timeout`` instead of blocking a
    node's heartbeat. ``health_check_interval`` (a PING before using a connection idle that
    long) is off by default: the retry already recovers a dead connection, and the PING,
    retried in its turn, would double that worst case to ``4 * timeout``.
    """

    def __init__(self, url: str, prefix: str, *, timeout: float = 1.0, health_check_interval: int = 0) -> None:
        if not isinstance(prefix, str) or not prefix:
            raise InvalidInput("redis_prefix", prefix, "must be a non-empty string")
        if not isinstance(url, str) or not url:
            raise InvalidInput("redis_url", url, "must be a redis:// URL")
        self.prefix = prefix
        # Imported here: a deployment without Redis never pays for it (~50 ms a process).
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self._errors = redis.exceptions.RedisError
        try:
            self._redis = redis.Redis.from_url(
                url,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                health_check_interval=health_check_interval,
                retry=Retry(NoBackoff(), 1),
                decode_responses=True,
            )
        except ValueError as exc:  # a malformed URL
            raise InvalidInput("redis_url", url, str(exc)) from exc
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._extend = self._redis.register_script(_EXTEND)
        self._release = self._redis.register_script(_RELEASE)
        self._fresh = self._redis.register_script(_FRESH)

    def key(self, task_id: int) -> str:
        return f"{self.prefix}lock:task:{task_id}"

    def acquire(self, task_id: int, ttl_seconds: float) -> str | None:
        """Take the lock of one task for ``ttl_seconds``; the owner token, or None if held."""
        return self.acquire_many([(task_id, ttl_seconds)])[task_id]

    def acquire_many(
        self, items: list[tuple[int, float]], *, stale_after: float | None = None
    ) -> dict[int, str | None]:
        """Take the locks of ``(task_id, ttl_seconds)`` pairs in one round trip.

        Each lock gets its own random token, which is needed to extend or release it. A task
        whose key exists (held by anyone, including this node) maps to None, unless its
        holder last extended it more than ``stale_after`` seconds ago: such a holder is
        dead or cut off (a live one extends with every heartbeat), and the lock is taken over.
        """
        ids = [task_id for task_id, _ in items]
        if len(set(ids)) != len(ids):  # a second SET NX would fail and lose the first token
            raise InvalidInput("task_ids", ids, "must not repeat within one batch")
        stale_ms = 0 if stale_after is None else _ttl_ms(stale_after)
        commands = [(task_id, f"{secrets.token_hex(16)}:{_ttl_ms(ttl)}", _ttl_ms(ttl)) for task_id, ttl in items]

        def run(pipe: Pipeline) -> None:
            for task_id, token, ms in commands:
                self._acquire(keys=[self.key(task_id)], args=[token, ms, stale_ms], client=pipe)

        results = self._pipeline(run)
        return {task_id: token if ok else None for (task_id, token, _), ok in zip(commands, results, strict=True)}

    def extend_many(self, items: list[tuple[int, str, float]], *, retake: bool = False) -> dict[int, bool | None]:
        """Reset the TTL of ``(task_id, token, ttl_seconds)`` locks still held with ``token``.

        True: extended. False: the key holds another token — someone else has the lock,
        and the caller must treat it like a lost lease; nothing is changed. None: the key
        does not exist (it expired, or Redis lost it): nobody holds it. With ``retake``,
        such a key is set again with ``token`` (True): for a caller that has just
        confirmed in the database that the run is still its own.
        """
        commands = [(task_id, token, _ttl_ms(ttl)) for task_id, token, ttl in items]
        flag = "1" if retake else "0"

        def run(pipe: Pipeline) -> None:
            for task_id, token, ms in commands:
                self._extend(keys=[self.key(task_id)], args=[token, ms, flag], client=pipe)

        results = self._pipeline(run)
        return {
            task_id: None if code == -1 else bool(code) for (task_id, _, _), code in zip(commands, results, strict=True)
        }

    def release_many(self, items: list[tuple[int, str]]) -> dict[int, bool]:
        """Delete the ``(task_id, token)`` locks that still hold ``token``; True where deleted.

        A lock that expired, or was taken over by another node, is left alone.
        """

        def run(pipe: Pipeline) -> None:
            for task_id, token in items:
                self._release(keys=[self.key(task_id)], args=[token], client=pipe)

        results = self._pipeline(run)
        return {task_id: bool(ok) for (task_id, _), ok in zip(items, results, strict=True)}

    def holder(self, task_id: int) -> str | None:
        """The token that holds the lock of ``task_id`` now, or None if it is free."""
        value = self._call(lambda: self._redis.get(self.key(task_id)))
        return value.decode() if isinstance(value, bytes) else value

    def alive(self, task_ids: Iterable[int]) -> set[int]:
        """The ids among ``task_ids`` whose lock is held by some node now.

        For the reconciler: a run whose lease expired but whose lock is still being extended
        belongs to a live node.
        """
        ids = list(task_ids)
        if not ids:
            return set()
        values = self._call(lambda: self._redis.mget([self.key(i) for i in ids]))
        return {task_id for task_id, value in zip(ids, values, strict=True) if value is not None}

    def extended_within(self, task_ids: Iterable[int], seconds: float) -> set[int]:
        """The ids among ``task_ids`` whose lock its holder extended in the last ``seconds``.

        For the reconciler: a run whose lease expired but whose lock is still being extended
        belongs to a live node (whose database connection is failing, say); a lock that
        merely has not expired yet (a long TTL) proves nothing.
        """
        ids = list(task_ids)
        if not ids:
            return set()
        window = _ttl_ms(seconds)
        found = self._call(lambda: self._fresh(keys=[self.key(i) for i in ids], args=[window]))
        return {ids[int(i) - 1] for i in found}

    def ping(self) -> bool:
        """True if Redis answers now; never raises."""
        try:
            return bool(self._redis.ping())
        except self._errors:
            return False

    def close(self) -> None:
        self._redis.close()

    def _pipeline(self, fill: Callable[[Pipeline], None]) -> list[Any]:
        def run() -> list[Any]:
            with self._redis.pipeline(transaction=False) as pipe:
                fill(pipe)
                return list(pipe.execute())

        return self._call(run)

    def _call(self, do: Callable[[], T]) -> T:
        try:
            return do()
        except self._errors as exc:
            raise LockStoreUnavailable(f"Redis lock store unavailable: {type(exc).__name__}: {exc}") from exc
