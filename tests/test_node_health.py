"""StoreHealth: the reconciler's pause after an outage, driven by a clock of the test's own."""

from __future__ import annotations

from tickwork.node.health import StoreHealth


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_no_pause_while_the_store_has_always_answered() -> None:
    health = StoreHealth(grace=12.0, clock=Clock())
    assert health.quiet_for() == 0.0
    assert health.answered() is False  # nothing to recover from


def test_a_failure_pauses_reaping_until_a_grace_after_the_store_answers_again() -> None:
    clock = Clock()
    health = StoreHealth(grace=12.0, clock=clock)
    health.failed()
    clock.now += 60.0  # a long outage: still paused, however long
    assert health.quiet_for() == 12.0
    assert health.answered() is True
    clock.now += 5.0
    assert health.quiet_for() == 7.0
    health.answered()  # further answers do not move the end of the pause
    clock.now += 7.0
    assert health.quiet_for() == 0.0


def test_a_new_failure_during_the_pause_pauses_again() -> None:
    clock = Clock()
    health = StoreHealth(grace=12.0, clock=clock)
    health.failed()
    health.answered()
    clock.now += 10.0
    health.failed()
    assert health.quiet_for() == 12.0
    health.answered()
    clock.now += 11.0
    assert health.quiet_for() == 1.0
