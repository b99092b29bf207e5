"""One worker process of a system: ``python -m bench.peers.worker SYSTEM URL SINK``.

It runs until SIGTERM; each task it runs writes its start to the sink folder."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from bench.peers.sink import Sink
from bench.peers.systems import parse_system


def pgqueuer_main(url: str, sink: Path, batch_size: int) -> None:
    """PgQueuer as its documentation starts a worker: ``PgQueuer`` (its queue manager and
    its scheduler) on one asyncpg connection, an async entrypoint, ``run(batch_size=...)``
    with its other defaults (``dequeue_timeout`` 30 s)."""
    import asyncpg
    from pgqueuer import AsyncpgDriver, Job, PgQueuer

    record = Sink(sink)

    async def work() -> None:
        connection = await asyncpg.connect(url)
        pgq = PgQueuer(AsyncpgDriver(connection))

        @pgq.entrypoint("noop")
        async def noop(job: Job) -> None:
            record.started(int(job.payload or b"-1"))

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, pgq.shutdown.set)
        await pgq.run(batch_size=batch_size)
        await connection.close()

    asyncio.run(work())


def main(argv: list[str]) -> None:
    # Each system's process loads only its own code: a worker of pgqueuer or of a bare
    # loop that also imported tickwork would start ~60 ms of CPU later, a handicap of
    # theirs in every "from launch" figure (as it was until this was found).
    system, url, sink = parse_system(argv[0]), argv[1], Path(argv[2])
    if system.kind == "tickwork":
        from bench.tickwork_bench import node_main

        node_main(url, "skip_locked", sink, 1.0)
    elif system.kind == "pgqueuer":
        pgqueuer_main(url, sink, system.batch_size)
    elif system.kind == "bare":
        from bench.peers import bare

        bare.work(url, sink)
    else:
        from bench.ceiling import ceiling_main

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        ceiling_main(url, sink)


if __name__ == "__main__":
    main(sys.argv[1:])
