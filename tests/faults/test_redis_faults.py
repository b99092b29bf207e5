"""Redis, holding the per-task locks under ``redis_mode="required"``, killed and started
again (empty) and then flushed while runs hold their locks."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.faults.harness import HEARTBEAT, REDIS_BACK, REDIS_TROUBLE, Case, eventually
from tests.faults.servers import PrivateRedis

pytestmark = pytest.mark.faults

DOWN_S = 4.0


@pytest.mark.timeout(150)
def test_redis_restarted_and_flushed_under_redis_mode_required(
    private_pg_url: str, private_redis: PrivateRedis, make_case: Callable[..., Case]
) -> None:
    env = {"FAULTS_REDIS_URL": private_redis.url, "FAULTS_REDIS_PREFIX": "tw:", "FAULTS_REDIS_MODE": "required"}
    case = make_case("redis-restart-and-flush-required", private_pg_url)
    nodes = case.start_nodes(2, env=env)
    long_runs = case.stream(4, start_in=0.0, over=0.3, seconds=3.0)
    case.stream(150, start_in=0.5, over=DOWN_S + 10.0, seconds=0.05)
    case.recurring_tasks(2, every=1.0)
    case.wait_started(long_runs)
    case.fault_begins()
    private_redis.kill()
    down = time.monotonic()
    case.check(
        eventually(lambda: all(REDIS_TROUBLE.search(n.output()) for n in nodes), DOWN_S),
        "not every node noticed Redis was gone while it was down",
    )
    time.sleep(max(0.0, DOWN_S - (time.monotonic() - down)))  # the outage's duration
    private_redis.start()  # empty: every lock the nodes held is gone
    up = time.monotonic()
    # Then flush it while runs hold their locks again.
    case.check(eventually(lambda: private_redis.keys("tw:lock:*"), 10.0), "no lock was taken again after the restart")
    private_redis.flush()
    case.fault_ends()
    case.verify(alive=nodes, expect_resume=True)
    # Fail closed: once a node has seen Redis gone (a heartbeat), no run starts until it is back.
    during = [r for r in case.runs() if down + 2 * HEARTBEAT < r.start < up]
    case.figure("runs_started_while_down", len(during))
    case.check(not during, f"{len(during)} runs started while Redis was down (redis_mode=required): {during[:3]}")
    left = private_redis.keys("tw:lock:*")
    case.check(
        eventually(lambda: not private_redis.keys("tw:lock:*"), 10.0), f"locks left after every run ended: {left}"
    )
    case.log_lines(nodes, trouble=REDIS_TROUBLE, back=REDIS_BACK)
    case.stop_nodes(nodes)
    case.finish()
