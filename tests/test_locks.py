"""The Redis per-task lock primitive (tickwork.locks) against the real Redis server."""

from __future__ import annotations

import itertools
import json
import math
import multiprocessing
import random
import socket
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tickwork.errors import InvalidInput, TickworkError
from tickwork.locks import LockStoreUnavailable, RedisLocks

IDS = 1000
HOT = 8  # a small subset every process keeps coming back to, so holders collide often
PROCESSES = 8
ATTEMPTS = 1000  # acquire attempts per process


@pytest.fixture
def locks(redis_url: str, redis_prefix: str) -> Iterator[RedisLocks]:
    store = RedisLocks(redis_url, redis_prefix)
    yield store
    store.close()


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def gone_after(condition: Callable[[], bool], timeout: float) -> float:
    """Poll until ``condition`` holds; the seconds it took. Fails after ``timeout``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.005)
    return time.monotonic() - start


# -- 8 processes racing ------------------------------------------------------------------


def _race(url: str, prefix: str, seed: int, out: str, barrier: Any) -> None:
    """One racer: acquire random ids (often a hot one), hold briefly, release; record the
    holding intervals. ``start`` is taken after the acquire returned and ``end`` before the
    release is sent, so each recorded interval lies inside the real holding time."""
    locks = RedisLocks(url, prefix)
    rng = random.Random(seed)
    held: list[tuple[int, float, float]] = []
    misses = lost = 0
    barrier.wait(timeout=60)
    attempts = 0
    while attempts < ATTEMPTS:
        if rng.random() < 0.25:  # a batch, some of it on the hot ids
            ids = list({rng.randrange(HOT), rng.randrange(HOT), rng.randrange(IDS), rng.randrange(IDS)})
            tokens = locks.acquire_many([(i, 5.0) for i in ids])
        else:
            task_id = rng.randrange(HOT) if rng.random() < 0.5 else rng.randrange(IDS)
            tokens = {task_id: locks.acquire(task_id, 5.0)}
        attempts += len(tokens)
        got = {i: t for i, t in tokens.items() if t is not None}
        misses += len(tokens) - len(got)
        start = time.monotonic()
        time.sleep(rng.uniform(0, 0.001))
        end = time.monotonic()
        held.extend((i, start, end) for i in got)
        lost += sum(not ok for ok in locks.release_many(list(got.items())).values())
    locks.close()
    Path(out).write_text(json.dumps({"held": held, "misses": misses, "lost": lost}))


def test_eight_processes_racing_for_1000_ids_never_overlap(redis_url: str, redis_prefix: str, tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    outs = [tmp_path / f"racer-{n}.json" for n in range(PROCESSES)]
    procs = [
        ctx.Process(target=_race, args=(redis_url, redis_prefix, n, str(out), barrier)) for n, out in enumerate(outs)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * PROCESSES

    intervals: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
    misses = lost = 0
    for n, out in enumerate(outs):
        result = json.loads(out.read_text())
        misses += result["misses"]
        lost += result["lost"]
        for task_id, start, end in result["held"]:
            intervals[task_id].append((start, end, n))

    for task_id, spans in intervals.items():
        spans.sort()
        for (_, end, a), (start, _, b) in itertools.pairwise(spans):
            assert end <= start, f"task {task_id}: racers {a} and {b} held it at the same time"
    assert lost == 0, "a racer could not release a lock it held"
    # The race was real: attempts failed because another racer held the id, and the hot ids
    # changed hands between racers many times.
    assert misses > 50, misses
    for task_id in range(HOT):
        owners = [n for _, _, n in intervals[task_id]]
        assert len(set(owners)) == PROCESSES
        assert sum(a != b for a, b in itertools.pairwise(owners)) > 20
    assert RedisLocks(redis_url, redis_prefix).alive(range(IDS)) == set()


# -- expiry, extension, ownership -----------------------------------------------------------


def test_lock_expires_after_its_ttl_when_not_extended(locks: RedisLocks, raw: redis.Redis) -> None:
    ttl = 0.4
    before = time.monotonic()
    token = locks.acquire(7, ttl)
    assert token is not None
    assert 0 < raw.pttl(locks.key(7)) <= 400
    took = gone_after(lambda: locks.holder(7) is None, timeout=ttl + 2.0)
    assert time.monotonic() - before >= ttl * 0.5, "expired far too early"
    assert took <= ttl + 2.0
    assert locks.acquire(7, ttl) is not None  # free again for anyone


def test_heartbeat_extension_holds_a_lock_for_five_times_its_ttl(locks: RedisLocks, raw: redis.Redis) -> None:
    ttl = 0.4
    token = locks.acquire(1, ttl)
    assert token is not None
    start = time.monotonic()
    while time.monotonic() - start < 5 * ttl:
        time.sleep(ttl / 3)  # the heartbeat cadence
        assert locks.extend_many([(1, token, ttl)]) == {1: True}
    assert locks.holder(1) == token
    assert raw.pttl(locks.key(1)) > 0
    assert locks.alive([1, 2]) == {1}
    # Once the heartbeat stops, it expires like any other lock.
    gone_after(lambda: locks.holder(1) is None, timeout=ttl + 2.0)
    assert locks.extend_many([(1, token, ttl)]) == {1: None}  # gone, and nobody holds it
    assert locks.holder(1) is None  # extension never recreates a lost lock


def test_wrong_token_neither_extends_nor_releases(locks: RedisLocks, raw: redis.Redis) -> None:
    token = locks.acquire(3, 10.0)
    assert token is not None
    intruder = "0" * 32
    assert locks.extend_many([(3, intruder, 100.0)]) == {3: False}
    assert locks.release_many([(3, intruder)]) == {3: False}
    assert locks.holder(3) == token
    assert 0 < raw.pttl(locks.key(3)) <= 10_000  # not pushed towards 100 s, not removed
    assert locks.release_many([(3, token)]) == {3: True}
    assert locks.holder(3) is None
    assert locks.release_many([(3, token)]) == {3: False}  # releasing twice is harmless


def test_held_lock_is_not_acquired_again_until_released(locks: RedisLocks) -> None:
    first = locks.acquire_many([(1, 10.0), (2, 10.0), (3, 10.0)])
    assert all(first.values()) and len(set(first.values())) == 3  # a token of its own each
    assert locks.acquire(2, 10.0) is None
    assert locks.acquire_many([(2, 10.0), (4, 10.0)])[2] is None
    assert locks.alive(range(10)) == {1, 2, 3, 4}
    token = first[2]
    assert token is not None
    assert locks.release_many([(2, token)]) == {2: True}
    assert locks.alive(range(10)) == {1, 3, 4}
    assert locks.acquire(2, 10.0) is not None
    assert locks.alive([]) == set()


def test_prefixes_isolate_lock_sets(redis_url: str, redis_prefix: str) -> None:
    a = RedisLocks(redis_url, redis_prefix + "a:")
    b = RedisLocks(redis_url, redis_prefix + "b:")
    ta, tb = a.acquire(5, 10.0), b.acquire(5, 10.0)
    assert ta is not None and tb is not None and ta != tb
    assert a.holder(5) == ta and b.holder(5) == tb
    assert a.release_many([(5, tb)]) == {5: False}  # b's token means nothing under a's prefix
    assert a.release_many([(5, ta)]) == {5: True}
    assert a.alive([5]) == set() and b.alive([5]) == {5}


@pytest.mark.parametrize("ttl", [0, -1.0, math.nan, math.inf, "5", True])
def test_bad_ttl_is_rejected_naming_the_field(locks: RedisLocks, ttl: Any) -> None:
    with pytest.raises(InvalidInput) as err:
        locks.acquire(1, ttl)
    assert err.value.field == "ttl_seconds"
    with pytest.raises(InvalidInput):
        locks.extend_many([(1, "t", ttl)])
    assert locks.alive([1]) == set()


def test_bad_prefix_and_repeated_ids_are_rejected(redis_url: str, locks: RedisLocks) -> None:
    for prefix in ["", None, 3]:
        with pytest.raises(InvalidInput) as err:
            RedisLocks(redis_url, prefix)  # type: ignore[arg-type]
        assert err.value.field == "redis_prefix"
    with pytest.raises(InvalidInput) as err:
        locks.acquire_many([(1, 1.0), (1, 1.0)])
    assert err.value.field == "task_ids"
    assert locks.alive([1]) == set()


# -- Redis unavailable ---------------------------------------------------------------------


def _assert_unavailable_quickly(store: RedisLocks, limit: float) -> None:
    calls: list[Callable[[], object]] = [
        lambda: store.acquire_many([(1, 5.0), (2, 5.0)]),
        lambda: store.acquire(1, 5.0),
        lambda: store.extend_many([(1, "t", 5.0)]),
        lambda: store.release_many([(1, "t")]),
        lambda: store.holder(1),
        lambda: store.alive([1]),
    ]
    for call in calls:
        start = time.monotonic()
        with pytest.raises(LockStoreUnavailable) as err:
            call()
        assert time.monotonic() - start < limit
        assert isinstance(err.value, TickworkError)
        assert isinstance(err.value.__cause__, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError)
    start = time.monotonic()
    assert store.ping() is False
    assert time.monotonic() - start < limit


def test_refused_connection_raises_lock_store_unavailable_quickly() -> None:
    _assert_unavailable_quickly(RedisLocks("redis://127.0.0.1:1/0", "tickwork-test:"), limit=2.5)


def test_silent_server_raises_lock_store_unavailable_within_the_socket_timeout() -> None:
    # A listener that never answers: connecting succeeds (the kernel's backlog), every read
    # times out — what a hung or partitioned Redis looks like.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        port = server.getsockname()[1]
        store = RedisLocks(f"redis://127.0.0.1:{port}/0", "tickwork-test:", timeout=0.3)
        # One retry at most: about 2 x 0.3 s per call, plus margin.
        _assert_unavailable_quickly(store, limit=1.5)


def test_connection_closed_by_redis_is_replaced_without_an_error(locks: RedisLocks, raw: redis.Redis) -> None:
    # What a Redis restart does to a node's pooled connection; the node must go on by itself.
    token = locks.acquire(1, 10.0)
    assert token is not None
    connection_id = locks._redis.client_id()
    assert raw.client_kill_filter(_id=str(connection_id)) == 1
    assert locks.extend_many([(1, token, 10.0)]) == {1: True}
    assert locks._redis.client_id() != connection_id


def test_a_retried_acquire_recognises_its_own_token(locks: RedisLocks) -> None:
    # The client retries a command once; if the first attempt was applied and only its
    # answer was lost, the retry must report the lock as ours, not as held by someone else.
    key = locks.key(9)
    assert locks._acquire(keys=[key], args=["mine:10000", 10_000, 0]) == 1
    assert locks._acquire(keys=[key], args=["mine:10000", 10_000, 0]) == 1
    assert locks._acquire(keys=[key], args=["other:10000", 10_000, 0]) == 0
    assert locks.holder(9) == "mine:10000"


def test_a_lock_its_holder_stopped_extending_is_taken_over_but_a_fresh_one_is_not(
    locks: RedisLocks, raw: redis.Redis
) -> None:
    """A long TTL (the task's expected runtime) must not shut other nodes out for that
    long once its holder died: what counts is how long ago it was last extended."""
    dead = locks.acquire(1, 60.0)
    live = locks.acquire(2, 60.0)
    assert dead is not None and live is not None
    # The dead holder's lock was last extended 3 s ago: wind its TTL back by that much.
    raw.pexpire(locks.key(1), 57_000)
    assert locks.extended_within([1, 2, 3], 2.0) == {2}
    taken = locks.acquire_many([(1, 60.0), (2, 60.0)], stale_after=2.0)
    assert taken[1] is not None and taken[1] != dead and locks.holder(1) == taken[1]
    assert taken[2] is None and locks.holder(2) == live
    assert locks.extend_many([(1, dead, 60.0)]) == {1: False}  # the old holder has lost it
    assert locks.extended_within([1], 2.0) == {1}


def test_retake_restores_a_lock_redis_lost_but_never_one_held_by_another(locks: RedisLocks, raw: redis.Redis) -> None:
    mine = locks.acquire(1, 10.0)
    theirs = locks.acquire(2, 10.0)
    assert mine is not None and theirs is not None
    raw.delete(locks.key(1))  # what a restart without persistence does
    assert locks.extend_many([(1, mine, 10.0)]) == {1: None}  # strict: gone, not re-taken
    assert locks.holder(1) is None
    assert locks.extend_many([(1, mine, 10.0), (2, "someone:10000", 10.0)], retake=True) == {1: True, 2: False}
    assert locks.holder(1) == mine and locks.holder(2) == theirs
