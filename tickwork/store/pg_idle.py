"""Whether a pooled connection the server has closed can be told without a round trip.

A pool hands out an idle connection without knowing whether the server has since ended
it (a restart, ``pg_terminate_backend``, an idle timeout): the statement sent on it fails,
and its caller pauses before trying again (a claim: up to a second). After an outage
that killed every connection, each dead one left in the pool cost a claim and a pause
in turn, and nodes resumed seconds after the database answered again. A server that
ends a session says so (an error message, then end of file), so the socket of an idle
connection it has closed is readable, where a live idle one has nothing to read.
(The pool's own ``check`` hook would serve, but the pool waits about a second after a
connection fails it before handing out the next: the pause this avoids.)
"""

from __future__ import annotations

import select
from typing import Any

import psycopg


def closed_by_server(conn: psycopg.Connection[Any]) -> bool:
    """True when the idle ``conn`` has input waiting (the server's goodbye, or end of
    file) or is closed already; a zero-timeout poll of its socket, no round trip."""
    if conn.closed:
        return True
    try:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    except (OSError, ValueError, psycopg.OperationalError):
        return True
    return bool(readable)
