"""Private servers a fault test may break at will: a PostgreSQL cluster (initdb + pg_ctl
in a temporary folder, on a free port) and a Redis server, never the shared ones.

PostgreSQL refuses to run as root: as root, its binaries run as an unprivileged OS user
(``postgres`` when the package created it, else one made here) through ``runuser``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import redis

from tests.test_redis_nodes import PrivateRedis as RedisServer

NODE_APPNAME = "tickwork-faults-node"
"""``application_name`` of every node's connections (PGAPPNAME), to terminate only theirs."""

OS_USER = "postgres"
FALLBACK_OS_USER = "tickwork-faults"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """A missing tool skips the case on a developer's machine and fails it in CI."""
    import pytest

    if in_ci():
        pytest.fail(f"required in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _postgres_bin() -> Path | None:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _os_user() -> str | None:
    """The unprivileged user PostgreSQL runs as when we are root (None: run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in (OS_USER, FALLBACK_OS_USER):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    subprocess.run(["useradd", "--system", "--no-create-home", FALLBACK_OS_USER], check=True)
    return FALLBACK_OS_USER


class PrivatePostgres:
    """One PostgreSQL cluster of a test's own. ``url(db)`` names a database on it."""

    def __init__(self) -> None:
        bindir = _postgres_bin()
        if bindir is None:
            unavailable("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
            raise AssertionError("unreachable")
        self.bin = bindir
        self.user = _os_user()
        self.folder = Path(tempfile.mkdtemp(prefix="tickwork-faults-pg-"))
        self.data = self.folder / "data"
        self.logfile = self.folder / "server.log"
        self.port = free_port()
        if self.user is not None:
            shutil.chown(self.folder, self.user)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8",
                  "--locale=C")  # fmt: skip

    def _run(self, tool: str, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        return subprocess.run(command, check=check, capture_output=True, text=True, timeout=timeout)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    # -- life cycle ---------------------------------------------------------------

    def start(self) -> None:
        # fsync and full-page writes guard against an OS crash only: a server killed with
        # ``-m immediate`` still recovers every commit (synchronous_commit stays on, so a
        # commit a client saw is never lost, as in production).
        options = " ".join(
            f"-c {setting}"
            for setting in (
                f"port={self.port}",
                "listen_addresses=127.0.0.1",
                f"unix_socket_directories={self.folder}",
                "fsync=off",
                "full_page_writes=off",
                "max_connections=300",
            )
        )
        done = self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.logfile), "-w", "-t", "60",
                         "start", check=False)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {done.stdout}{done.stderr}\n{self.log_tail()}")

    def stop(self, mode: str = "fast") -> None:
        """Shut down (``fast``: sessions closed cleanly; ``immediate``: no checkpoint, a crash
        restart follows). Returns once the server is gone."""
        done = self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", check=False)
        if done.returncode != 0 and self.running():
            raise RuntimeError(f"pg_ctl stop -m {mode} failed: {done.stdout}{done.stderr}")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def running(self) -> bool:
        return self._postmaster_pid() is not None

    def answers(self) -> bool:
        try:
            with psycopg.connect(self.url(), connect_timeout=2, autocommit=True) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def _postmaster_pid(self) -> int | None:
        try:
            pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def destroy(self) -> None:
        """Stop the server however it is (even read-only or stopped) and delete its files."""
        with contextlib.suppress(Exception):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "20", "stop", check=False)
        pid = self._postmaster_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while self._postmaster_pid() is not None and time.monotonic() < deadline:
                time.sleep(0.05)  # the postmaster's exit, after SIGKILL
        shutil.rmtree(self.folder, ignore_errors=True)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    # -- administration -----------------------------------------------------------

    def admin(self, database: str = "postgres") -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.url(database), autocommit=True, connect_timeout=5)

    def create_database(self, name: str) -> str:
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def set_read_only(self, on: bool) -> int:
        """Make every new transaction read-only (or writable again), cluster-wide; turning
        it on also terminates the existing sessions, so none keeps writing. Returns how
        many were terminated."""
        with self.admin() as conn:
            conn.execute("SET default_transaction_read_only = off")  # this session stays writable
            if on:
                conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            else:
                conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
            conn.execute("SELECT pg_reload_conf()")
        return self.terminate_backends() if on else 0

    def terminate_backends(self, application_name: str | None = None) -> int:
        """Terminate client sessions (all but this one, or only those with that name)."""
        query = (
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        params: tuple[str, ...] = ()
        if application_name is not None:
            query += " AND application_name = %s"
            params = (application_name,)
        with self.admin() as conn:
            row = conn.execute(query, params).fetchone()
        return int(row[0]) if row else 0


class PrivateRedis(RedisServer):
    """A Redis server of a test's own (the one tests/test_redis_nodes.py starts), that a
    test may also kill, start again (empty) and flush."""

    def kill(self) -> None:
        self.stop()

    def _client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=1, socket_connect_timeout=1)

    def flush(self) -> None:
        client = self._client()
        try:
            client.flushall()
        finally:
            client.close()

    def keys(self, pattern: str = "*") -> list[bytes]:
        client = self._client()
        try:
            return list(client.scan_iter(match=pattern))
        finally:
            client.close()


class SqliteWriteLock:
    """Another process holding SQLite's write lock (``BEGIN IMMEDIATE``) until released."""

    def __init__(self, path: str) -> None:
        script = (
            "import sqlite3, sys\n"
            f"c = sqlite3.connect({path!r}, timeout=60, isolation_level=None)\n"
            "c.execute('BEGIN IMMEDIATE')\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n"
            "c.execute('ROLLBACK')\n"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until the lock is held (or the process failed)
        if line.strip() != "locked":
            raise RuntimeError(f"the lock holder failed: {line!r}")

    def release(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(10)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
