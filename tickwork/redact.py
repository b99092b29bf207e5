"""Secrets kept out of every line a process writes: database and Redis passwords, the
API token, and credentials a client put in a URL's query string.

Code that shows a URL masks it (``tickwork.urls.masked``) and text from a driver is
scrubbed of it (``scrubbed``). This is the net under that rule: the command line puts
``REDACTOR`` on every log handler (its own and uvicorn's), so a driver's message, a
traceback or an access-log line that quotes a secret shows ``***`` instead.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable

from tickwork.urls import MASK, secrets_of

MIN_SECRET = 4
"""Shorter strings are not masked: they would mask ordinary words (a token is longer)."""

_SECRET_NAME = re.compile(r"token|key|pass|pwd|secret|auth|bearer|session|sig|credential|jwt|cookie", re.IGNORECASE)
# A query parameter whose name suggests a credential, and its value.
_SECRET_PARAM = re.compile(
    r"(?P<head>[?&;](?P<name>[^=&#;\s\"'<>]*)=)(?P<value>[^&#;\s\"'<>]*)",
)


def secret_name(name: str) -> bool:
    """Whether a parameter named ``name`` probably carries a credential (token,
    access_token, api_key, apikey, password, secret, auth, ...)."""
    return bool(_SECRET_NAME.search(name.replace("-", "").replace("_", "")))


def mask_query(text: str) -> str:
    """``text`` with the values of credential-like query parameters replaced by ``***``."""

    def one(match: re.Match[str]) -> str:
        if match["value"] and secret_name(match["name"]):
            return match["head"] + MASK
        return match[0]

    return _SECRET_PARAM.sub(one, text) if "=" in text else text


class Redactor(logging.Filter):
    """A log filter that masks the secrets it was told about, and credential-like query
    parameters, in each record's message, arguments and traceback."""

    def __init__(self) -> None:
        super().__init__()
        self._secrets: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def add_url(self, url: str | None) -> None:
        """Mask the passwords of ``url`` (a database or Redis URL)."""
        if url:
            self.add_secrets(secrets_of(url))

    def add_secrets(self, secrets: Iterable[str | None]) -> None:
        with self._lock:
            known = set(self._secrets)
            known.update(s for s in secrets if s and len(s) >= MIN_SECRET)
            self._secrets = tuple(sorted(known, key=len, reverse=True))

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return mask_query(text)

    def install(self, *loggers: str) -> None:
        """Put this filter on every handler of the root logger and of ``loggers``."""
        for name in ("", *loggers):
            for handler in logging.getLogger(name or None).handlers:
                if self not in handler.filters:
                    handler.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: the logging module reports it itself
            return True
        clean = self.scrub(message)
        if clean != message:
            if isinstance(record.args, tuple) and isinstance(record.msg, str) and self.scrub(record.msg) == record.msg:
                # Keep the arguments (formatters such as uvicorn's access log read them).
                record.args = tuple(self.scrub(a) if isinstance(a, str) else a for a in record.args)
                if record.getMessage() != clean:
                    record.msg, record.args = clean, None
            else:
                record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = self.scrub(record.stack_info)
        return True


REDACTOR = Redactor()
"""The process's redactor: the command line feeds it and installs it."""
