"""``tickwork demo`` in a pseudo-terminal of 80x24, as a person first sees it: the
dashboard it prints answers, every example kind has a run while it lasts, no line is
wider than the terminal, and it ends with its summary."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS, COLUMNS = 24, 80
KINDS = ("one-time", "delayed 5s", "cron * * * * *", "every 3s", "retried")
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
DEMO_S = 24
"""The demo's ``--duration``: it prints its summary ("runs logged") once that has passed."""
URL = re.compile(r"dashboard \(this machine only\): (http://127\.0\.0\.1:\d+/)")
TOKEN = re.compile(r"sign-in token: (\S+)")


class Terminal:
    """A child process on the slave side of a pty; what it wrote, read from the master."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env["TERM"] = "xterm-256color"
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            args, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
        os.close(slave)
        self.raw = b""

    @property
    def text(self) -> str:
        return ANSI.sub("", self.raw.decode("utf-8", errors="replace"))

    def read(self, timeout: float) -> bool:
        """Read what is there within ``timeout``; False once the child closed the pty."""
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every writer of the slave side has gone
            return False
        self.raw += chunk
        return bool(chunk)

    def wait_for(self, condition: re.Pattern[str] | str, within: float) -> re.Match[str] | None:
        """The first match in the output, reading until it shows up or ``within`` s pass."""
        pattern = re.compile(re.escape(condition)) if isinstance(condition, str) else condition
        deadline = time.monotonic() + within
        while (found := pattern.search(self.text)) is None:
            left = deadline - time.monotonic()
            if left <= 0 or not self.read(min(left, 0.2)):
                return pattern.search(self.text)
        return found

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        os.close(self.master)


def lines(text: str) -> list[str]:
    return re.split(r"\r\n|\r|\n", text)


def get(url: str, within: float) -> tuple[int, str]:
    """GET ``url`` (redirects followed) until it answers other than 503."""
    deadline = time.monotonic() + within
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or time.monotonic() > deadline:
                return exc.code, exc.read().decode()
        time.sleep(0.1)  # the server opens its database in the background: ask again


def rows_with_runs(text: str) -> set[str]:
    """The example kinds whose row shows a run (the latest one COMPLETED)."""
    return {kind for line in lines(text) for kind in KINDS if line.startswith(kind) and "COMPLETED" in line}


def test_demo_in_an_80x24_terminal(tmp_path: Path) -> None:
    """Every example kind shows a run while the demo lasts. How soon (within 20 s on an
    idle 2-core machine, as the README says) is a figure, not asserted here: on a loaded
    test machine the demo's first runs may come later."""
    database = str(tmp_path / "demo.db")
    args = [sys.executable, "-m", "tickwork.cli", "demo", "--duration", str(DEMO_S), "--db-path", database]
    term = Terminal(args, tmp_path)
    try:
        url = term.wait_for(URL, within=15)
        assert url is not None, term.text
        status, body = get(url.group(1), within=10)
        assert status == 200 and "Sign in" in body, (status, body[:500])
        while rows_with_runs(term.text) != set(KINDS) and "runs logged" not in term.text and term.read(0.2):
            pass
        assert rows_with_runs(term.text) == set(KINDS), term.text[-3000:]
        # The summary comes once the demo's duration has passed, counted from its own start:
        # the deadline is the launch's, not the moment the last kind showed its run (which
        # left ~2 s of slack when every kind showed early).
        ends_by = term.started + DEMO_S + 30
        assert term.wait_for("runs logged", within=ends_by - time.monotonic()) is not None, term.text[-3000:]
        while term.read(0.5):  # the closing hint, up to the child's exit
            pass
        assert term.proc.wait(timeout=10) == 0
    finally:
        term.close()
    text = term.text
    wide = [line for line in lines(text) if len(line) > COLUMNS]
    assert not wide, wide
    token = TOKEN.search(text)
    assert token is not None and text.count(token.group(1)) == 1  # printed once, nowhere else
    assert "FAILED" in text
    hint = hint_commands(text)
    assert len(hint) == 2
    for command in hint:  # each runs as printed, from the directory the hint names
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0 and ("demo.flaky" in done.stdout or "COMPLETED" in done.stdout), (command, done)


def hint_commands(text: str) -> list[str]:
    """The closing hint's commands, with their ``\\`` continuations as a shell reads them."""
    after = text.split("Inspect them (from ", 1)[1]
    commands: list[str] = []
    joined = ""
    rest = lines(after)
    start = next(i for i, line in enumerate(rest) if line.startswith("  "))  # past the (wrapped) directory
    for line in rest[start:]:
        if not line.startswith("  "):
            break
        joined += line + "\n"
        if not line.endswith("\\"):
            commands.append(joined)
            joined = ""
    return commands
