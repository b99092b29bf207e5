"""A node cut off from PostgreSQL by a network partition past its lease, then healed:
it must stop its runs before another node could take them over, so that two copies of
a task never run at once; and a network that drops connections and lags."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pytest

from tests.faults.harness import LEASE, Case
from tests.faults.proxy import TcpProxy
from tests.faults.servers import PrivatePostgres

pytestmark = [pytest.mark.faults, pytest.mark.alone]

PARTITION_S = 2.5 * LEASE


def proxied(url: str, server: PrivatePostgres, proxy: TcpProxy) -> str:
    return url.replace(f":{server.port}/", f":{proxy.port}/")


@pytest.mark.timeout(120)
def test_a_partitioned_node_stops_its_runs_before_another_node_can_take_them(
    private_pg: PrivatePostgres,
    private_pg_url: str,
    proxy_factory: Callable[[int], TcpProxy],
    make_case: Callable[..., Case],
) -> None:
    proxy = proxy_factory(private_pg.port)
    case = make_case("partition-past-lease", private_pg_url)
    [cut] = case.start_nodes(1, url=proxied(private_pg_url, private_pg, proxy))
    long_runs = case.stream(4, start_in=0.0, over=0.3, seconds=10.0)
    case.wait_started(long_runs)  # all four on the node about to be cut off
    [other] = case.start_nodes(1)
    case.stream(60, start_in=0.5, over=PARTITION_S + 5.0, seconds=0.05)
    case.recurring_tasks(2, every=1.0)
    case.fault_begins()
    proxy.partition()
    time.sleep(PARTITION_S)  # the fault's duration: 2.5 leases without a byte through
    proxy.heal()
    case.fault_ends()
    case.verify(alive=[cut, other])
    # How long before the other node's copy started did the cut-off copy stop?
    margins = []
    for task in long_runs:
        copies = [r for r in case.runs() if r.task == task]
        mine = [r for r in copies if r.node == cut.label]
        theirs = [r for r in copies if r.node == other.label]
        if mine and theirs:
            stopped = mine[0].done if mine[0].done is not None else math.inf
            margins.append(theirs[0].start - stopped)
    # Its leases ran out at most a lease after the partition began (its last renewal came
    # before): by then its copies must have stopped, whoever takes them over and when.
    assert case.fault_start is not None
    stops = [r.done - case.fault_start if r.done is not None else math.inf for r in case.runs()
             if r.task in long_runs and r.node == cut.label]  # fmt: skip
    case.figure("cut_copies_stopped_after_s", max(stops, default=None))
    case.check(
        stops and max(stops) < LEASE,
        f"the cut-off node's copies ran on {max(stops, default=None)} s into the partition, past its lease ({LEASE} s)",
    )
    case.figure("taken_over", len(margins))
    case.figure("min_stop_margin_s", min(margins) if margins else None)
    case.check(margins, "no long run was taken over by the other node during the partition")
    case.log_lines([cut])
    case.stop_nodes([cut, other])
    case.finish()


@pytest.mark.timeout(120)
def test_a_network_that_drops_connections_and_lags(
    private_pg: PrivatePostgres,
    private_pg_url: str,
    proxy_factory: Callable[[int], TcpProxy],
    make_case: Callable[..., Case],
) -> None:
    """300 ms on every chunk for 8 s, every connection reset each 2 s of it."""
    proxy = proxy_factory(private_pg.port)
    url = proxied(private_pg_url, private_pg, proxy)
    case = make_case("network-drops-and-lag", private_pg_url)
    nodes = case.start_nodes(2, url=url)
    long_runs = case.stream(4, start_in=0.0, over=0.3, seconds=3.0)
    case.stream(100, start_in=0.5, over=14.0, seconds=0.05)
    case.recurring_tasks(2, every=1.0)
    case.wait_started(long_runs)
    case.fault_begins()
    proxy.delay(0.3)
    dropped = 0
    for _ in range(4):
        time.sleep(2.0)  # the fault's own rhythm
        dropped += proxy.drop()
    proxy.heal()
    case.fault_ends()
    case.figure("connections_reset", dropped)
    case.verify(alive=nodes, expect_resume=True)
    case.log_lines(nodes, required=False)
    case.stop_nodes(nodes)
    case.finish()
