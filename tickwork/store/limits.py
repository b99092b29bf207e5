"""The claim of tasks that have a limit (``lock``, ``max_running``, ``rate_limit``), in
one transaction of its own: hold the limit keys, count what runs under them, let
``tickwork.limits.choose`` decide, claim the chosen ones by compare-and-set, and write
the keys' new state — so that no interleaving of nodes can exceed a limit.

On PostgreSQL each key is held with a transaction-level advisory lock taken with a
*try* (a key another node is claiming for right now is left to it this round, never
waited for); the counts are read after the keys are held, so under READ COMMITTED they
see every claim the key's previous holder committed. A run that ends only lowers a
count, so the writes that end runs need no key. SQLite's claim transaction holds the
database's one write lock, which orders everything by itself. A unique index on the
lock of RUNNING tasks makes two holders of one lock impossible to write, whatever this
reasoning misses.

Tasks without a limit never reach this module: the other claim statements read an
index that holds no task with one (migration 0013), so a backlog held back by a limit
costs them nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tickwork import limits
from tickwork.limits import Candidate, KeyState
from tickwork.store.dialect import Dialect, Row, Session

log = logging.getLogger("tickwork.store")

SCAN = 500
"""Most due limited tasks one claim reads; those held back by a full limit are passed
over, so a claim looks this far behind them for others that may start."""


def candidates(d: Dialect, s: Session, params: dict[str, Any]) -> list[Candidate]:
    """The lane's due tasks this node could run (with a limit or a priority above 0),
    in claim order: highest priority first, then the oldest due."""
    return decode(d, s.fetch_all("lane_candidates", {**params, "scan": SCAN}))


def decode(d: Dialect, rows: Sequence[Row]) -> list[Candidate]:
    """Lane rows as candidates, in the lane's order (whatever order a union kept). A row
    whose limit this code cannot read (written by hand) is left out, said once a claim:
    it must not fail every claim of the node."""
    found = []
    for r in rows:
        try:
            if r["rate_limit"] is not None:
                limits.parse_rate(str(r["rate_limit"]))
            candidate = Candidate(
                id=int(r["id"]),
                version=int(r["version"]),
                name=str(r["name"]),
                next_run_at=_time(d, r["next_run_at"]),
                priority=int(r["priority"]),
                lock=None if r["lock"] is None else str(r["lock"]),
                max_running=None if r["max_running"] is None else int(r["max_running"]),
                rate_limit=r["rate_limit"],
            )
        except Exception as exc:
            log.warning("task %s: its limits cannot be read (%s); left unclaimed", r["id"], exc)
            continue
        found.append(candidate)
    return sorted(found, key=lambda c: (-c.priority, c.next_run_at, c.id))


def claim(
    d: Dialect, s: Session, found: Sequence[Candidate], params: dict[str, Any], free: int
) -> tuple[list[Row], dict[int, datetime]]:
    """Claim what ``found``'s limits let start, up to ``free``, in the session ``s`` (a
    transaction when any has a limit). Returns the claimed rows (as the other claims
    return them) and, per task id, the moment the misfire policy judges it at when a
    limit held it back."""
    keys = limits.all_keys(found)
    # Only priorities: nothing to count.
    choice = _choose(d, s, found, keys, params, free) if keys else limits.Choice(chosen=list(found[:free]))
    rows: list[Row] = []
    if choice.chosen:
        chosen = sorted(choice.chosen, key=lambda c: c.id)  # rows are locked in id order
        cas = [{"id": c.id, "version": c.version} for c in chosen]
        rows = d.hot_path.compare_and_set(s, cas, {**params, "lane": True})
    won = {int(r["id"]) for r in rows}
    for key, state in choice.states.items():
        # Written even when a chosen task's compare-and-set lost (edited or cancelled
        # meanwhile): the start it was given goes unused, which never exceeds a rate.
        s.execute(
            "set_limit_state",
            {
                "key": key,
                "tat": d.encode_time(state.tat),
                "full_since": d.encode_time(state.full_since),
                "held_until": d.encode_time(state.held_until),
            },
        )
    return rows, {i: t for i, t in choice.judged_at.items() if i in won}


def _choose(
    d: Dialect, s: Session, found: Sequence[Candidate], keys: list[str], params: dict[str, Any], free: int
) -> limits.Choice:
    """Hold the keys (PostgreSQL: those no other node holds now), then read what runs
    under them and decide."""
    now = _transaction_now(d, s, params)
    usable = set(keys) if not d.notifies else _try_keys(s, keys)
    held = [c for c in found if all(k in usable for k in c.limit_keys())]
    return limits.choose(held, free, running=_running(d, s, held), states=_states(d, s, keys), now=now)


def _transaction_now(d: Dialect, s: Session, params: dict[str, Any]) -> datetime:
    """The instant this transaction's ``:now`` reads: the grant time of its starts."""
    if d.notifies:
        row = s.fetch_one("transaction_now", {})
        assert row is not None
        return _time(d, row["now"])
    return _time(d, params["now"])


def _try_keys(s: Session, keys: list[str]) -> set[str]:
    return {str(r["key"]) for r in s.fetch_all("try_limit_keys", {"keys": keys})}


def _running(d: Dialect, s: Session, found: Sequence[Candidate]) -> dict[str, int]:
    names = sorted({c.name for c in found if c.max_running is not None})
    locks = sorted({c.lock for c in found if c.lock is not None})
    running: dict[str, int] = {}
    if names:
        for r in s.fetch_all("running_by_name", {"names": d.encode_names(names)}):
            running[limits.name_key(str(r["name"]))] = int(r["running"])
    if locks:
        for r in s.fetch_all("running_locks", {"locks": d.encode_names(locks)}):
            running[limits.lock_key(str(r["lock"]))] = int(r["running"])
    return running


def _states(d: Dialect, s: Session, keys: Sequence[str]) -> dict[str, KeyState]:
    rows = s.fetch_all("limit_states", {"keys": d.encode_names(list(keys))})
    return {
        str(r["key"]): KeyState(
            tat=d.decode_time(r["tat"]),
            full_since=d.decode_time(r["full_since"]),
            held_until=d.decode_time(r["held_until"]),
        )
        for r in rows
    }


def _time(d: Dialect, value: Any) -> datetime:
    decoded = d.decode_time(value)
    assert decoded is not None
    return decoded
