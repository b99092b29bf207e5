"""Nodes with Redis per-task locks: exactly-once with many nodes, a Redis restart in the
middle of a run under both modes, a lock held elsewhere, a lock taken away, and the
reconciler treating a still-extended lock as a sign of life."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from tests.conftest import wait_for
from tests.redis_support import _unavailable
from tests.test_worker import Node
from tests.workers import Fleet, read_records
from tickwork import App, Context, ExecutionStatus, InvalidInput, Status
from tickwork.locks import RedisLocks
from tickwork.node.reconciler import reconcile
from tickwork.node.redis_locks import NodeLocks, RedisMode
from tickwork.node.run import Run


@pytest.fixture
def db_url(pg_url: str) -> str:
    return pg_url


def completed(app: App) -> int:
    return len(app.tasks(status="COMPLETED", limit=10_000))


class PrivateRedis:
    """A Redis server of this test's own, so that it can be shut down and started again
    without disturbing anyone else using the machine's server."""

    def __init__(self, folder: Path) -> None:
        if shutil.which("redis-server") is None:
            _unavailable("redis-server is not installed")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.folder = folder
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.folder,
            stdout=subprocess.DEVNULL,
        )
        wait_for(self.answers, timeout=10)

    def answers(self) -> bool:
        client = redis.Redis.from_url(self.url, socket_timeout=0.5, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def shutdown_nosave(self) -> None:
        client = redis.Redis.from_url(self.url, socket_timeout=2)
        try:
            client.shutdown(nosave=True)
        except redis.ConnectionError:
            pass  # the server closes the connection as it goes
        finally:
            client.close()
        assert self.proc is not None
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


def keys_left(url: str, prefix: str) -> list[bytes]:
    client = redis.Redis.from_url(url)
    try:
        return list(client.scan_iter(match=f"{prefix}*"))
    finally:
        client.close()


def assert_exactly_once(client: App, ids: set[int], records: Path) -> None:
    runs = client.executions(limit=10_000)
    assert Counter(e.task_id for e in runs) == Counter(ids)  # one execution each, no more
    assert {e.status for e in runs} == {ExecutionStatus.COMPLETED}
    recorded = Counter(r["task_id"] for r in read_records(records))
    assert set(recorded) == ids and set(recorded.values()) == {1}


def test_four_locking_nodes_run_each_of_5000_tasks_exactly_once_under_their_lock(
    client: App,
    fleet: Fleet,
    records: Path,
    redis_url: str,
    redis_prefix: str,
) -> None:
    env = {"TICKWORK_TEST_REDIS_URL": redis_url, "TICKWORK_TEST_REDIS_PREFIX": redis_prefix}
    nodes = [fleet.start(concurrency=8, env=env) for _ in range(4)]
    wait_for(lambda: len(client.nodes()) == 4, timeout=60)  # all up first: see test_postgres_nodes
    ids = {t.id for t in client.schedule_many([{"task": "test.record_locked"} for _ in range(5000)])}
    wait_for(lambda: completed(client) == 5000, timeout=120)
    for node in nodes:
        assert node.terminate() == 0, node.output()
    assert_exactly_once(client, ids, records)
    assert {r["locked"] for r in read_records(records)} == {True}  # every run held its lock
    assert len({r["pid"] for r in read_records(records)}) == 4
    left = keys_left(redis_url, redis_prefix)
    assert left == [], (left, [n.output()[-3000:] for n in nodes])  # every lock released after its write


@pytest.mark.parametrize("mode", ["best_effort", "required"])
def test_a_redis_restart_mid_run_causes_no_duplicate_and_no_node_restart(
    client: App, fleet: Fleet, records: Path, private_redis: PrivateRedis, mode: str
) -> None:
    env = {
        "TICKWORK_TEST_REDIS_URL": private_redis.url,
        "TICKWORK_TEST_REDIS_PREFIX": "tw:",
        "TICKWORK_TEST_REDIS_MODE": mode,
        "TICKWORK_TEST_LEASE": "3",
        "TICKWORK_TEST_HEARTBEAT": "0.3",
    }
    total = 5000
    ids = {t.id for t in client.schedule_many([{"task": "test.record_locked", "kwargs": {"hold": 0.02}}] * total)}
    nodes = [fleet.start(concurrency=4, env=env) for _ in range(4)]
    wait_for(lambda: completed(client) >= 800, timeout=60)
    private_redis.shutdown_nosave()
    down_at = completed(client)
    if mode == "best_effort":
        # The nodes go on with their database claims alone.
        wait_for(lambda: completed(client) >= down_at + 500, timeout=30)
    else:
        # Fail closed: the runs already going end, then nothing more starts.
        samples: list[int] = []

        def stalled() -> bool:
            samples.append(completed(client))
            return len(samples) >= 10 and samples[-1] == samples[-10]  # no progress for ~1 s

        wait_for(stalled, timeout=30, interval=0.1)
        assert completed(client) < total
        wait_for(lambda: all("starting no runs" in node.output() for node in nodes), timeout=10)
    assert completed(client) < total, "the restart must land in the middle of the run"
    private_redis.start()  # empty: every lock the nodes held is gone
    wait_for(lambda: completed(client) == total, timeout=120)
    assert all(node.proc.poll() is None for node in nodes)  # nobody was restarted
    for node in nodes:
        assert "Redis is back" in node.output()
        assert node.terminate() == 0, node.output()
    assert_exactly_once(client, ids, records)
    locked = Counter(r["locked"] for r in read_records(records))
    assert locked[True] > 0
    if mode == "required":
        assert locked[None] <= 4 * 4 * 5  # only runs claimed and locked before the outage ran during it


def test_a_claim_whose_lock_a_live_node_holds_is_given_back_and_run_once_released(
    sqlite_url: str,
    redis_url: str,
    redis_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = App(sqlite_url, lease=5.0, heartbeat=0.1, poll_interval=0.05, redis_url=redis_url, redis_prefix=redis_prefix)
    ran = threading.Event()

    @app.task(name="t.once")
    def once(ctx: Context) -> None:
        ran.set()

    task = app.schedule("t.once")
    other = RedisLocks(redis_url, redis_prefix)
    token = other.acquire(task.id, 30.0)  # a live node is running this task (fresh for a lease)
    assert token is not None
    caplog.set_level("INFO", logger="tickwork.locks")
    node = Node(app)
    try:
        wait_for(lambda: caplog.text.count("held by a live node") >= 3, timeout=4)
        assert not ran.is_set()
        after = app.get(task.id)
        assert after.status is Status.PENDING and after.attempt == 0  # the attempts did not count
        assert app.executions(task.id) == []  # nor were they logged as runs
        assert other.release_many([(task.id, token)]) == {task.id: True}
        wait_for(ran.is_set, timeout=10)
        wait_for(lambda: app.get(task.id).status is Status.COMPLETED)
        [run] = app.executions(task.id)
        assert run.status is ExecutionStatus.COMPLETED and run.attempt == 1
    finally:
        node.stop()
        other.close()
        app.close()


def test_a_run_whose_lock_another_node_took_is_cancelled(
    sqlite_url: str,
    redis_url: str,
    redis_prefix: str,
) -> None:
    app = App(sqlite_url, lease=2.0, heartbeat=0.1, poll_interval=0.05, redis_url=redis_url, redis_prefix=redis_prefix)
    started = threading.Event()

    @app.task(name="t.loop")
    def loop(ctx: Context) -> None:
        started.set()
        while not ctx.cancelled:
            time.sleep(0.01)

    task = app.schedule("t.loop")
    node = Node(app)
    raw = redis.Redis.from_url(redis_url)
    try:
        wait_for(started.is_set)
        key = f"{redis_prefix}lock:task:{task.id}"
        assert raw.exists(key) == 1
        raw.set(key, "intruder:60000", px=60_000)  # another node's token now holds it
        wait_for(lambda: app.get(task.id).status is not Status.RUNNING, timeout=10)
        [run] = app.executions(task.id)
        assert run.status is ExecutionStatus.FAILED
        assert run.error is not None and "Redis lock" in run.error.message
        assert raw.get(key) == b"intruder:60000"  # the loser's release left the new holder's lock alone
    finally:
        node.stop()
        raw.close()
        app.close()


def test_the_reconciler_spares_a_run_whose_lock_is_still_extended(
    pg_url: str,
    redis_url: str,
    redis_prefix: str,
) -> None:
    app = App(pg_url)

    @app.task(name="t.any")
    def anything(ctx: Context) -> None: ...

    task = app.schedule("t.any")
    store = app.store
    [claim] = store.claim("cut-off-node", ["t.any"], 1, 0.3)  # its lease lapses at once
    locks = NodeLocks(RedisLocks(redis_url, redis_prefix), mode=RedisMode.BEST_EFFORT, lease=1.0, heartbeat=0.2,
                      lock_ttl=30.0)  # fmt: skip
    token = locks.locks.acquire(task.id, 30.0)
    assert token is not None
    try:
        wait_for(lambda: store.expired(10), timeout=5)
        # The node cannot reach the database but keeps extending its lock: alive.
        for _ in range(5):
            locks.locks.extend_many([(task.id, token, 30.0)])
            assert reconcile(store, live=locks.live) == 0
            time.sleep(0.2)
        assert app.get(task.id).status is Status.RUNNING
        # It stops extending (dead): a lease later the lock is stale, though far from expiring.
        wait_for(lambda: reconcile(store, live=locks.live) == 1, timeout=5)
        assert locks.locks.holder(task.id) == token  # the TTL has not run out
        [run] = app.executions(task.id)
        assert run.status is ExecutionStatus.FAILED and (run.note or "").startswith("lost by cut-off-node; run again")
        assert claim.execution_id == run.id
    finally:
        locks.close()
        app.close()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"redis_url": "http://x"}, "redis_url"),
        ({"redis_url": "redis://x", "redis_mode": "sometimes"}, "redis_mode"),
        ({"redis_url": "redis://x", "redis_prefix": ""}, "redis_prefix"),
        ({"redis_url": "redis://x", "lock_ttl": 0}, "lock_ttl"),
        ({"redis_url": "redis://x", "lock_ttl": 5.0, "lease": 30.0}, "lock_ttl"),
    ],
)
def test_bad_redis_settings_are_refused_naming_the_field(
    sqlite_url: str, kwargs: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidInput, match=f"^{field}="):
        App(sqlite_url, **kwargs)  # type: ignore[arg-type]


def test_a_page_of_runs_spared_as_alive_does_not_hide_a_dead_nodes_run(sqlite_url: str) -> None:
    app = App(sqlite_url)

    @app.task(name="t.any")
    def anything(ctx: Context) -> None: ...

    store = app.store
    try:
        cut_off = app.schedule_many([{"task": "t.any"} for _ in range(150)])
        store.claim("cut-off-node", ["t.any"], 150, 0.05)  # their leases lapse at once ...
        dead = app.schedule("t.any")
        store.claim("dead-node", ["t.any"], 1, 0.2)  # ... and this one's last of all
        alive = {t.id for t in cut_off}
        wait_for(lambda: len(store.expired(200)) == 151, timeout=5)
        assert reconcile(store, live=lambda ids: set(ids) & alive, lock_grace=60.0) == 1
        assert app.get(dead.id).status is not Status.RUNNING
        assert all(app.get(i).status is Status.RUNNING for i in alive)
        # Redis unable to say: nothing within the grace is reaped; past it, the leases decide.
        assert reconcile(store, live=lambda ids: None, lock_grace=60.0) == 0
        assert reconcile(store, live=lambda ids: None, lock_grace=0.0) == 100  # one batch per pass
    finally:
        app.close()


def test_a_task_locked_elsewhere_is_left_out_so_other_work_goes_on(
    sqlite_url: str, redis_url: str, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = App(sqlite_url, lease=5.0, heartbeat=1.0, poll_interval=0.05, redis_url=redis_url, redis_prefix=redis_prefix)

    @app.task(name="t.quick")
    def quick(ctx: Context) -> None: ...

    now = app.store.now()
    locked = app.schedule("t.quick", at=now - timedelta(seconds=10))  # first in claim order
    other = RedisLocks(redis_url, redis_prefix)
    token = other.acquire(locked.id, 30.0)
    assert token is not None
    caplog.set_level("INFO", logger="tickwork.locks")
    node = Node(app, concurrency=1)
    try:
        later = [app.schedule("t.quick", at=now - timedelta(seconds=5)) for _ in range(3)]
        wait_for(lambda: all(app.get(t.id).status is Status.COMPLETED for t in later), timeout=10)
        assert app.get(locked.id).status is Status.PENDING
        refusals = caplog.text.count("held by a live node")
        assert 1 <= refusals <= 5  # left out for a heartbeat at a time, not claimed in a loop
        other.release_many([(locked.id, token)])
        wait_for(lambda: app.get(locked.id).status is Status.COMPLETED, timeout=10)
    finally:
        node.stop()
        other.close()
        app.close()


def test_a_release_lost_in_a_redis_stall_is_sent_once_redis_answers(private_redis: PrivateRedis) -> None:
    locks = NodeLocks(
        RedisLocks(private_redis.url, "tw:", timeout=0.3), mode=RedisMode.BEST_EFFORT, lease=5.0, heartbeat=1.0,
        lock_ttl=60.0,
    )  # fmt: skip
    app = App(f"sqlite:///{private_redis.folder / 'r.db'}")

    @app.task(name="t.any")
    def anything(ctx: Context) -> None: ...

    try:
        first = app.schedule("t.any")
        [claim] = app.store.claim("n", ["t.any"], 1, 30.0)
        taken = locks.take([claim])
        token = taken.tokens[claim.execution_id]
        raw = redis.Redis.from_url(private_redis.url)
        raw.client_pause(1500)  # Redis stalls: the release after the write times out
        run = Run(claim, app.registry.resolve("t.any"))
        run.lock_token, run.lock_ttl = token, 60.0
        locks.release([run])
        assert raw.get(f"tw:lock:task:{first.id}") == token.encode()  # still held after the stall
        second = app.schedule("t.any", delay=0)
        wait_for(lambda: locks.may_start() and locks._worth_asking(), timeout=5)
        [claim2] = app.store.claim("n", ["t.any"], 1, 30.0)
        assert claim2.task.id == second.id
        locks.take([claim2])  # the held-back release goes first
        assert raw.get(f"tw:lock:task:{first.id}") is None
        raw.close()
    finally:
        locks.close()
        app.close()
