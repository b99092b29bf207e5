"""A small TCP proxy in the test process (asyncio on a thread of its own) between nodes
and a server, that can partition, drop and slow down the traffic.

* ``partition()``: bytes are held, not lost, in both directions and on new connections
  (accepted, never connected upstream): the peers' sockets stay open and their calls
  hang, as behind a switch that stopped forwarding. ``heal()`` lets everything through.
* ``drop()``: every open connection is reset at once; new ones are accepted as usual.
* ``delay(seconds)``: each chunk waits that long before it is forwarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.connections = 0
        """Connections accepted so far."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="faults-proxy", daemon=True)
        self._open: asyncio.Event | None = None
        self._delay = 0.0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def start(self) -> TcpProxy:
        self._thread.start()
        self._call(self._start())
        return self

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _start(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    # -- faults ---------------------------------------------------------------------

    def partition(self) -> None:
        self._loop.call_soon_threadsafe(self._gate().clear)

    def heal(self) -> None:
        self._delay = 0.0
        self._loop.call_soon_threadsafe(self._gate().set)

    def delay(self, seconds: float) -> None:
        self._delay = seconds

    def drop(self) -> int:
        """Reset every open connection; returns how many there were (both sides count once)."""

        async def reset() -> int:
            writers = list(self._writers)
            for writer in writers:
                transport = writer.transport
                if not transport.is_closing():
                    transport.abort()
            return len(writers) // 2

        result: int = self._call(reset())
        return result

    def close(self) -> None:
        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            self._gate().set()

        with contextlib.suppress(Exception):
            self._call(shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    # -- forwarding -----------------------------------------------------------------

    def _gate(self) -> asyncio.Event:
        assert self._open is not None, "proxy not started"
        return self._open

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            await self._gate().wait()  # partitioned: the connection is accepted, then hangs
            try:
                up_reader, upstream = await asyncio.open_connection(*self.target)
            except OSError:
                return  # the server is down: the client sees its connection closed
            self._writers.add(upstream)
            await asyncio.gather(self._pump(reader, upstream), self._pump(up_reader, writer))
        finally:
            for w in (writer, upstream):
                if w is not None:
                    self._writers.discard(w)
                    w.transport.abort()

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                await self._gate().wait()
                if self._delay:
                    await asyncio.sleep(self._delay)
                    await self._gate().wait()
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            sink.transport.abort()
