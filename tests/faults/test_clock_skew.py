"""One of two nodes runs with its wall clock 10 minutes ahead or behind (libfaketime):
the database clock decides, so nothing runs early, late, twice or is declared lost."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.faults.harness import LEASE, Case, eventually
from tests.faults.nodes import faketime_env
from tickwork import Status

pytestmark = pytest.mark.faults

SKEW_S = {"+10m": 600.0, "-10m": -600.0}
LATE_BOUND_S = 1.5


@pytest.mark.parametrize("offset", ["+10m", "-10m"])
@pytest.mark.timeout(120)
def test_clock_skew_on_one_of_two_nodes(private_pg_url: str, make_case: Callable[..., Case], offset: str) -> None:
    env = faketime_env(offset)
    case = make_case(f"clock-skew-{offset}", private_pg_url)
    [plain] = case.start_nodes(1)
    [skewed] = case.start_nodes(1, env=env)
    case.fault_begins()
    case.stream(4, start_in=0.5, over=1.0, seconds=1.5 * LEASE)  # leases renewed across the skew
    short = case.stream(120, start_in=1.0, over=10.0, seconds=0.05)
    case.recurring_tasks(3, every=1.0)
    eventually(lambda: all(t.status is Status.COMPLETED for t in case.client.tasks(limit=10_000) if t.id in case.due),
               40.0)  # fmt: skip
    case.fault_ends()  # the skew never ends: the checks cover the whole run
    case.verify(alive=[plain, skewed])
    runs = case.runs()
    wall_offset = time.time() - time.monotonic()
    seen = [r.wall - (r.start + wall_offset) for r in runs if r.node == skewed.label]
    case.figure("skewed_node_runs", len(seen))
    case.figure("measured_skew_s", round(sum(seen) / len(seen), 1) if seen else None)
    case.check(
        seen and abs(sum(seen) / len(seen) - SKEW_S[offset]) < 5.0, f"the node's clock was not skewed: {seen[:3]}"
    )
    late = [r.start - case.due[r.task] for r in runs if r.task in short and r.attempt == 1]
    case.figure("min_late_s", min(late) if late else None)
    case.check(late and min(late) >= -0.05, f"a task started {min(late, default=None)} s before it was due")
    case.check(late and max(late) <= LATE_BOUND_S, f"a task started {max(late, default=None)} s late")
    # The skewed node writes the database's times, not its own: started_at within 2 s of the truth.
    starts = {r.execution: r.start + wall_offset for r in runs if r.node == skewed.label}
    written = [
        abs(e.started_at.timestamp() - starts[e.id])
        for e in case.client.executions(limit=10_000)
        if e.id in starts and e.started_at is not None
    ]
    case.figure("max_started_at_error_s", max(written) if written else None)
    case.check(
        written and max(written) <= 2.0, f"the skewed node's started_at is off by up to {max(written, default=None)} s"
    )
    case.check(case.figures["lost_executions"] == 0, "runs were declared lost: a skewed clock judged a lease")
    case.stop_nodes([plain, skewed])
    case.finish()
