"""Database and Redis URLs read and shown without depending on a store.

Every message, log line and page that names a URL goes through ``masked`` (a password
in the authority part or in a ``password=`` query parameter), and text that came from a
driver and may quote the URL goes through ``scrubbed``. ``path_from_url`` lives here,
not in the SQLite dialect, because callers outside the store (the command line checks
that a database file exists before it opens one) need the same reading of the URL.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

from tickwork.errors import StoreError

MASK = "***"

_AUTHORITY_PASSWORD = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^/?#@]*?:)(?P<secret>[^/?#@]*)(?P<tail>@)")
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&;](?:password|passwd|pass|pwd)=)(?P<secret>[^&#;]*)", re.IGNORECASE)


def masked(url: str) -> str:
    """``postgresql://u:***@host/db``: the URL with every password replaced by ``***``."""
    text = _AUTHORITY_PASSWORD.sub(lambda m: m["head"] + MASK + m["tail"], url, count=1)
    return _QUERY_PASSWORD.sub(lambda m: m["head"] + MASK, text)


def secrets_of(url: str) -> list[str]:
    """The password strings of ``url`` (raw and percent-decoded), longest first."""
    found: list[str] = []
    if (match := _AUTHORITY_PASSWORD.match(url)) and match["secret"]:
        found.append(match["secret"])
    found += [m["secret"] for m in _QUERY_PASSWORD.finditer(url) if m["secret"]]
    found += [unquote(secret) for secret in found]
    return sorted({s for s in found if s}, key=len, reverse=True)


def scrubbed(text: str, url: str) -> str:
    """``text`` (a driver's error, say) with ``url`` masked and its passwords removed."""
    text = text.replace(url, masked(url))
    for secret in secrets_of(url):
        text = text.replace(secret, MASK)
    return text


def path_from_url(url: str) -> str:
    """``sqlite:///relative.db``, ``sqlite:////abs/path.db`` or ``sqlite:///:memory:``."""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        raise StoreError(f"url={masked(url)!r}: expected sqlite:///PATH")
    path = url[len(prefix) :]
    if not path:
        raise StoreError(f"url={masked(url)!r}: missing database path")
    return path


def new_sqlite_file(url: str) -> Path | None:
    """The absolute path of the SQLite file ``url`` names when it does not exist yet
    (opening it would create an empty database), else None (or not SQLite)."""
    if not url.startswith("sqlite:"):
        return None
    path = Path(path_from_url(url)).resolve()
    return None if path.exists() else path
