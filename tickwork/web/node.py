"""A worker node inside the server process (``tickwork serve --with-worker``), for small
deployments that want one process: the node runs on a thread of its own, starts with the
server once the database can be used and is stopped gracefully (its runs drained within ``shutdown_grace``) when the
server shuts down.

The node is supervised: if it dies, the process is asked to stop (SIGTERM, which the
server handles as a graceful shutdown) rather than go on serving without a node.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable

from tickwork.app import App
from tickwork.node.worker import Worker
from tickwork.web.database import Database

log = logging.getLogger("tickwork.web")
JOIN_SLACK_S = 10.0


def stop_process() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


class BackgroundWorker:
    def __init__(
        self,
        app: App,
        concurrency: int,
        db: Database,
        *,
        prefetch: int | None = None,
        on_crash: Callable[[], None] = stop_process,
    ) -> None:
        self.app = app
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.db = db
        self.worker: Worker | None = None
        self._on_crash = on_crash
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="tickwork-node", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop claiming, let running tasks finish within ``shutdown_grace``, then return."""
        with self._lock:
            self._stopping.set()
            worker = self.worker
        if worker is not None:
            worker.stop()
        self._thread.join(self.app.shutdown_grace + JOIN_SLACK_S)
        if self._thread.is_alive():
            log.warning("node %s did not stop within its shutdown grace", worker.node_id if worker else "-")

    def _run(self) -> None:
        # The node starts once the database can be used: the server answers (503s) meanwhile.
        while not self.db.wait_available(1.0):
            if self._stopping.is_set():
                return
        try:
            with self._lock:
                if self._stopping.is_set():
                    return
                self.worker = worker = self.app.worker(concurrency=self.concurrency, prefetch=self.prefetch)
            worker.run(install_signals=False)
        except BaseException:
            log.exception("the in-process node died")
            if not self._stopping.is_set():
                self._on_crash()
            return
        if not self._stopping.is_set():
            log.error("node %s stopped by itself: stopping the server", worker.node_id)
            self._on_crash()
