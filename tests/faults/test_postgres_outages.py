"""PostgreSQL going away under two working nodes: a restart (fast and immediate), the
server down for 20 s, every node connection terminated again and again, and the database
read-only for 15 s (finished runs must not be declared lost and re-run)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.faults.harness import Case
from tests.faults.servers import NODE_APPNAME, PrivatePostgres

pytestmark = [pytest.mark.faults, pytest.mark.alone]


def outage_workload(case: Case, *, fault_at: float, fault_for: float) -> list[int]:
    """A stream of short tasks due before, during and after the fault, long ones in flight
    when it hits, and three recurring ones; returns the long ones."""
    case.stream(150, start_in=0.5, over=fault_at + fault_for + 4.0, seconds=0.05)
    case.recurring_tasks(3, every=1.0)
    return case.stream(6, start_in=max(0.0, fault_at - 2.0), over=0.5, seconds=3.0)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
@pytest.mark.timeout(120)
def test_postgres_restart(
    private_pg: PrivatePostgres, private_pg_url: str, make_case: Callable[..., Case], mode: str
) -> None:
    case = make_case(f"postgres-restart-{mode}", private_pg_url)
    nodes = case.start_nodes(2)
    long_runs = outage_workload(case, fault_at=3.0, fault_for=1.0)
    case.wait_started(long_runs)
    case.fault_begins()
    private_pg.restart(mode)
    case.fault_ends()
    case.verify(alive=nodes, expect_resume=True)
    case.log_lines(nodes, required=False)  # a quick restart may be over before a node notices
    case.stop_nodes(nodes)
    case.finish()


@pytest.mark.timeout(150)
def test_postgres_down_for_20_seconds(
    private_pg: PrivatePostgres, private_pg_url: str, make_case: Callable[..., Case]
) -> None:
    case = make_case("postgres-down-20s", private_pg_url)
    nodes = case.start_nodes(2)
    long_runs = outage_workload(case, fault_at=3.0, fault_for=20.0)
    case.wait_started(long_runs)
    case.fault_begins()
    private_pg.stop("fast")
    time.sleep(20.0)  # the fault's duration: the server is down this long
    private_pg.start()
    case.fault_ends()
    case.verify(alive=nodes, expect_resume=True)
    case.log_lines(nodes)
    case.stop_nodes(nodes)
    case.finish()


@pytest.mark.timeout(120)
def test_all_node_connections_terminated_repeatedly(
    private_pg: PrivatePostgres, private_pg_url: str, make_case: Callable[..., Case]
) -> None:
    case = make_case("postgres-connections-terminated", private_pg_url)
    nodes = case.start_nodes(2)
    long_runs = outage_workload(case, fault_at=3.0, fault_for=10.0)
    case.wait_started(long_runs)
    case.fault_begins()
    terminated = 0
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:  # the fault: every 0.5 s for 10 s
        terminated += private_pg.terminate_backends(NODE_APPNAME)
        time.sleep(0.5)  # the fault's own rhythm
    case.fault_ends()
    case.figure("sessions_terminated", terminated)
    case.verify(alive=nodes, expect_resume=True)
    case.log_lines(nodes, required=False)
    case.stop_nodes(nodes)
    case.finish()


@pytest.mark.timeout(150)
def test_database_read_only_for_15_seconds(
    private_pg: PrivatePostgres, private_pg_url: str, make_case: Callable[..., Case]
) -> None:
    """Runs that finish while nothing can be written keep their results until the
    database takes writes again: none of them is declared lost and run a second time."""
    case = make_case("postgres-read-only-15s", private_pg_url)
    nodes = case.start_nodes(2)
    finishing = outage_workload(case, fault_at=3.0, fault_for=15.0)  # they end inside the window
    case.wait_started(finishing)
    case.fault_begins()
    try:
        case.figure("sessions_terminated", private_pg.set_read_only(True))
        time.sleep(15.0)  # the fault's duration
    finally:
        private_pg.set_read_only(False)
    case.fault_ends()
    case.verify(alive=nodes, expect_resume=True)
    case.log_lines(nodes)
    case.stop_nodes(nodes)
    case.finish()
