"""Who is looking at a dashboard page: their session, if it has not signed out, and what
the page may therefore offer them."""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime

from tickwork.app import App
from tickwork.web.auth import Session

REVOKED_CACHE = 10_000
"""Signed-out session ids remembered by this process (a signed-out session never comes back)."""


@dataclasses.dataclass(frozen=True)
class Viewer:
    """Who is looking, and what the page may offer them."""

    session: Session | None
    can_read: bool
    has_token: bool

    @property
    def can_write(self) -> bool:
        return self.session is not None

    @property
    def csrf(self) -> str:
        return self.session.csrf if self.session else ""


class SignedOut:
    """Which sessions signed out: the database's list, with the ids seen revoked
    remembered here (a revoked id stays revoked)."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def revoked(self, session: Session) -> bool:
        if session.id in self._known:
            return True
        if not self.app.store.session_revoked(session.id):
            return False
        self._remember(session.id)
        return True

    def revoke(self, session: Session, until: datetime) -> None:
        self.app.store.revoke_session(session.id, until)
        self._remember(session.id)

    def _remember(self, session_id: str) -> None:
        with self._lock:
            if len(self._known) >= REVOKED_CACHE:
                self._known.clear()
            self._known.add(session_id)
