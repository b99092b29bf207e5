"""Fixtures of the fault suite: private servers, a proxy, a small tmpfs, a SQLite write
lock held by another process, the nodes and the case. Every one of them is torn down in
a ``finally``, whatever the test did to it."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.faults.harness import Case
from tests.faults.nodes import Fleet
from tests.faults.proxy import TcpProxy
from tests.faults.servers import PrivatePostgres, PrivateRedis, SqliteWriteLock, unavailable


@pytest.fixture
def fleet(records: Path) -> Iterator[Fleet]:
    fleet = Fleet(records)
    try:
        yield fleet
    finally:
        fleet.cleanup()


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        server.start()
        yield server
    finally:
        server.destroy()


@pytest.fixture
def private_pg_url(private_pg: PrivatePostgres) -> str:
    """An empty database on the private server (the App creates its schema)."""
    return private_pg.create_database("tickwork")


@pytest.fixture
def proxy_factory() -> Iterator[Callable[[int], TcpProxy]]:
    """``proxy_factory(port)``: a TCP proxy to 127.0.0.1:port, closed at the end."""
    proxies: list[TcpProxy] = []

    def make(port: int) -> TcpProxy:
        proxy = TcpProxy("127.0.0.1", port).start()
        proxies.append(proxy)
        return proxy

    try:
        yield make
    finally:
        for proxy in proxies:
            proxy.close()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    try:
        server.start()
        yield server
    finally:
        server.kill()


@pytest.fixture
def small_tmpfs() -> Iterator[Path]:
    """A 16 MiB tmpfs of the test's own (root only: ``mount -t tmpfs``), unmounted after."""
    folder = Path(tempfile.mkdtemp(prefix="tickwork-faults-tmpfs-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        folder.rmdir()
        unavailable(f"cannot mount a tmpfs (root needed): {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)  # still open: detach now
        with contextlib.suppress(OSError):
            folder.rmdir()


@pytest.fixture
def sqlite_write_lock() -> Iterator[Callable[[str], SqliteWriteLock]]:
    holders: list[SqliteWriteLock] = []

    def hold(path: str) -> SqliteWriteLock:
        holder = SqliteWriteLock(path)
        holders.append(holder)
        return holder

    try:
        yield hold
    finally:
        for holder in holders:
            holder.kill()


@pytest.fixture
def make_case(fleet: Fleet) -> Iterator[Callable[..., Case]]:
    """``make_case(name, url)``: the case of this test, its client closed at the end."""
    cases: list[Case] = []

    def make(name: str, url: str, **kwargs: float) -> Case:
        case = Case(name, url, fleet, **kwargs)
        cases.append(case)
        return case

    try:
        yield make
    finally:
        for case in cases:
            with contextlib.suppress(Exception):
                case.close()
