"""Four nodes starting at the same moment on an empty database: one of them creates the
schema, none fails, and every task then runs once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.harness import Case, eventually
from tests.faults.nodes import Fleet

pytestmark = pytest.mark.faults


@pytest.mark.parametrize("store", ["postgres", "sqlite"])
@pytest.mark.timeout(120)
def test_four_nodes_starting_at_once_on_an_empty_database(
    request: pytest.FixtureRequest, tmp_path: Path, fleet: Fleet, make_case: Callable[..., Case], store: str
) -> None:
    if store == "postgres":
        url = str(request.getfixturevalue("private_pg_url"))  # a database without a schema
    else:
        url = f"sqlite:///{tmp_path / 'fresh.db'}"  # not even a file yet
    nodes = [fleet.start(url) for _ in range(4)]  # at once; nothing has touched the database
    case = make_case(f"four-nodes-at-once-{store}", url)
    case.fault_begins()
    # Wait on the nodes' own words, not on the database, so that no client migrates first.
    up = eventually(lambda: all(" started: " in n.output() or not n.alive() for n in nodes), 60.0)
    case.check(up and all(n.alive() for n in nodes), "not every node started")
    case.wait_registered(nodes)
    case.stream(400, start_in=0.0, over=2.0, seconds=0.01)
    case.fault_ends()
    case.verify(alive=nodes)
    for node in nodes:
        case.check("Traceback" not in node.output(), f"node {node.label} logged a traceback while starting")
    case.figure("nodes_that_ran_tasks", len({r.node for r in case.runs()}))
    case.stop_nodes(nodes)
    case.finish()
