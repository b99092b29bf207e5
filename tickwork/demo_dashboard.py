"""The demo's dashboard: the web app of ``tickwork serve`` in a thread of the demo's
process, on loopback only, signed in with a token generated for this run."""

from __future__ import annotations

import secrets
import socket
import threading
import time
from dataclasses import dataclass, field

from tickwork.app import App
from tickwork.errors import TickworkError
from tickwork.redact import REDACTOR

HOST = "127.0.0.1"
DEFAULT_PORT = 8000
START_TIMEOUT = 15.0


class DashboardError(TickworkError, RuntimeError):
    """The demo's dashboard could not start."""


@dataclass
class Dashboard:
    """A running dashboard: its URL and the token that signs in to it."""

    url: str
    token: str = field(repr=False)
    _server: object = field(repr=False)
    _thread: threading.Thread = field(repr=False)

    def stop(self) -> None:
        self._server.should_exit = True  # type: ignore[attr-defined]
        self._thread.join(timeout=10)


def listen(port: int = DEFAULT_PORT) -> socket.socket:
    """A socket on loopback: ``port`` if it is free, else any free port."""
    for candidate in (port, 0):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((HOST, candidate))
        except OSError:
            sock.close()
            continue
        sock.listen(128)
        return sock
    raise DashboardError(f"no free port on {HOST}")


def start(app: App, port: int = DEFAULT_PORT) -> Dashboard:
    """Serve ``app``'s dashboard and API on loopback; return once it answers."""
    # Imported here, as `tickwork serve` does: only the commands that serve need uvicorn.
    import uvicorn

    from tickwork.web.app import create_app
    from tickwork.web.server import LOOPBACK_NAMES

    token = secrets.token_urlsafe(32)
    REDACTOR.add_secrets([token])  # never in a log line, should anything quote it
    web = create_app(app, token=token, allowed_hosts=LOOPBACK_NAMES)
    sock = listen(port)
    bound = sock.getsockname()[1]
    # No logging set-up of uvicorn's own (it would write over the demo's screen); no
    # access log, so nothing of a request's line is ever printed.
    config = uvicorn.Config(web, host=HOST, port=bound, log_config=None, access_log=False, server_header=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="tickwork-dashboard", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise DashboardError(f"the dashboard did not start on {HOST}:{bound}")
        time.sleep(0.02)  # polling uvicorn's started flag, under the deadline above
    return Dashboard(url=f"http://{HOST}:{bound}/", token=token, _server=server, _thread=thread)
