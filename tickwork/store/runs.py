"""The life of a claimed run in the store: claim, renew, write its outcome (finish or
reap), give back, and the reads that find runs to recover. A node calls these thousands
of times a second; the dialect's ``HotPath`` decides how each write reaches the database.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from tickwork.limits import Candidate
from tickwork.model import Claim, Outcome, Renewal
from tickwork.store import limits
from tickwork.store.claim_rows import decode_claim
from tickwork.store.dialect import Dialect, Row, Session, notify
from tickwork.store.rows import Decoder

log = logging.getLogger("tickwork.store")

Claimed = tuple[Row, datetime | None]
"""A claimed row, and when a limit's wait makes its misfire judged (None: now)."""


class Runs:
    """Claims and leases on one dialect, with one claim strategy."""

    def __init__(self, dialect: Dialect, rows: Decoder, strategy: str) -> None:
        self.dialect = dialect
        self.rows = rows
        self.strategy = strategy
        self.hot = dialect.hot_path
        self.lane_seen = False
        """skip_locked: the last claim found the lane with work due. Then the next reads
        the lane first, as before the probe: a lane held by a full limit would otherwise
        cost every claim a probe that claims nothing. A hint only (both ways are correct);
        it is cleared by a claim that finds the lane empty."""

    # -- claims -----------------------------------------------------------------------

    def claim(
        self,
        node: str,
        names: Sequence[str],
        limit: int,
        lease: float,
        exclude: Sequence[int] = (),
        queues: Sequence[str] | None = None,
        ahead: float = 0.0,
    ) -> list[Claim]:
        if limit <= 0 or not names or (queues is not None and not queues):
            return []
        d = self.dialect
        with self.hot.session() as s:
            now = d.approximate_now()
            params = {
                "now": d.encode_time(now),
                "due_by": d.encode_time(now + timedelta(seconds=ahead)),  # SQLite's (PostgreSQL: now() + ahead_s)
                "ahead_s": float(ahead),
                "node": node,
                "lease": lease,
                "lease_until": d.encode_time(now + timedelta(seconds=lease)),
                "names": d.encode_names(names),
                "exclude": d.encode_ids(exclude),
                "limit": limit,
                "lane": False,
                **queue_params(d, queues),
            }
            claimed = self._claim_rows(s, params, list(exclude))
        # Decoded once the claim's transaction is over: on SQLite it holds the file's
        # write lock, which the other processes wait for.
        return in_claim_order(self._decoded(node, claimed))

    def _claim_rows(self, s: Session, params: dict[str, Any], exclude: list[int]) -> list[Claimed]:
        """The rows of one claim, each with when a limit's wait makes its misfire judged."""
        d, limit = self.dialect, params["limit"]
        if self.strategy == "skip_locked":
            if not self.lane_seen:
                gated = s.fetch_all("claim_skip_locked", {**params, "unless_lane": True})
                if not (gated and gated[0]["lane_due"]):  # the lane is empty: this was the whole claim
                    return [(r, None) for r in gated if r["id"] is not None]
            lane, plain = limits.candidates(d, s, params), []
            self.lane_seen = bool(lane)
        else:  # both kinds of candidate in one round trip
            both = s.fetch_all("claim_candidates_and_lane", {**params, "scan": limits.SCAN})
            lane = limits.decode(d, [r for r in both if r["lane"]])
            plain = [r for r in both if not r["lane"]]
        claimed = self._claim_lane(s, params, [c for c in lane if c.priority >= 0], limit)
        params["limit"] = limit - len(claimed)
        if params["limit"] > 0:
            if self.strategy == "skip_locked":
                rows = s.fetch_all("claim_skip_locked", {**params, "unless_lane": False})
            else:
                rows = self._claim_optimistic(s, params, exclude, plain[: params["limit"]])
            claimed += [(r, None) for r in rows if r["id"] is not None]
        if len(claimed) < limit and (low := [c for c in lane if c.priority < 0]):
            claimed += self._claim_lane(s, params, low, limit - len(claimed))
        return claimed

    def _claim_lane(self, s: Session, params: dict[str, Any], found: list[Candidate], limit: int) -> list[Claimed]:
        """Part of the lane (store/limits.py): due tasks with a limit or a priority other
        than 0, highest priority first. With a limit among them: on SQLite within the
        claim's own transaction, on PostgreSQL in a transaction of their own, opened
        only then."""
        if not found:
            return []
        if self.dialect.notifies and any(c.limit_keys() for c in found):
            with self.dialect.transaction() as t:
                rows, judged_at = limits.claim(self.dialect, t, found, params, limit)
        else:
            rows, judged_at = limits.claim(self.dialect, s, found, params, limit)
        return [(row, judged_at.get(int(row["id"]))) for row in rows]

    def _decoded(self, node: str, claimed: list[Claimed]) -> list[Claim]:
        """The claims of claimed rows. A row this code cannot read (written by hand, or by
        another version) is set FAILED: otherwise it would stay first in line and fail
        every claim after it. (It is this node's, under its lease, until then.)"""
        claims, undecodable = [], []
        for row, judged_at in claimed:
            try:
                claim = decode_claim(self.rows, row)
            except Exception:
                log.exception("task %s cannot be decoded; setting it FAILED", row["id"])
                undecodable.append(row)
                continue
            claims.append(claim if judged_at is None else dataclasses.replace(claim, judged_at=judged_at))
        if undecodable:
            try:
                self._fail_undecodable(node, undecodable)
            except Exception:  # the claims read well are still this node's to run
                log.exception("could not set %d undecodable tasks FAILED; their leases will expire", len(undecodable))
        return claims

    def _fail_undecodable(self, node: str, rows: list[Row]) -> None:
        with self.dialect.transaction() as s:
            now = self.dialect.encode_time(self.dialect.approximate_now())
            for row in rows:
                fenced = {"id": row["id"], "fence": row["version"], "node": node, "now": now}
                if s.execute("fail_undecodable", fenced):
                    run = {"execution_id": row["execution_id"], "id": row["id"], "node": node, "now": now}
                    s.execute("fail_undecodable_run", run)

    def _claim_optimistic(
        self, s: Session, params: dict[str, Any], exclude: list[int], candidates: list[Row]
    ) -> list[Row]:
        """Compare-and-set the due candidates read. When some were lost (to another node,
        or skipped as locked by someone) and more may be due, read once more without
        them: a row held elsewhere must not starve the rest of the queue."""
        if not candidates:
            return []
        rows = self.hot.compare_and_set(s, candidates, params)
        if len(rows) < len(candidates) == params["limit"]:
            won = {int(r["id"]) for r in rows}
            lost = [int(c["id"]) for c in candidates if int(c["id"]) not in won]
            again = {**params, "limit": params["limit"] - len(rows), "exclude": self.dialect.encode_ids(exclude + lost)}
            if candidates := s.fetch_all("claim_candidates", again):
                rows += self.hot.compare_and_set(s, candidates, again)
        return rows

    # -- leases -----------------------------------------------------------------------

    def renew(self, node: str, runs: Sequence[tuple[int, int]], lease: float) -> list[Renewal]:
        if not runs:
            return []
        runs = sorted(runs)  # every transaction locks task rows in id order: no deadlocks
        with self.hot.session() as s:
            return self.hot.renew(s, node, runs, lease)

    # -- outcomes ---------------------------------------------------------------------

    def write_outcomes(
        self, node: str, outcomes: Sequence[Outcome], *, reaping: bool, expired_only: bool
    ) -> list[bool]:
        """``finish`` (not ``reaping``) or ``reap``: write in task id order (every
        transaction locks task rows in id order, so two nodes never wait on each other
        in a cycle); answer in the caller's order."""
        if not outcomes:
            return []
        order = sorted(range(len(outcomes)), key=lambda i: outcomes[i].task_id)
        # Staged before the session: on SQLite that holds the file's write lock.
        staged = self.hot.stage_outcomes([outcomes[i] for i in order])
        with self.hot.session() as s:
            applied_sorted = self.hot.write_outcomes(s, node, staged, expired_only=expired_only, fresh=not reaping)
            if reaping and any(applied_sorted):
                notify(self.dialect, s, "due")  # recovered runs are due again
        applied = [False] * len(outcomes)
        for position, ok in zip(order, applied_sorted, strict=True):
            applied[position] = ok
        return applied

    def release(self, node: str, claims: Sequence[Claim], *, notify_nodes: bool = True) -> int:
        if not claims:
            return 0
        claims = sorted(claims, key=lambda c: c.task.id)
        d = self.dialect
        released = 0
        with d.transaction() as s:
            now = d.encode_time(d.approximate_now())
            for c in claims:
                params = {"now": now, "node": node, "task_id": c.task.id, "fence": c.fence}
                if s.fetch_one("release_task", params) is not None:
                    s.execute("delete_execution", {"execution_id": c.execution_id})
                    released += 1
            if released and notify_nodes:
                notify(d, s, "due")
        return released

    # -- runs to recover ----------------------------------------------------------------

    def claimed_since(self, node: str, since: datetime) -> list[Claim]:
        d = self.dialect
        with d.reader() as s:
            rows = s.fetch_all("claimed_since", {"node": node, "since": d.encode_time(since)})
        return [self.rows.claim(r) for r in rows]

    def running(self, query: str, limit: int, **extra: Any) -> list[Claim]:
        """Running claims by ``expired_runs`` or ``overrun_runs``."""
        d = self.dialect
        with d.reader() as s:
            rows = s.fetch_all(query, {"now": d.encode_time(d.approximate_now()), "limit": limit, **extra})
        return [self.rows.claim(r) for r in rows]


def in_claim_order(claims: list[Claim]) -> list[Claim]:
    """Highest priority first, then the oldest due: the order slots take them in."""
    return sorted(claims, key=lambda c: (-c.task.priority, c.task.next_run_at, c.task.id))


def queue_params(d: Dialect, queues: Sequence[str] | None) -> dict[str, Any]:
    """The queue filter of a claim (None: every queue)."""
    return {"all_queues": queues is None, "queues": d.encode_names(queues or [])}
