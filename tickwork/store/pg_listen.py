"""A node's listening connection to PostgreSQL: the NOTIFYs of other processes, and the
keeper role of its group of nodes (tickwork/node/pacing.py), which that connection holds
as a session advisory lock for as long as it lives."""

from __future__ import annotations

import logging
import selectors
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import psycopg

from tickwork.store.dialect import Election

log = logging.getLogger("tickwork.store.postgres")

CHANNEL = "tickwork"
LISTEN_TURN_S = 0.5
"""How long one wait for notifications lasts: a stop, or a keeper role to try for, is
looked at this often. The wait is on the connection's socket itself: psycopg's own
``notifies(timeout=...)`` wakes every 0.1 s to look for a KeyboardInterrupt, which made
the listening thread of an idle node wake ten times a second (~1 ms of CPU a second,
half of an idle node's: ``bench.idle``); on the socket, twice (a follower's keeper
retry once a second besides)."""
KEEPER_RETRY_S = 1.0
"""How often a node that is not its group's keeper tries for the role: how soon another
takes over from a keeper that stopped or lost its connection."""


class Listener:
    def __init__(self, url: str, connect_kwargs: Mapping[str, Any], take_keeper: str) -> None:
        self.url, self.connect_kwargs, self.take_keeper = url, connect_kwargs, take_keeper

    def run(self, on_notify: Callable[[str], None], stop: threading.Event, elect: Election | None) -> None:
        """Call ``on_notify(payload)`` for each notification until ``stop`` is set.

        A lost connection is re-established with backoff; ``on_notify("")`` is called
        whenever listening (re)starts, since notifications sent meanwhile are lost and
        the node must look for itself. ``elect``: this connection also stands for its
        group's keeper role (``take_keeper``), tried at once and every
        ``KEEPER_RETRY_S`` until held; the role ends with the connection.
        """
        backoff, failing_since = 0.1, None
        while not stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, **self.connect_kwargs) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    backoff = 0.1
                    if failing_since is not None:  # every logged failure has its end logged too
                        log.warning("listening for notifications again after %.1f s", time.monotonic() - failing_since)
                        failing_since = None
                    on_notify("")
                    self._listen_on(conn, on_notify, stop, elect)
            except Exception:
                log.warning("listening for notifications failed; polling until reconnected", exc_info=True)
                failing_since = time.monotonic() if failing_since is None else failing_since
                if elect is not None:
                    elect.on_role(None)
                on_notify("")
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        if elect is not None:
            elect.on_role(None)

    def _listen_on(
        self,
        conn: psycopg.Connection[Any],
        on_notify: Callable[[str], None],
        stop: threading.Event,
        elect: Election | None,
    ) -> None:
        keeper, next_try, arrived = False, 0.0, True
        with selectors.DefaultSelector() as readable:
            readable.register(conn.fileno(), selectors.EVENT_READ)
            while not stop.is_set():
                if elect is not None and not keeper and time.monotonic() >= next_try:
                    row = conn.execute(self.take_keeper, {"group": elect.group}).fetchone()
                    keeper = bool(row and row[0])
                    elect.on_role(keeper)
                    next_try = time.monotonic() + KEEPER_RETRY_S
                    arrived = True  # notifications may have come with its result (psycopg keeps them)
                if arrived:  # read what came, without waiting (a lost connection raises)
                    for notification in conn.notifies(timeout=0):
                        on_notify(notification.payload)
                arrived = bool(readable.select(LISTEN_TURN_S))
