"""Cluster-wide limits in the store's claim (issue 17): ``max_running``, ``lock`` and
``rate_limit`` hold inside the claim, on every store and claim strategy, and claims
racing from many store objects at once never exceed them. The pure decision is
tickwork/limits.py; these drive it through real claims."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import url_of, wait_for
from tests.fake_store import FakeStore
from tickwork import limits
from tickwork.errors import InvalidInput
from tickwork.limits import Candidate, KeyState
from tickwork.model import ExecutionStatus, Kind, Status
from tickwork.schedules import outcome_of
from tickwork.store import Claim, NewTask, Store, open_store
from tickwork.store.base import DueTime

NAME = "lim.t"
LEASE = 30.0
KINDS = ["sqlite", "postgres-skip_locked", "postgres-optimistic", "fake"]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "fake":
        pytest.skip("the in-memory fake has no URL: one store object only")
    return url_of(kind.split("-")[0], request, tmp_path)


def _open(kind: str, url: str) -> Store:
    return open_store(url, claim=kind.split("-")[1] if "-" in kind else None)


@pytest.fixture
def store(kind: str, request: pytest.FixtureRequest) -> Iterator[Store]:
    s: Store = FakeStore() if kind == "fake" else _open(kind, request.getfixturevalue("url"))
    s.migrate()
    yield s
    s.close()


def due(store: Store, *, offset: float = -1.0, **fields: Any) -> NewTask:
    when = store.now() + timedelta(seconds=offset)
    return NewTask(name=NAME, args=[], kwargs={}, kind=Kind.ONE_TIME, scheduled_at=when, next_run_at=when, **fields)


def claim(store: Store, limit: int = 100, node: str = "n1") -> list[Claim]:
    return store.claim(node, [NAME], limit, LEASE)


def finish(store: Store, c: Claim, node: str = "n1") -> None:
    assert store.finish(node, [outcome_of(c, ExecutionStatus.COMPLETED, store.now())]) == [True]


def test_max_running_caps_the_runs_of_a_name_and_frees_as_they_end(store: Store) -> None:
    tasks = store.insert_tasks([due(store, offset=-5 + i, max_running=2) for i in range(5)])
    first = claim(store)
    assert [c.task.id for c in first] == [tasks[0].id, tasks[1].id]  # oldest due first
    assert claim(store) == []  # full: held back, not claimed
    finish(store, first[0])
    [third] = claim(store)
    assert third.task.id == tasks[2].id
    assert sum(t.status is Status.RUNNING for t in store.list_tasks(limit=10)) == 2


def test_a_lock_lets_one_task_run_and_the_others_wait_their_turn_in_due_order(store: Store) -> None:
    same = store.insert_tasks([due(store, offset=-5 + i, lock="customer-42") for i in range(3)])
    other = store.insert_tasks([due(store, lock="customer-7"), due(store)])
    got = {c.task.id for c in claim(store)}
    assert got == {same[0].id, other[0].id, other[1].id}  # one per lock, the unlimited one too
    running = {c.task.id: c for c in store.claim("n1", [NAME], 1, LEASE)}
    assert running == {}
    [held] = [t for t in store.list_tasks(limit=10) if t.id == same[0].id]
    finish(store, _claim_of(store, held.id))
    assert [c.task.id for c in claim(store)] == [same[1].id]


def _claim_of(store: Store, task_id: int) -> Claim:
    """The RUNNING claim of ``task_id``, rebuilt from what the store holds."""
    [c] = [c for c in store.claimed_since("n1", store.now() - timedelta(hours=1)) if c.task.id == task_id]
    return c


def test_a_rate_limit_spaces_starts_and_next_due_at_says_when_the_next_may_start(store: Store) -> None:
    store.insert_tasks([due(store, rate_limit="2/s") for _ in range(3)])
    [first] = claim(store)
    assert claim(store) == []  # the next start is half a second later
    nxt = store.next_due_at([NAME])
    assert nxt is not None and nxt > store.now()  # a node sleeps until then, it does not spin
    assert nxt - first.task.updated_at <= timedelta(seconds=0.5) + timedelta(milliseconds=50)
    if isinstance(store, FakeStore):
        return  # its clock does not move by itself
    wait_for(lambda: len(claim(store)) == 1, timeout=5)


def test_the_due_times_a_node_sleeps_through_end_at_the_lanes_next_start(store: Store) -> None:
    """The lane gives only its earliest time (a rate's start after the next is known once
    the next is taken): plain times after it are left out, so that a node reads again once
    it has passed instead of sleeping past the rate's next start toward them."""
    plain = store.insert_tasks([due(store, offset=s) for s in (10, 20, 40)])
    assert store.upcoming_due([NAME]) == [DueTime(t.next_run_at, True) for t in plain]  # one-time, plain
    [rated] = store.insert_tasks([due(store, offset=30, rate_limit="1/s")])
    assert [u.at for u in store.upcoming_due([NAME])] == [plain[0].next_run_at, plain[1].next_run_at, rated.next_run_at]
    assert store.upcoming_due([NAME])[-1].early is False  # the lane's: claimed only once due
    [early] = store.insert_tasks([due(store, offset=15, max_running=2)])
    assert [u.at for u in store.upcoming_due([NAME])] == [plain[0].next_run_at, early.next_run_at]
    assert [u.at for u in store.upcoming_due([NAME], ahead=1)] == [plain[0].next_run_at]


def test_tasks_without_limits_are_claimed_beside_held_back_ones(store: Store) -> None:
    store.insert_tasks([due(store, offset=-10, max_running=1) for _ in range(20)])
    free = store.insert_tasks([due(store, offset=-1) for _ in range(3)])
    got = {c.task.id for c in claim(store, limit=10)}
    assert len(got) == 4 and {t.id for t in free} <= got


def test_a_task_held_back_by_a_full_limit_is_judged_as_of_when_the_limit_filled(store: Store) -> None:
    a, b = store.insert_tasks([due(store, offset=-2, lock="L"), due(store, offset=-1, lock="L")])
    [first] = claim(store)
    assert first.task.id == a.id and first.judged_at is None  # nothing held it back
    assert claim(store) == []  # b is held back: the lock is full from now
    finish(store, first)
    [second] = claim(store)
    assert second.task.id == b.id and second.judged_at is not None
    assert b.next_run_at <= second.judged_at <= store.now()


def test_why_waiting_names_the_limit_that_holds_a_task_back(store: Store) -> None:
    from tickwork.waiting import why_waiting

    a, b = store.insert_tasks([due(store, offset=-2, lock="L", max_running=5), due(store, offset=-1, lock="L")])
    assert why_waiting(store, b) is None  # nothing runs yet
    claim(store)
    assert why_waiting(store, b) == f"lock 'L' held by task {a.id}"


def test_rows_carry_their_limits(store: Store) -> None:
    [t] = store.insert_tasks([due(store, lock="x", max_running=3, rate_limit="5/m")])
    got = store.get_task(t.id)
    assert got is not None and (got.lock, got.max_running, got.rate_limit) == ("x", 3, "5/m")


# -- racing claimers ---------------------------------------------------------------------


@pytest.mark.parametrize("limit_kind", ["max_running", "lock"])
def test_claimers_racing_from_many_store_objects_never_exceed_a_limit(
    kind: str, url: str, limit_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8 threads, each with its own store object (its own connections), claim and finish
    as fast as they can; after every claim each checks the RUNNING count in the store.
    The decision is slowed down, so that claims overlap between reading the counts and
    committing (without the per-key locks this fails within a few claims)."""
    import tickwork.store.limits as store_limits

    decide = limits.choose

    def slow_choose(*args: Any, **kwargs: Any) -> limits.Choice:
        time.sleep(0.003)
        return decide(*args, **kwargs)

    monkeypatch.setattr(store_limits.limits, "choose", slow_choose)
    setup = _open(kind, url)
    setup.migrate()
    fields = {"max_running": 2} if limit_kind == "max_running" else {"lock": "one"}
    allowed = 2 if limit_kind == "max_running" else 1
    # In two queues, each claimer serving one: claimers see different candidates, so only
    # the limit (not a compare-and-set on the same rows) can keep them apart.
    setup.insert_tasks([due(setup, offset=-1, queue=f"q{n % 2}", **fields) for n in range(60)])
    seen: list[int] = []
    errors: list[BaseException] = []

    def claimer(i: int) -> None:
        s = _open(kind, url)
        try:
            for _ in range(250):
                got = s.claim(f"n{i}", [NAME], 1 + i % 3, LEASE, queues=[f"q{i % 2}"])
                running = sum(t.status is Status.RUNNING for t in s.list_tasks(limit=200))
                seen.append(running)
                if got:
                    time.sleep(0.005)  # the run: others claim meanwhile
                    assert s.finish(f"n{i}", [outcome_of(c, ExecutionStatus.COMPLETED, s.now()) for c in got])
                elif all(t.status is Status.COMPLETED for t in s.list_tasks(limit=200)):
                    return
        except BaseException as exc:
            errors.append(exc)
        finally:
            s.close()

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert max(seen) <= allowed
    assert all(t.status is Status.COMPLETED for t in setup.list_tasks(limit=200))
    setup.close()


# -- the pure rules ----------------------------------------------------------------------


def test_rates_and_limits_are_checked_naming_the_field() -> None:
    assert limits.rate_limit(" 100 / m ") == "100/m" and limits.parse_rate("20/s").interval == timedelta(seconds=0.05)
    for bad in ["", "100", "0/s", "10/d", "1/s/s", "x" * 300]:
        with pytest.raises(InvalidInput) as refused:
            limits.rate_limit(bad)
        assert refused.value.field == "rate_limit" and refused.value.value == bad
    for bad_n in [0, -1, True, 1.5, 10**6]:
        with pytest.raises(InvalidInput) as refused:
            limits.max_running(bad_n)  # type: ignore[arg-type]
        assert refused.value.field == "max_running"
    for bad_lock in ["", "x" * 201, "a\nb", 7]:
        with pytest.raises(InvalidInput) as refused:
            limits.lock(bad_lock)  # type: ignore[arg-type]
        assert refused.value.field == "lock"


def test_choose_never_gives_a_rate_more_than_one_start_an_interval() -> None:
    now = datetime(2026, 1, 1, 10)
    cands = [Candidate(i, 1, "r", now - timedelta(seconds=1), 0, None, None, "10/s") for i in range(5)]
    first = limits.choose(cands, 10, running={}, states={}, now=now)
    assert [c.id for c in first.chosen] == [0]
    assert first.states["rate:r"] == KeyState(tat=now + timedelta(seconds=0.1), full_since=now, held_until=now)
    later = limits.choose(cands[1:], 10, running={}, states=first.states, now=now + timedelta(seconds=0.1))
    # Only the instant one claim saw it held counts: no claim saw it held since.
    assert [c.id for c in later.chosen] == [1] and 1 not in later.judged_at
    assert later.states["rate:r"].full_since == now + timedelta(seconds=0.1)  # the rest held from now


def test_a_limit_that_freed_while_no_node_claimed_excuses_no_lateness_after_it() -> None:
    """Held from 10:00 to 10:05 (the last claim that saw it full); the next claim comes at
    16:00: a task due at 11:00 was never held back, and is judged at 16:00 (5 h late)."""
    t = datetime(2026, 1, 1, 10)
    state = KeyState(full_since=t, held_until=t + timedelta(minutes=5))
    late = Candidate(1, 1, "n", t + timedelta(hours=1), 0, "L", None, None)
    choice = limits.choose([late], 1, running={}, states={"lock:L": state}, now=t + timedelta(hours=6))
    assert [c.id for c in choice.chosen] == [1] and 1 not in choice.judged_at
    early = Candidate(2, 1, "n", t - timedelta(minutes=1), 0, "L", None, None)  # due 09:59, held 10:00-10:05
    choice = limits.choose([early], 1, running={}, states={"lock:L": state}, now=t + timedelta(hours=6))
    assert choice.judged_at[2] == t + timedelta(hours=6) - timedelta(minutes=5)


def test_a_rate_interval_rounds_up_so_no_window_holds_one_start_more() -> None:
    assert limits.parse_rate("3/s").interval == timedelta(microseconds=333_334)


def test_replace_refuses_to_change_a_lock_naming_the_field(tmp_path: Path) -> None:
    from tickwork import App

    app = App(f"sqlite:///{tmp_path / 'l.db'}")
    app.task(name="lim.app", context=False)(print)
    first = app.schedule("lim.app", key="k", lock="a", delay=60)
    with pytest.raises(InvalidInput) as refused:
        app.schedule("lim.app", key="k", lock="b", delay=60, replace=True)
    assert refused.value.field == "lock" and refused.value.value == "b"
    assert app.get(first.id).lock == "a"  # nothing changed
    assert app.schedule("lim.app", key="k", lock="a", delay=30, replace=True).lock == "a"
    app.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres-skip_locked", "postgres-optimistic"], indirect=True)
def test_a_hand_written_rate_the_code_cannot_read_does_not_stop_the_other_claims(
    store: Store, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    [bad] = store.insert_tasks([due(store, offset=-5, rate_limit="1/s")])
    ok = store.insert_tasks([due(store, lock="fine"), due(store)])
    sql = f"UPDATE tickwork_tasks SET rate_limit = 'lots' WHERE id = {bad.id}"
    if url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(url.split("///", 1)[1]) as conn:
            conn.execute(sql)
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.encode())
    assert {c.task.id for c in claim(store)} == {t.id for t in ok}
    assert f"task {bad.id}: its limits cannot be read" in caplog.text
