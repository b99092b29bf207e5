"""Another session holds a row lock on a due task for 30 s (``SELECT … FOR UPDATE``),
under both claim strategies: the other tasks run on time and the nodes stay near idle."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest

from tests.faults.harness import Case
from tests.faults.servers import PrivatePostgres

pytestmark = pytest.mark.faults

HOLD_S = 30.0
LATE_BOUND_S = 1.5
"""A task due while the lock is held starts within this of its due time (poll 0.2 s)."""
CPU_BOUND = 0.25
"""Cores a node may use on average over the 30 s, for a trickle of 2 tiny runs a second."""


@pytest.mark.parametrize("claim", ["optimistic", "skip_locked"])
@pytest.mark.timeout(150)
def test_a_row_lock_held_30s_on_a_due_task(
    private_pg: PrivatePostgres, private_pg_url: str, make_case: Callable[..., Case], claim: str
) -> None:
    case = make_case(f"row-lock-30s-{claim}", private_pg_url)
    nodes = case.start_nodes(2, env={"FAULTS_CLAIM": claim})
    [locked] = case.stream(1, start_in=2.0, over=0.0)
    others = case.stream(60, start_in=2.0, over=HOLD_S - 5.0)  # all due while it is held
    with psycopg.connect(private_pg_url, connect_timeout=5) as session:
        session.execute("SELECT id FROM tickwork_tasks WHERE id = %s FOR UPDATE", (locked,))  # held: no commit
        case.fault_begins()
        cpu = {n.label: n.cpu_seconds() for n in nodes}
        time.sleep(HOLD_S)  # the fault's duration
        used = {n.label: (n.cpu_seconds() - cpu[n.label]) / HOLD_S for n in nodes}
        session.rollback()
    case.fault_ends()
    assert case.fault_end is not None
    late = [
        r.start - case.due[r.task]
        for r in case.runs()
        if r.task in others and r.attempt == 1 and r.start < case.fault_end  # started while it was held
    ]
    case.figure("others_started", len(late))
    case.figure("others_max_late_s", max(late) if late else None)
    case.figure("cpu_cores", {label: round(c, 3) for label, c in used.items()})
    case.check(len(late) == len(others), f"only {len(late)} of {len(others)} other tasks started while locked")
    case.check(
        late and max(late) <= LATE_BOUND_S,
        f"tasks due while the row was locked started up to {max(late, default=None)} s late (bound {LATE_BOUND_S} s)",
    )
    for label, cores in used.items():
        case.check(cores <= CPU_BOUND, f"node {label} used {cores:.2f} cores while the row was locked")
    case.verify(alive=nodes)
    case.log_lines(nodes, required=False)  # a node whose claims or renewals hit the lock says so, and when it ends
    case.stop_nodes(nodes)
    case.finish()
