"""Notifications: in-process hooks (``@app.on("execution_failed")``) and an optional
webhook that POSTs each event as JSON, signed with an HMAC of a shared secret.

Events are delivered on a thread of their own, after the fenced write that recorded
them: a slow or failing hook or webhook never delays or breaks the node.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from tickwork.codec import dumps
from tickwork.errors import InvalidInput

log = logging.getLogger("tickwork.events")

EVENTS = frozenset(
    {
        "execution_completed",
        "execution_failed",
        "execution_timed_out",
        "execution_cancelled",
        "execution_skipped",
        "execution_lost",
        "task_completed",
        "task_failed",
    }
)
WEBHOOK_TIMEOUT_S = 5.0
WEBHOOK_ATTEMPTS = 3
SIGNATURE_HEADER = "X-Tickwork-Signature"

Hook = Callable[[dict[str, Any]], object]


def signature(secret: str, body: bytes) -> str:
    """What the webhook's ``X-Tickwork-Signature`` header carries for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class Events:
    def __init__(self, webhook_url: str | None = None, webhook_secret: str | None = None) -> None:
        if webhook_url is not None and not webhook_url.startswith(("http://", "https://")):
            raise InvalidInput("webhook_url", webhook_url, "must be an http:// or https:// URL")
        self.webhook_url = webhook_url
        self.webhook_secret = webhook_secret
        self._hooks: dict[str, list[Hook]] = defaultdict(list)
        self._queue: queue.SimpleQueue[tuple[str, dict[str, Any]] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def on(self, event: str) -> Callable[[Hook], Hook]:
        """Register ``hook(payload)`` for ``event``; the function stays callable."""
        if event not in EVENTS:
            raise InvalidInput("event", event, f"must be one of {', '.join(sorted(EVENTS))}")

        def register(hook: Hook) -> Hook:
            self._hooks[event].append(hook)
            return hook

        return register

    @property
    def wanted(self) -> bool:
        return bool(self._hooks) or self.webhook_url is not None

    def emit(self, event: str, payload: dict[str, Any]) -> None:
        """Queue an event for the hooks and the webhook (returns at once)."""
        if not (self._hooks.get(event) or self.webhook_url):
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, name="tickwork-events", daemon=True)
                self._thread.start()
        self._queue.put((event, {"event": event, **payload}))

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued, then stop the delivery thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)

    def _main(self) -> None:
        while (item := self._queue.get()) is not None:
            event, payload = item
            for hook in list(self._hooks.get(event, ())):
                try:
                    hook(payload)
                except Exception:
                    log.exception("hook %r for %s failed", hook, event)
            if self.webhook_url:
                self._post(payload)

    def _post(self, payload: dict[str, Any]) -> None:
        assert self.webhook_url is not None
        body = dumps(payload).encode()
        headers = {"Content-Type": "application/json", "User-Agent": "tickwork"}
        if self.webhook_secret:
            headers[SIGNATURE_HEADER] = signature(self.webhook_secret, body)
        import urllib.request  # here: only a node with a webhook pays for importing it (~10 ms)

        for attempt in range(1, WEBHOOK_ATTEMPTS + 1):
            request = urllib.request.Request(self.webhook_url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_S) as response:
                    if 200 <= response.status < 300:
                        return
                    raise OSError(f"HTTP {response.status}")
            except Exception as exc:
                if attempt == WEBHOOK_ATTEMPTS:
                    log.warning("webhook %s failed for %s: %s", self.webhook_url, payload["event"], exc)
                    return
                time.sleep(0.2 * 2 ** (attempt - 1))


def for_outcome(claim: Any, outcome: Any, node: str, *, lost: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """The events that a recorded outcome (a ``store.Outcome`` of a ``store.Claim``) stands for."""
    payload = {
        "task_id": outcome.task_id,
        "task_name": claim.task.name,
        "execution_id": outcome.execution_id,
        "attempt": claim.task.attempt,
        "scheduled_for": claim.scheduled_for.isoformat(),
        "status": outcome.status.value,
        "task_status": outcome.task_status.value,
        "finished_at": outcome.finished_at.isoformat(),
        "node": node,
        "error": None if outcome.error is None else {"type": outcome.error.type, "message": outcome.error.message},
        "note": outcome.note,
    }
    status = outcome.status.value
    execution_event = "execution_lost" if lost else f"execution_{status.lower()}"
    events = [(execution_event, payload)] if execution_event in EVENTS else []
    task_event = {"COMPLETED": "task_completed", "FAILED": "task_failed"}.get(outcome.task_status.value)
    if task_event is not None:
        events.append((task_event, payload))
    return events
