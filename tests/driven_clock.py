"""A driven clock for unit tests of the node: the store's wall clock and the node's
monotonic clock, moved together by hand (nothing in a test sleeps for it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class DrivenClock:
    def __init__(self) -> None:
        self.wall = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
        self.mono = 1000.0

    def now(self) -> datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds
