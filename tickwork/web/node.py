"""A worker node inside the server process (``tickwork serve --with-worker``), for small
deployments that want one process: the node runs on a thread of its own, starts with the
server and is stopped gracefully (its runs drained within ``shutdown_grace``) when the
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
from tickwork.worker import Worker

log = logging.getLogger("tickwork.web")
JOIN_SLACK_S = 10.0


def stop_process() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


class BackgroundWorker:
    def __init__(self, app: App, concurrency: int, *, on_crash: Callable[[], None] = stop_process) -> None:
        self.app = app
        self.worker = Worker(app, concurrency=concurrency)
        self._on_crash = on_crash
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="tickwork-node", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop claiming, let running tasks finish within ``shutdown_grace``, then return."""
        self._stopping = True
        self.worker.stop()
        self._thread.join(self.app.shutdown_grace + JOIN_SLACK_S)
        if self._thread.is_alive():
            log.warning("node %s did not stop within its shutdown grace", self.worker.node_id)

    def _run(self) -> None:
        try:
            self.worker.run(install_signals=False)
        except BaseException:
            log.exception("node %s died", self.worker.node_id)
            if not self._stopping:
                self._on_crash()
            return
        if not self._stopping:
            log.error("node %s stopped by itself: stopping the server", self.worker.node_id)
            self._on_crash()
