"""Database and Redis URLs as they may be shown: with their secrets masked.

Every message, log line and page that names a URL goes through ``masked`` (a password
in the authority part or in a ``password=`` query parameter), and text that came from a
driver and may quote the URL goes through ``scrubbed``.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

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
