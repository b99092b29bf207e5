"""Who may read and who may write: the bearer token, dashboard sessions and CSRF tokens.

One secret, ``TICKWORK_API_TOKEN``, guards everything. API clients send it as a bearer
token; the dashboard trades it once, at sign-in, for a session cookie. The cookie never
holds the token itself: it holds its issue time and a random session id, signed with a
key derived from the token, so a leaked cookie expires (after ``session_ttl``, 8 hours
unless ``tickwork serve --session-ttl`` says otherwise), and changing the token signs
every session out. Any replica sharing the token accepts a session; signing out puts
its id on the database's list of revoked sessions (``Store.revoke_session``), which
every replica reads. Each session carries its own CSRF token, derived from its id, for
the dashboard's forms.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

from tickwork.errors import TickworkError

MIN_TOKEN_LENGTH = 16
"""Shorter secrets are refused: a token that guards code execution must not be guessable."""
SESSION_COOKIE = "tickwork_session"
LOGIN_COOKIE = "tickwork_login"
"""Double-submit CSRF token of the sign-in form (there is no session yet to derive it from)."""
SESSION_TTL = 8 * 3600.0
"""How long a dashboard sign-in lasts unless configured (a working day)."""
MIN_SESSION_TTL = 60.0
MAX_SESSION_TTL = 30 * 86400.0
CLOCK_SLACK = 60.0
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(text: str) -> float:
    """``30s``, ``15m``, ``12h``, ``7d`` or combinations (``1h30m``) as seconds; raise
    ``ValueError`` saying what is expected otherwise."""
    spec = text.strip().lower()
    parts = _DURATION.findall(spec)
    if not spec or "".join(number + unit for number, unit in parts) != spec:
        raise ValueError(f"{text!r}: expected a duration such as 30s, 15m, 12h or 7d")
    return sum(float(number) * _UNITS[unit] for number, unit in parts)


def check_session_ttl(seconds: float) -> float:
    if not MIN_SESSION_TTL <= seconds <= MAX_SESSION_TTL:
        raise ValueError(f"{seconds:g} s: a session lasts from 1 minute to 30 days")
    return seconds


class TokenConfigError(TickworkError, ValueError):
    """The configured token cannot be used: the server must not start with it."""


def check_token(token: str | None) -> str | None:
    """Refuse an empty or short token, rather than silently running without auth.

    ``None`` (``TICKWORK_API_TOKEN`` unset) is allowed: the caller then decides whether a
    server without a token may run at all (only on loopback, read-only)."""
    if token is None:
        return None
    if not token.strip():
        raise TokenConfigError(
            "TICKWORK_API_TOKEN is set but empty: an empty token would mean no authentication. "
            "Set a secret (e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`), "
            "or unset the variable for a read-only server on loopback."
        )
    if token != token.strip():
        raise TokenConfigError("TICKWORK_API_TOKEN has leading or trailing white space: remove it")
    if len(token) < MIN_TOKEN_LENGTH:
        raise TokenConfigError(f"TICKWORK_API_TOKEN is too short: use at least {MIN_TOKEN_LENGTH} characters")
    return token


@dataclass(frozen=True)
class Session:
    """A signed-in dashboard session."""

    id: str
    csrf: str
    issued: int
    """When it was signed in (Unix time)."""


class Auth:
    """The access rules of one server.

    Without a token no request can ever be authorised: every write is refused and reads
    are open only with ``public_read``.
    """

    def __init__(self, token: str | None, *, public_read: bool = False, session_ttl: float = SESSION_TTL) -> None:
        token = check_token(token)
        self.public_read = public_read
        self.session_ttl = check_session_ttl(session_ttl)
        self._digest = None if token is None else _sha256(token.encode())
        self._key = None if token is None else hmac.new(token.encode(), b"tickwork-session-v1", "sha256").digest()

    @property
    def has_token(self) -> bool:
        return self._digest is not None

    def token_ok(self, given: str | None) -> bool:
        """Constant-time comparison (of digests, so the token's length does not leak either)."""
        if self._digest is None or not given:
            return False
        return hmac.compare_digest(_sha256(given.encode("utf-8", "surrogatepass")), self._digest)

    def bearer_ok(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header carries the token."""
        if not authorization:
            return False
        scheme, _, credential = authorization.strip().partition(" ")
        return scheme.lower() == "bearer" and self.token_ok(credential.strip())

    # -- dashboard sessions -------------------------------------------------------------

    def new_session(self, now: float | None = None) -> str:
        """A cookie value: issue time and a random id, signed."""
        body = f"{int(now if now is not None else time.time())}.{secrets.token_urlsafe(18)}"
        return f"{body}.{self._sign('session', body)}"

    def session(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session a cookie proves, or None (absent, forged, expired, or signed with
        an earlier token)."""
        if self._key is None or not cookie or len(cookie) > 200:
            return None
        body, _, signature = cookie.rpartition(".")
        issued_text, _, session_id = body.partition(".")
        if not session_id or not (issued_text.isascii() and issued_text.isdigit()):
            return None
        if not hmac.compare_digest(signature.encode(), self._sign("session", body).encode()):
            return None
        issued = int(issued_text)
        age = (now if now is not None else time.time()) - issued
        if not -CLOCK_SLACK <= age <= self.session_ttl:
            return None
        return Session(id=session_id, csrf=self._sign("csrf", session_id), issued=issued)

    @staticmethod
    def expires_at(session: Session) -> float:
        """A time after which no server accepts the session, whatever its ``session_ttl``
        (Unix time): how long a signed-out session must stay revoked."""
        return session.issued + MAX_SESSION_TTL + CLOCK_SLACK

    def _sign(self, purpose: str, value: str) -> str:
        assert self._key is not None
        return hmac.new(self._key, f"{purpose}:{value}".encode(), "sha256").hexdigest()


def csrf_ok(expected: str | None, given: str | None) -> bool:
    """Constant-time check of a form's CSRF field against the expected value."""
    if not expected or not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogatepass"))


def new_login_nonce() -> str:
    return secrets.token_urlsafe(18)


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()
