"""Edits of stored tasks and syncs of code schedules (``Store.edit_task``,
``Store.sync_schedules``: tickwork/store/base.py), the replan an edit of a running task
leaves for the end of its run, ``existed`` on a key's task, and the ends of a recurring
schedule (``until``, ``max_runs``) in the policy, on every store kind and the in-memory
fake (tests/fake_store.py).

Races run on the real stores with two store objects on one database (PostgreSQL: two
connections; SQLite: two connections to one file), and on the fake with one object
shared by two threads. Each test makes digests of declaration sets of its own.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tests import test_store_contract as contract
from tests.conftest import FAKE, wait_for
from tests.test_store_contract import (
    LEASE,
    NAME,
    OTHER,
    TINY_LEASE,
    all_tasks,
    at,
    claim_one,
    executions_of,
    expired_claim_for,
    get,
    insert_one,
    is_utc,
    one_time,
    recurring,
)
from tickwork import declarations, editing
from tickwork.changes import Edit, Removal, SyncView, SyncWrites
from tickwork.errors import EditConflict, KeyHeld
from tickwork.model import ErrorInfo, ExecutionStatus, Kind, Misfire, NewTask, OnLost, Overlap, Status, Task
from tickwork.schedules import decide, failed_outcome, outcome_of, settle, skipped_outcome
from tickwork.store import Claim, Store, open_store

# The contract's store fixtures: every store kind and the in-memory fake.
store_kind = contract.store_kind
store_url = contract.store_url
store = contract.store

NODE = "node-a"
ROUNDS = 20
NOTE = "removed: code no longer declares this schedule"


@pytest.fixture
def twin(store_kind: str, store: Store, request: pytest.FixtureRequest) -> Iterator[Store]:
    """A second store object on the same data (the fake: the same object, from another thread)."""
    if store_kind == FAKE:
        yield store
        return
    other = open_store(request.getfixturevalue("store_url"))
    yield other
    other.close()


# -- helpers ----------------------------------------------------------------------------------


def edit(before: Task, *, reset_cancel: bool = False, **changes: Any) -> Edit:
    return Edit(before, dataclasses.replace(before, **changes), reset_cancel=reset_cancel)


def apply(store: Store, before: Task, **changes: Any) -> Task:
    written = store.edit_task(edit(before, **changes))
    assert written is not None, "the edit's guard failed"
    return written


def finish(store: Store, claim: Claim, status: ExecutionStatus = ExecutionStatus.COMPLETED) -> None:
    assert store.finish(NODE, [outcome_of(claim, status, store.now())]) == [True]


def claim_when_due(store: Store, name: str = NAME) -> Claim:
    """The claim of a task that becomes due within moments (a retry's short backoff)."""
    found = wait_for(lambda: store.claim(NODE, [name], 1, LEASE), timeout=10)
    assert isinstance(found, list) and len(found) == 1
    claim: Claim = found[0]
    return claim


def replanned(store: Store, c: Claim, seconds: float = 600.0, **changes: Any) -> Task:
    """Edit the running task of ``c``: a new schedule, taken when its run ends."""
    slot = at(store, seconds)
    return apply(store, c.task, replan_at=slot, replan_run_at=slot + timedelta(seconds=2), **changes)


def code_task(store: Store, key: str, *, name: str = NAME, offset: float = 3600.0, **fields: Any) -> NewTask:
    return recurring(store, name=name, offset=offset, key=key, origin="code", **fields)


def digest() -> str:
    return uuid.uuid4().hex


class Planner:
    """A plan function for ``sync_schedules`` that keeps the views it was given."""

    def __init__(self, make: Callable[[SyncView], SyncWrites] = lambda view: SyncWrites()) -> None:
        self.views: list[SyncView] = []
        self._make = make

    def __call__(self, view: SyncView) -> SyncWrites:
        self.views.append(view)
        return self._make(view)

    @property
    def seen(self) -> datetime:
        return self.views[-1].seen


def creating(*news: NewTask) -> Planner:
    """Create each task whose key has no code schedule yet, as declared when the set was first seen."""
    return Planner(
        lambda view: SyncWrites(
            create=[dataclasses.replace(n, declared_at=view.seen) for n in news if n.key not in view.code]
        )
    )


def run_together(calls: Sequence[Callable[[], Any]], timeout: float = 30.0) -> list[Any]:
    """Each call on a thread of its own, released at once; their results in order."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(i: int, call: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = call()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads)
    if errors:
        raise errors[0]
    return results


# -- the new fields and existed ------------------------------------------------------------------


def test_the_new_fields_round_trip(store: Store) -> None:
    ist = timezone(timedelta(hours=5, minutes=30))
    until = datetime(2031, 5, 17, 13, 45, 12, 345678, tzinfo=ist)
    declared = datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    task = insert_one(
        store, recurring(store, key="fields", until=until, max_runs=3, origin="code", declared_at=declared)
    )
    assert (task.until, task.max_runs, task.origin, task.declared_at) == (until, 3, "code", declared)
    assert task.until is not None and is_utc(task.until)
    assert (task.revision, task.replan_at, task.replan_run_at, task.existed) == (0, None, None, False)
    plain = insert_one(store, one_time(store))
    assert (plain.until, plain.max_runs, plain.origin, plain.declared_at) == (None, None, None, None)
    assert get(store, task.id) == task
    assert get(store, plain.id) == plain


def test_a_key_s_live_task_is_returned_as_existed(store: Store) -> None:
    first = insert_one(store, one_time(store, key="daily", args=[1]))
    assert first.existed is False
    again = insert_one(store, one_time(store, key="daily", args=[2]))
    assert again.existed is True
    assert (again.id, again.args) == (first.id, [1])
    assert get(store, first.id).existed is False  # a fact about the call, not the task
    assert "existed" not in again.to_dict()

    a, b, c = store.insert_tasks([one_time(store, key="batch"), one_time(store), one_time(store, key="batch")])
    assert (a.existed, b.existed, c.existed) == (False, False, True)
    assert c.id == a.id

    store.cancel(first.id)
    fresh = insert_one(store, one_time(store, key="daily"))
    assert fresh.id != first.id and fresh.existed is False


# -- edit_task ---------------------------------------------------------------------------------


def test_an_edit_of_a_pending_task_writes_its_definition_and_state(store: Store) -> None:
    task = insert_one(store, recurring(store, key="edited", args=[1], interval=60.0))
    finish(store, claim_one(store))
    before = get(store, task.id)
    assert before.status is Status.PENDING and before.run_count == 1
    runs = executions_of(store, task.id)
    slot, until, declared = at(store, -5), at(store, 86_400), at(store, -3600)
    definition: dict[str, Any] = dict(
        name=OTHER, args=[2, "zwei"], kwargs={"k": ["v"]}, cron="*/5 * * * *", timezone="Europe/Berlin",
        interval=None, misfire=Misfire.SKIP, misfire_grace=5.5, jitter=1.25, timeout=9.5, max_retries=2,
        retry_backoff=3.5, priority=7, max_catchup=4, overlap=Overlap.REPLACE, on_lost=OnLost.FAIL,
        max_runtime=30.5, until=until, max_runs=9, declared_at=declared,
    )  # fmt: skip
    state: dict[str, Any] = dict(
        scheduled_at=slot, next_run_at=slot + timedelta(seconds=1), attempt=0, triggered=False,
        last_decision="edited by the test",
    )  # fmt: skip
    # Not an edit's to write: the task's identity and its runs' bookkeeping.
    foreign: dict[str, Any] = dict(
        key="another-key", kind=Kind.ONE_TIME, origin="code", run_count=99, last_status=ExecutionStatus.FAILED,
        lease_owner="thief",
    )  # fmt: skip
    written = apply(store, before, **definition, **state, **foreign)

    assert (written.id, written.version, written.revision) == (task.id, before.version + 1, before.revision + 1)
    assert written.status is Status.PENDING
    for field, value in {**definition, **state}.items():
        assert getattr(written, field) == value, field
    for field in foreign:
        assert getattr(written, field) == getattr(before, field), field
    assert written.created_at == before.created_at
    assert written.updated_at >= before.updated_at
    assert get(store, task.id) == written
    assert executions_of(store, task.id) == runs  # the history stays with the task

    c = claim_one(store, names=[OTHER])
    assert c.task.args == [2, "zwei"] and c.fence == written.version + 1


@pytest.mark.parametrize("meanwhile", ["claim", "edit", "edit-running", "finish", "pause", "cancel", "trigger"])
def test_a_stale_edit_changes_nothing(store: Store, meanwhile: str) -> None:
    task = insert_one(store, recurring(store, args=[0]))
    before = get(store, task.id)
    if meanwhile == "claim":
        claim_one(store)  # version and status
    elif meanwhile == "edit":
        apply(store, before, args=[1])  # revision and version
    elif meanwhile == "edit-running":
        before = claim_one(store).task
        apply(store, before, args=[1])  # revision alone: a running task's version is its fence
        assert get(store, task.id).version == before.version
    elif meanwhile == "finish":
        c = claim_one(store)
        before = c.task
        finish(store, c)  # status alone: an outcome keeps the version
        assert (get(store, task.id).version, get(store, task.id).revision) == (before.version, before.revision)
    elif meanwhile == "pause":
        store.pause(task.id)
    elif meanwhile == "cancel":
        store.cancel(task.id)
    else:
        store.trigger(task.id)
    now = get(store, task.id)
    runs = executions_of(store, task.id)
    assert store.edit_task(edit(before, args=[2], priority=9, status=Status.PENDING)) is None
    assert get(store, task.id) == now
    assert executions_of(store, task.id) == runs


@pytest.mark.parametrize("end", ["finish", "reap"])
def test_an_edit_of_a_running_task_keeps_its_fence_and_replans_when_the_run_ends(store: Store, end: str) -> None:
    task = insert_one(store, recurring(store, args=[0], interval=60.0))
    c = claim_one(store, lease=TINY_LEASE if end == "reap" else LEASE)
    written = replanned(store, c, args=[1], interval=120.0)
    assert written.status is Status.RUNNING
    assert (written.version, written.revision) == (c.fence, c.task.revision + 1)
    assert (written.lease_owner, written.lease_expires_at) == (NODE, c.task.lease_expires_at)
    assert written.scheduled_at == c.task.scheduled_at  # the run goes on for the slot it was claimed for
    assert written.replan_at is not None and written.replan_run_at is not None
    if end == "finish":
        assert [r.fence for r in store.renew(NODE, [(task.id, c.fence)], LEASE)] == [c.fence]
        applied = store.finish(NODE, [outcome_of(c, ExecutionStatus.COMPLETED, store.now())])
    else:
        lost = expired_claim_for(store, task.id)
        assert (lost.fence, lost.execution_id) == (c.fence, c.execution_id)
        applied = store.reap(NODE, [outcome_of(lost, ExecutionStatus.FAILED, store.now())])
    assert applied == [True]

    after = get(store, task.id)
    assert settle(c.task, ExecutionStatus.COMPLETED, store.now()).scheduled_at != written.replan_at
    assert (after.status, after.attempt, after.triggered) == (Status.PENDING, 0, False)
    assert (after.scheduled_at, after.next_run_at) == (written.replan_at, written.replan_run_at)
    assert (after.replan_at, after.replan_run_at) == (None, None)
    assert (after.interval, after.args, after.run_count, after.lease_owner) == (120.0, [1], 1, None)
    [run] = executions_of(store, task.id)
    assert run.id == c.execution_id
    assert run.status is (ExecutionStatus.COMPLETED if end == "finish" else ExecutionStatus.FAILED)


def test_a_retry_keeps_the_replan_for_the_run_after_it(store: Store) -> None:
    task = insert_one(store, recurring(store, max_retries=1, retry_backoff=0.001))
    c = claim_one(store)
    written = replanned(store, c)
    finish(store, c, ExecutionStatus.FAILED)
    retrying = get(store, task.id)
    assert (retrying.status, retrying.attempt, retrying.scheduled_at) == (Status.PENDING, 1, c.task.scheduled_at)
    assert (retrying.replan_at, retrying.replan_run_at) == (written.replan_at, written.replan_run_at)

    retry = claim_when_due(store)
    assert (retry.task.attempt, retry.scheduled_for) == (2, c.scheduled_for)
    finish(store, retry)
    after = get(store, task.id)
    assert (after.status, after.attempt) == (Status.PENDING, 0)
    assert (after.scheduled_at, after.next_run_at) == (written.replan_at, written.replan_run_at)
    assert after.replan_at is None


@pytest.mark.parametrize("end", ["cancelled", "completed", "failed"])
def test_an_end_of_the_task_spends_the_replan(store: Store, end: str) -> None:
    task = insert_one(store, recurring(store, max_runs=1 if end == "completed" else None))
    c = claim_one(store)
    replanned(store, c)
    now = store.now()
    if end == "cancelled":
        store.cancel(task.id)  # while the run goes on: cancel wins at the write
        outcome = outcome_of(c, ExecutionStatus.COMPLETED, now)
    elif end == "completed":
        outcome = outcome_of(c, ExecutionStatus.COMPLETED, now)  # max_runs reached
    else:
        outcome = failed_outcome(c, now, ErrorInfo("Lost", "its node is gone"))
    assert store.finish(NODE, [outcome]) == [True]
    after = get(store, task.id)
    assert after.status is Status(end.upper())
    assert (after.replan_at, after.replan_run_at) == (None, None)
    if end == "failed":
        assert after.scheduled_at == c.task.scheduled_at


@pytest.mark.parametrize("write", ["finish", "release"])
def test_a_cancel_winning_over_a_retry_spends_the_replan(store: Store, write: str) -> None:
    task = insert_one(store, recurring(store, max_retries=2, retry_backoff=0.001))
    c = claim_one(store)
    if write == "release":  # a retry's claim, given back unstarted
        finish(store, c, ExecutionStatus.FAILED)
        c = claim_when_due(store)
        assert c.task.attempt == 2
    replanned(store, c)
    store.cancel(task.id)
    if write == "finish":
        assert store.finish(NODE, [outcome_of(c, ExecutionStatus.FAILED, store.now())]) == [True]
    else:
        assert store.release(NODE, [c]) == 1
    after = get(store, task.id)
    assert after.status is Status.CANCELLED
    assert (after.replan_at, after.replan_run_at) == (None, None)


def test_a_claim_given_back_keeps_the_replan_for_the_run_its_slot_still_gets(store: Store) -> None:
    task = insert_one(store, recurring(store))
    c = claim_one(store)
    written = replanned(store, c)
    assert store.release(NODE, [c]) == 1
    after = get(store, task.id)
    assert (after.status, after.attempt, after.version) == (Status.PENDING, 0, c.fence)
    assert (after.scheduled_at, after.next_run_at) == (c.task.scheduled_at, c.task.next_run_at)  # the slot still runs
    assert (after.replan_at, after.replan_run_at) == (written.replan_at, written.replan_run_at)
    assert executions_of(store, task.id) == []
    again = claim_one(store)
    assert again.scheduled_for == c.scheduled_for
    finish(store, again)
    moved = get(store, task.id)
    assert (moved.scheduled_at, moved.next_run_at, moved.replan_at) == (written.replan_at, written.replan_run_at, None)

    # A retry's claim given back keeps it: the retry of its slot is still to run.
    retried = insert_one(store, recurring(store, name=OTHER, max_retries=1, retry_backoff=0.001))
    first = claim_one(store, names=[OTHER])
    finish(store, first, ExecutionStatus.FAILED)
    retry = claim_when_due(store, OTHER)
    written = replanned(store, retry)
    assert store.release(NODE, [retry]) == 1
    after = get(store, retried.id)
    assert (after.status, after.attempt, after.scheduled_at) == (Status.PENDING, 1, first.task.scheduled_at)
    assert (after.replan_at, after.replan_run_at) == (written.replan_at, written.replan_run_at)


@pytest.mark.parametrize("run_only", [False, True])
def test_a_cancel_request_landing_between_the_read_and_the_edit_is_kept(store: Store, run_only: bool) -> None:
    task = insert_one(store, recurring(store))
    c = claim_one(store)
    before = c.task  # read before the request
    requested = store.cancel(task.id, run_only=run_only)
    assert requested is not None and requested.cancel_requested
    assert (requested.version, requested.revision, requested.status) == (before.version, before.revision, before.status)
    written = apply(store, before, args=[5])
    assert (written.cancel_requested, written.cancel_run_only) == (True, run_only)
    [renewal] = store.renew(NODE, [(task.id, c.fence)], LEASE)
    assert (renewal.cancel_requested, renewal.run_only) == (True, run_only)
    finish(store, c)  # decided from the snapshot, which knew of no cancel
    after = get(store, task.id)
    assert after.status is (Status.PENDING if run_only else Status.CANCELLED)
    assert after.args == [5]


@pytest.mark.parametrize("reset", [True, False])
def test_reset_cancel_clears_the_request_of_a_task_revived(store: Store, reset: bool) -> None:
    task = insert_one(store, recurring(store))
    cancelled = store.cancel(task.id)
    assert cancelled is not None and (cancelled.status, cancelled.cancel_requested) == (Status.CANCELLED, True)
    retry = editing.retried(cancelled, store.now())
    assert retry.reset_cancel
    written = store.edit_task(dataclasses.replace(retry, reset_cancel=reset))
    assert written is not None
    assert (written.status, written.attempt, written.triggered) == (Status.PENDING, 0, True)
    assert (written.version, written.revision) == (cancelled.version + 1, cancelled.revision + 1)
    assert (written.cancel_requested, written.cancel_run_only) == (not reset, False)
    c = claim_one(store)
    assert c.task.cancel_requested is not reset
    finish(store, c)
    assert get(store, task.id).status is (Status.PENDING if reset else Status.CANCELLED)


def test_reviving_a_task_whose_key_another_live_task_holds_raises_key_held(store: Store) -> None:
    first = insert_one(store, one_time(store, key="k"))
    store.cancel(first.id)
    second = insert_one(store, one_time(store, key="k", args=["second"]))
    assert second.id != first.id and not second.existed
    ended = get(store, first.id)
    with pytest.raises(KeyHeld) as raised:
        store.edit_task(editing.retried(ended, store.now()))
    assert (raised.value.task_id, raised.value.key, raised.value.holder) == (first.id, "k", second.id)
    assert get(store, first.id) == ended

    # An edit that leaves it ended is no matter of keys.
    noted = apply(store, ended, last_decision="looked at")
    assert noted.status is Status.CANCELLED

    store.cancel(second.id)
    revived = store.edit_task(editing.retried(noted, store.now()))
    assert revived is not None and revived.status is Status.PENDING
    again = insert_one(store, one_time(store, key="k"))
    assert (again.id, again.existed) == (first.id, True)


# -- sync_schedules ---------------------------------------------------------------------------


def test_a_sync_creates_what_is_missing_then_finds_it(store: Store) -> None:
    d, keys, names = digest(), ["code.a", "code.b"], [NAME, OTHER]
    news = [code_task(store, "code.a"), code_task(store, "code.b", name=OTHER, interval=30.0)]
    first = creating(*news)
    writes = store.sync_schedules(d, keys, names, first)
    [view] = first.views
    assert (view.code, view.holders) == ({}, {})
    assert writes.create == [dataclasses.replace(n, declared_at=view.seen) for n in news]
    tasks = {t.key: t for t in all_tasks(store)}
    assert set(tasks) == set(keys)
    for new in news:
        made = tasks[new.key]
        assert (made.origin, made.declared_at, made.status) == ("code", view.seen, Status.PENDING)
        assert (made.name, made.interval, made.scheduled_at) == (new.name, new.interval, new.scheduled_at)

    second = creating(*news)
    assert store.sync_schedules(d, keys, names, second).create == []
    [again] = second.views
    assert again.code == tasks
    assert again.seen == view.seen
    assert len(all_tasks(store)) == 2


def test_a_sync_s_view(store: Store) -> None:
    def made(key: str, *, code: bool = True, name: str = NAME, ended: bool = False) -> Task:
        task = insert_one(store, code_task(store, key, name=name) if code else recurring(store, name=name, key=key))
        if ended:
            store.cancel(task.id)
        return task

    made("k.renewed", ended=True)
    renewed = made("k.renewed")
    ended_declared = made("k.ended", ended=True)
    live_of_a_name = made("k.live")
    made("k.gone", ended=True)  # ended, and its key is no longer declared
    made("k.other", name=OTHER)  # live, of a name this sync does not register
    runtime = made("k.runtime", code=False)
    made("k.undeclared", code=False)
    made("k.runtime-ended", code=False, ended=True)
    code_before = made("k.both", ended=True)
    runtime_after = made("k.both", code=False)

    keys = ["k.renewed", "k.ended", "k.runtime", "k.runtime-ended", "k.both"]
    planner = Planner()
    assert store.sync_schedules(digest(), keys, [NAME], planner) == SyncWrites()
    [view] = planner.views
    expected = {t.key: get(store, t.id) for t in (renewed, ended_declared, live_of_a_name, code_before)}
    assert view.code == expected
    assert view.holders == {t.key: get(store, t.id) for t in (runtime, runtime_after)}


def test_a_sync_edits_in_place(store: Store) -> None:
    d, key = digest(), "code.edited"
    store.sync_schedules(d, [key], [NAME], creating(code_task(store, key, offset=-10.0, interval=60.0)))
    finish(store, claim_one(store))
    runs = executions_of(store, get_key(store, key).id)
    declared = code_task(store, key, interval=120.0, args=["new"])
    edits: list[Edit] = []

    def plan(view: SyncView) -> SyncWrites:
        edits.append(editing.edit_to(view.code[key], declared, reschedule=True, declared_at=view.seen))
        return SyncWrites(edit=edits)

    planner = Planner(plan)
    writes = store.sync_schedules(digest(), [key], [NAME], planner)
    assert writes.edit == edits
    [e] = edits
    after = get_key(store, key)
    assert after.id == e.before.id
    assert (after.interval, after.args, after.declared_at) == (120.0, ["new"], planner.seen)
    assert (after.version, after.revision) == (e.before.version + 1, e.before.revision + 1)
    assert (after.scheduled_at, after.next_run_at) == (e.after.scheduled_at, e.after.next_run_at)
    assert executions_of(store, after.id) == runs
    assert len(all_tasks(store)) == 1


def get_key(store: Store, key: str) -> Task:
    [task] = [t for t in all_tasks(store) if t.key == key and not t.status.is_terminal]
    return task


@pytest.mark.parametrize("stale", ["edit", "removal"])
def test_a_sync_whose_guard_fails_writes_nothing(store: Store, stale: str) -> None:
    old = insert_one(store, code_task(store, "code.stale", offset=-10.0))
    read = get(store, old.id)
    if stale == "edit":
        changed: Task = claim_one(store).task  # a claim: version and status
    else:
        changed = apply(store, read, args=["edited"])  # an edit: revision
    runs = executions_of(store, old.id)
    d = digest()
    news = [code_task(store, "code.new")]

    def plan(view: SyncView) -> SyncWrites:
        writes = creating(*news)(view)
        if stale == "edit":
            return dataclasses.replace(writes, edit=[edit(read, args=["sync"], declared_at=view.seen)])
        return dataclasses.replace(writes, remove=[Removal(read, NOTE, view.seen)])

    with pytest.raises(EditConflict) as raised:
        store.sync_schedules(d, ["code.new", "code.stale"], [NAME], plan)
    assert raised.value.task_id == old.id
    mark = store.now()
    assert [t.key for t in all_tasks(store)] == ["code.stale"]
    assert get(store, old.id) == changed
    assert executions_of(store, old.id) == runs
    # Nor was the set remembered: it is first seen by the next sync.
    planner = Planner()
    store.sync_schedules(d, [], [], planner)
    assert planner.seen >= mark


def test_a_sync_removes_code_schedules_no_longer_declared(store: Store) -> None:
    pending = insert_one(store, code_task(store, "gone.pending"))
    paused = insert_one(store, code_task(store, "gone.paused"))
    store.pause(paused.id)
    running = insert_one(store, code_task(store, "gone.running", offset=-10.0))
    kept = insert_one(store, code_task(store, "kept.other", name=OTHER))  # not a name this sync owns
    runtime = insert_one(store, recurring(store, key="runtime"))
    c = claim_one(store)
    assert c.task.id == running.id
    replanned(store, c)
    removals: list[Removal] = []

    def plan(view: SyncView) -> SyncWrites:
        removals.extend(Removal(task, NOTE, view.seen) for task in view.code.values() if not task.status.is_terminal)
        return SyncWrites(remove=removals)

    planner = Planner(plan)
    writes = store.sync_schedules(digest(), [], [NAME], planner)
    assert writes.remove == removals
    read = {r.task.id: r.task for r in removals}
    assert sorted(read) == sorted([pending.id, paused.id, running.id])
    for task_id, task in read.items():
        after = get(store, task_id)
        is_running = task_id == running.id
        assert after.status is (Status.RUNNING if is_running else Status.CANCELLED)
        assert (after.cancel_requested, after.cancel_run_only) == (is_running, False)
        assert (after.declared_at, after.last_decision) == (planner.seen, NOTE)
        assert (after.replan_at, after.replan_run_at) == (None, None)
        assert (after.version, after.revision) == (task.version + (0 if is_running else 1), task.revision + 1)
        [note] = [e for e in executions_of(store, task_id) if e.note == NOTE]
        assert (note.status, note.attempt, note.scheduled_for) == (ExecutionStatus.CANCELLED, 0, task.scheduled_at)
        assert note.started_at is not None and note.started_at == note.finished_at
        assert (note.node, note.fence) == (None, None)
    assert get(store, kept.id).status is Status.PENDING
    assert get(store, runtime.id).status is Status.PENDING

    [renewal] = store.renew(NODE, [(running.id, c.fence)], LEASE)
    assert renewal.cancel_requested and not renewal.run_only
    finish(store, c)  # the run's own outcome, decided before the removal: cancel wins
    assert get(store, running.id).status is Status.CANCELLED
    again = Planner(plan)
    removals.clear()
    assert store.sync_schedules(digest(), [], [NAME], again).remove == []


def test_a_removal_read_before_a_claim_asks_the_run_to_stop(store: Store) -> None:
    task = insert_one(store, code_task(store, "gone.claimed", offset=-10.0))
    read = get(store, task.id)
    c = claim_one(store)
    store.sync_schedules(digest(), [], [NAME], lambda view: SyncWrites(remove=[Removal(read, NOTE, view.seen)]))
    after = get(store, task.id)
    assert (after.status, after.cancel_requested, after.version) == (Status.RUNNING, True, c.fence)
    finish(store, c)
    assert get(store, task.id).status is Status.CANCELLED


def test_a_dry_run_plans_and_writes_nothing(store: Store) -> None:
    changing = insert_one(store, code_task(store, "dry.edit"))
    going = insert_one(store, code_task(store, "dry.gone"))
    untouched = (all_tasks(store), store.list_executions(limit=1000))
    d = digest()
    news = [code_task(store, "dry.new")]

    def plan(view: SyncView) -> SyncWrites:
        writes = creating(*news)(view)
        return dataclasses.replace(
            writes,
            edit=[edit(view.code["dry.edit"], args=["dry"], declared_at=view.seen)],
            remove=[Removal(view.code["dry.gone"], NOTE, view.seen)],
        )

    dry = Planner(plan)
    writes = store.sync_schedules(d, ["dry.new", "dry.edit"], [NAME], dry, dry_run=True)
    assert (len(writes.create), len(writes.edit), len(writes.remove)) == (1, 1, 1)
    assert (all_tasks(store), store.list_executions(limit=1000)) == untouched
    mark = store.now()

    real = Planner(plan)
    store.sync_schedules(d, ["dry.new", "dry.edit"], [NAME], real)
    assert real.seen >= mark  # the dry run did not remember the set
    assert get(store, changing.id).args == ["dry"]
    assert get(store, going.id).status is Status.CANCELLED
    assert "dry.new" in {t.key for t in all_tasks(store)}


def test_first_seen_times_are_kept_and_a_forced_sync_restamps(store: Store) -> None:
    d = digest()
    first = Planner()
    store.sync_schedules(d, [], [NAME], first)
    seen = first.seen
    wait_for(lambda: store.now() > seen)
    again = Planner()
    store.sync_schedules(d, [], [NAME], again)
    assert again.seen == seen

    other = Planner()
    store.sync_schedules(digest(), [], [NAME], other)
    assert other.seen > seen

    dry = Planner()
    store.sync_schedules(d, [], [NAME], dry, dry_run=True, force=True)  # a dry run restamps nothing
    after_dry = Planner()
    store.sync_schedules(d, [], [NAME], after_dry)
    assert after_dry.seen == seen

    mark = store.now()
    forced = Planner()
    store.sync_schedules(d, [], [NAME], forced, force=True)
    assert forced.seen >= mark
    later = Planner()
    store.sync_schedules(d, [], [NAME], later)
    assert later.seen >= mark  # restamped: first seen at the forced sync now


def test_a_forced_dry_run_plans_as_the_forced_sync_would(store: Store) -> None:
    d = digest()
    first = Planner()
    store.sync_schedules(d, [], [NAME], first)
    wait_for(lambda: store.now() > first.seen + timedelta(seconds=0.05))
    dry = Planner()
    store.sync_schedules(d, [], [NAME], dry, dry_run=True, force=True)
    assert dry.seen > first.seen  # seen now, as the forced sync would be


def test_a_forced_sync_s_set_is_seen_as_it_was_stamped(store: Store) -> None:
    key, d = "forced.own", digest()
    declared = [(key, code_task(store, key))]
    actions: list[list[str]] = []

    def plan(view: SyncView) -> SyncWrites:
        changes, writes = declarations.plan(declared, [NAME], view)
        actions.append([c.action for c in changes])
        return writes

    forced = Planner(plan)
    store.sync_schedules(d, [key], [NAME], forced, force=True)
    later = Planner(plan)
    store.sync_schedules(d, [key], [NAME], later)
    assert actions == [["create"], ["unchanged"]]
    assert later.seen == forced.seen == get_key(store, key).declared_at


# -- races ----------------------------------------------------------------------------------------


def test_two_syncs_of_one_create_at_once_make_one_task_per_key(store: Store, twin: Store) -> None:
    for round_ in range(ROUNDS):
        keys = [f"race.{round_}.{i}" for i in range(3)]
        news = [code_task(store, key) for key in keys]
        # Two nodes of one release sync one set; of two releases, two sets (then only the
        # sync lock serialises them: the same set's row would also make one wait).
        d = digest()
        digests = [d, d] if round_ % 2 == 0 else [d, digest()]
        plans = [creating(*news), creating(*news)]
        results = run_together(
            [
                functools.partial(s.sync_schedules, set_digest, keys, [NAME], plan)
                for s, set_digest, plan in zip((store, twin), digests, plans, strict=True)
            ]
        )
        assert sorted(len(r.create) for r in results) == [0, 3]  # the later one found the first's work
        assert Counter(t.key for t in all_tasks(store) if t.key in keys) == dict.fromkeys(keys, 1)


def test_an_edit_racing_a_claim_is_never_lost_and_never_breaks_the_fence(
    store: Store, twin: Store, store_kind: str, request: pytest.FixtureRequest
) -> None:
    claimers, opened = [store], []
    if store_kind == "postgres":  # both claim strategies
        opened.append(open_store(request.getfixturevalue("store_url"), claim="optimistic"))
        claimers += opened
    orders: Counter[str] = Counter()
    try:
        for round_ in range(ROUNDS * 2):
            name = f"race.edit.{round_}"
            task = insert_one(store, one_time(store, name=name, args=[0]))
            read = get(store, task.id)
            claimer = claimers[round_ % len(claimers)]

            def edit_until_written(read: Task = read, task_id: int = task.id) -> tuple[Task, Task]:
                before = read
                for _ in range(3):  # as App._edit: read again and recompute when it changed
                    written = twin.edit_task(edit(before, args=[1]))
                    if written is not None:
                        return before, written
                    before = get(twin, task_id)
                raise AssertionError("the edit was lost")

            claims, (before, written) = run_together(
                [functools.partial(claimer.claim, NODE, [name], 1, LEASE), edit_until_written]
            )
            if before.status is Status.RUNNING:  # the claim won: the edit waited for nothing, the fence held
                orders["claim first"] += 1
                [c] = claims
                assert c.task.args == [0]
                assert (written.version, written.status) == (c.fence, Status.RUNNING)
            else:
                assert before.status is Status.PENDING
                orders["edit first"] += 1
                if not claims:  # the claim lost its compare-and-set to the edit
                    claims = [claim_one(store, names=[name])]
                [c] = claims
                assert c.task.args == [1] and c.fence == written.version + 1
            finish(store, c)
            after = get(store, task.id)
            assert (after.status, after.args) == (Status.COMPLETED, [1])
            [run] = executions_of(store, task.id)
            assert (run.id, run.fence, run.status) == (c.execution_id, c.fence, ExecutionStatus.COMPLETED)
    finally:
        for s in opened:
            s.close()
    assert sum(orders.values()) == ROUNDS * 2, orders


def test_two_edits_of_one_read_at_once_apply_once(store: Store, twin: Store) -> None:
    for round_ in range(ROUNDS):
        name = f"race.twice.{round_}"
        task = insert_one(store, recurring(store, name=name))
        running = round_ % 2 == 1
        before = claim_one(store, names=[name]).task if running else get(store, task.id)
        results = run_together(
            [functools.partial(s.edit_task, edit(before, args=[i])) for i, s in ((1, store), (2, twin))]
        )
        applied = [r for r in results if r is not None]
        assert len(applied) == 1, results
        after = get(store, task.id)
        assert after == applied[0]
        assert after.revision == before.revision + 1
        assert after.version == before.version + (0 if running else 1)


# -- until and max_runs in the policy --------------------------------------------------------------


def run_like_a_node(store: Store, task_id: int, name: str = NAME, limit: int = 20) -> Task:
    """Claim, decide, run or skip, write the outcome: until the task ends."""
    for _ in range(limit):
        task = get(store, task_id)
        if task.status.is_terminal:
            return task
        c = claim_one(store, names=[name])
        now = store.now()
        decision = decide(c.task, now)
        outcome = outcome_of(c, ExecutionStatus.COMPLETED, now) if decision.run else skipped_outcome(c, decision, now)
        assert store.finish(NODE, [outcome]) == [True]
    raise AssertionError(f"task {task_id} still live after {limit} claims")


def ran(store: Store, task_id: int) -> list[datetime]:
    return sorted(e.scheduled_for for e in executions_of(store, task_id) if e.status is ExecutionStatus.COMPLETED)


@pytest.mark.parametrize(("slack", "status"), [(59.0, Status.COMPLETED), (60.0, Status.PENDING)])
def test_a_run_completes_its_task_when_the_next_slot_is_after_until(store: Store, slack: float, status: Status) -> None:
    slot = at(store, -10)
    task = insert_one(store, recurring(store, scheduled_at=slot, next_run_at=slot, interval=60.0,
                                       until=slot + timedelta(seconds=slack)))  # fmt: skip
    c = claim_one(store)
    settled = settle(c.task, ExecutionStatus.COMPLETED, store.now())
    assert settled.status is status
    finish(store, c)
    after = get(store, task.id)
    assert after.status is status
    if status is Status.PENDING:
        assert after.scheduled_at == slot + timedelta(seconds=60)  # until itself is a slot it keeps


def test_max_runs_runs_then_completes(store: Store) -> None:
    slot = at(store, -600)
    task = insert_one(store, recurring(store, scheduled_at=slot, next_run_at=slot, interval=60.0, max_runs=2,
                                       misfire_grace=3600.0))  # fmt: skip
    after = run_like_a_node(store, task.id)
    assert (after.status, after.run_count) == (Status.COMPLETED, 2)
    assert ran(store, task.id) == [slot, slot + timedelta(seconds=60)]


def test_the_last_run_max_runs_allows_completes_even_with_retries_left(store: Store) -> None:
    insert_one(store, recurring(store, max_runs=1, max_retries=3))
    c = claim_one(store)
    assert settle(c.task, ExecutionStatus.FAILED, store.now()).status is Status.COMPLETED


def test_a_slot_after_until_is_not_run(store: Store) -> None:
    slot = at(store, -10)
    task = insert_one(store, recurring(store, scheduled_at=slot, next_run_at=slot, until=slot - timedelta(seconds=1)))
    c = claim_one(store)
    decision = decide(c.task, store.now())
    assert not decision.run and decision.skipped == 0 and decision.text is not None and "ended" in decision.text
    assert store.finish(NODE, [skipped_outcome(c, decision, store.now())]) == [True]
    after = get(store, task.id)
    assert (after.status, after.run_count, after.attempt) == (Status.COMPLETED, 0, 0)
    [run] = executions_of(store, task.id)
    assert (run.status, run.note) == (ExecutionStatus.SKIPPED, decision.text)


def test_max_runs_edited_down_while_running_ends_the_task_at_its_next_claim(store: Store) -> None:
    slot = at(store, -600)
    task = insert_one(store, recurring(store, scheduled_at=slot, next_run_at=slot, misfire_grace=3600.0))
    c = claim_one(store)
    apply(store, c.task, max_runs=1)
    finish(store, c)  # decided from the snapshot, which had no max_runs
    assert get(store, task.id).status is Status.PENDING
    after = run_like_a_node(store, task.id)
    assert (after.status, after.run_count) == (Status.COMPLETED, 1)
    assert [e.status for e in executions_of(store, task.id)] == [ExecutionStatus.SKIPPED, ExecutionStatus.COMPLETED]


@pytest.mark.parametrize(
    ("misfire", "runs"),
    [
        (Misfire.SINGLE_CATCHUP, [240]),  # the latest missed slot before until, never one after it
        (Misfire.CATCHUP, [0, 60, 120, 180, 240]),  # every missed slot up to until, then no more
        (Misfire.SKIP, []),
    ],
)
def test_missed_slots_are_run_by_the_misfire_policy_up_to_until(
    store: Store, misfire: Misfire, runs: list[int]
) -> None:
    slot = at(store, -600)  # ten missed slots, until after the fifth
    until = slot + timedelta(seconds=250)
    task = insert_one(store, recurring(store, scheduled_at=slot, next_run_at=slot, interval=60.0, until=until,
                                       misfire=misfire, misfire_grace=1.0))  # fmt: skip
    after = run_like_a_node(store, task.id)
    assert after.status is Status.COMPLETED
    assert ran(store, task.id) == [slot + timedelta(seconds=s) for s in runs]
    assert all(run <= until for run in ran(store, task.id))


# -- ends edited while a run goes on ------------------------------------------------------------


@pytest.mark.parametrize("edited", ["max_runs", "until"])
def test_ends_moved_while_the_last_run_goes_on_let_the_task_go_on(store: Store, edited: str) -> None:
    first = at(store, -10)
    ends: dict[str, Any] = {"max_runs": 1} if edited == "max_runs" else {"until": first}
    task = insert_one(store, recurring(store, **ends))
    c = claim_one(store)
    moved = {"max_runs": 5} if edited == "max_runs" else {"until": at(store, 86400)}
    written = replanned(store, c, **moved)
    finish(store, c)  # decided from the claim: the old ends complete the task
    after = get(store, task.id)
    assert after.status is Status.PENDING and after.run_count == 1
    assert (after.scheduled_at, after.next_run_at, after.replan_at) == (written.replan_at, written.replan_run_at, None)


def test_a_replan_past_the_current_ends_completes_the_task(store: Store) -> None:
    task = insert_one(store, recurring(store, max_runs=1))
    c = claim_one(store)
    replanned(store, c, until=at(store, 60))  # the edited slot (in 600 s) is past the new until
    finish(store, c)
    after = get(store, task.id)
    assert after.status is Status.COMPLETED and after.replan_at is None


def test_a_cancel_of_a_waiting_task_spends_its_replan(store: Store) -> None:
    insert_one(store, recurring(store, max_retries=1, retry_backoff=600))
    c = claim_one(store)
    replanned(store, c)
    finish(store, c, ExecutionStatus.FAILED)  # a retry is pending: the replan waits for it
    waiting = get(store, c.task.id)
    assert waiting.status is Status.PENDING and waiting.replan_at is not None
    cancelled = store.cancel(c.task.id)
    assert cancelled is not None and cancelled.status is Status.CANCELLED
    assert (cancelled.replan_at, cancelled.replan_run_at) == (None, None)


def test_a_run_interrupted_by_shutdown_does_not_count_toward_max_runs(store: Store) -> None:
    task = insert_one(store, recurring(store, max_runs=1))
    c = claim_one(store)
    interrupted = outcome_of(c, ExecutionStatus.FAILED, store.now(), interrupted=True)
    assert store.finish(NODE, [interrupted]) == [True]
    after = get(store, task.id)
    assert (after.status, after.run_count) == (Status.PENDING, 0)
    again = claim_one(store)
    assert again.scheduled_for == c.scheduled_for  # the slot runs again, and is not refused
    finish(store, again)
    assert get(store, task.id).status is Status.COMPLETED
