"""Chaos: for a while, random nodes are killed with SIGKILL (and replaced) or frozen with
SIGSTOP for up to two leases and woken, while one-time and recurring tasks run.

60 s over 3,000 tasks and 20 recurring ones by default; ``FAULTS_CHAOS_SECONDS=N``
runs N seconds at the same rate (50 tasks a second).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable

import pytest

from tests.faults.harness import LEASE, Case
from tests.faults.nodes import Node

pytestmark = pytest.mark.faults

CHAOS_S = float(os.environ.get("FAULTS_CHAOS_SECONDS", "60"))
TASKS = int(50 * CHAOS_S)
NODES = 4


@pytest.mark.timeout(int(CHAOS_S) + 180)
def test_chaos_of_kills_and_freezes(private_pg_url: str, make_case: Callable[..., Case]) -> None:
    case = make_case(f"chaos-{CHAOS_S:.0f}s", private_pg_url)
    case.start_nodes(NODES)
    case.stream(int(TASKS * 0.9), start_in=1.0, over=CHAOS_S - 3.0, seconds=0.02)
    case.stream(int(TASKS * 0.08), start_in=1.0, over=CHAOS_S - 3.0, seconds=0.5)
    case.stream(TASKS - int(TASKS * 0.9) - int(TASKS * 0.08), start_in=1.0, over=CHAOS_S - 3.0, seconds=3.0)
    case.recurring_tasks(20, every=1.0)
    rng = random.Random(13)
    frozen: dict[str, tuple[Node, float, float]] = {}  # label -> node, since, until
    kills = freezes = 0
    case.fault_begins()
    deadline = time.monotonic() + CHAOS_S
    while time.monotonic() < deadline:
        now = time.monotonic()
        for label, (node, since, until) in list(frozen.items()):
            if now >= until:
                node.thaw()
                case.node_frozen(node, since, time.monotonic())
                del frozen[label]
        working = [n for n in case.fleet.alive() if n.label not in frozen]
        if len(working) >= 2:
            victim = rng.choice(working)
            if rng.random() < 0.4:
                victim.kill()
                case.node_killed(victim)
                kills += 1
                case.fleet.start(case.url)  # a replacement, as an orchestrator would start
            else:
                victim.freeze()
                frozen[victim.label] = (victim, time.monotonic(), time.monotonic() + rng.uniform(0.5, 2 * LEASE))
                freezes += 1
        time.sleep(rng.uniform(1.0, 3.0))  # the chaos's own rhythm
    for node, since, _ in frozen.values():
        node.thaw()
        case.node_frozen(node, since, time.monotonic())
    case.fault_ends()
    case.figure("kills", kills)
    case.figure("freezes", freezes)
    alive = case.fleet.alive()
    case.verify(alive=alive, drain_timeout=120.0)
    case.stop_nodes(alive)
    case.finish()
