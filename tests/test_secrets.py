"""The database password never shows: in no command's output, no log line, no page and
no JSON answer, while the database is away (the moment errors quote URLs the most).

Every command runs as a real process, all of them at once, each with a deadline; each
must end with a one-line error, except ``tickwork serve``, which keeps serving 503s.
A token put in a query string is masked in the access log, too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.http_support import APP_SPEC, TOKEN, Served
from tests.workers import ROOT
from tickwork import App, StoreError

SECRET = "S3cret"
QUERY_SECRET = "qsTok3n-value"
URLS = [
    f"postgresql://u:{SECRET}@127.0.0.1:1/x",
    f"postgresql://u@127.0.0.1:1/x?password={SECRET}",
    f"postgresql://u:{SECRET}@[::1/x",  # does not even parse: the driver quotes it whole
]
COMMANDS = [
    ["stats"],
    ["stats", "--json"],
    ["tasks", "list"],
    ["tasks", "show", "1"],
    ["tasks", "cancel", "1"],
    ["executions", "1"],
    ["db", "upgrade"],
    ["schedule", APP_SPEC, "web.ok"],
    ["worker", APP_SPEC],
    ["worker", APP_SPEC, "--metrics-port", "0"],
]
DEADLINE_S = 60


def start(url: str, args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "TICKWORK_DB": url, "COLUMNS": "200"}
    env.pop("TICKWORK_API_TOKEN", None)
    command = [sys.executable, "-c", "from tickwork.cli import main; main()", *args]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_no_command_shows_the_password() -> None:
    # Every command on the first URL; the others, and -vv (every log line), on a few.
    plan = [(URLS[0], (), c) for c in COMMANDS] + [(URLS[0], ("-vv",), c) for c in (COMMANDS[0], COMMANDS[-1])]
    plan += [(url, (), COMMANDS[0]) for url in URLS[1:]] + [(url, ("-vv",), COMMANDS[-2]) for url in URLS[1:]]
    runs = {(url, verbose, tuple(c)): start(url, [*verbose, *c]) for url, verbose, c in plan}
    deadline = time.monotonic() + DEADLINE_S
    for (_, verbose, command), proc in runs.items():
        output, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        assert SECRET not in output, (command, output)
        assert proc.returncode == 1, (command, output)
        assert "Traceback" not in output or verbose, (command, output)
        lines = output.strip().splitlines()
        assert lines[-1].startswith("Error: "), (command, output)
        if not verbose:
            assert len(lines) == 1, (command, output)


def test_serve_keeps_serving_503s_and_logs_no_secret(tmp_path: Path) -> None:
    served = Served(URLS[0], tmp_path / "serve.log")
    try:
        with httpx.Client(base_url=served.url, timeout=10) as client:
            auth = {"Authorization": f"Bearer {TOKEN}"}
            for path, headers in [
                ("/healthz", {}),
                ("/api/v1/tasks", auth),
                ("/api/v1/stats", auth),
                ("/", {"Accept": "text/html"}),
                ("/login", {}),
            ]:
                answer = client.get(path, headers=headers)
                assert answer.status_code == 503, (path, answer.text)
                assert SECRET not in answer.text and "retry-after" in answer.headers
            assert client.get("/metrics", headers=auth).status_code == 200
            refused = client.get(f"/api/v1/tasks?access_token={QUERY_SECRET}", headers=auth)
            assert refused.status_code == 422 and QUERY_SECRET not in refused.text
            assert client.get(f"/healthz?token={QUERY_SECRET}&x=1").status_code == 503
            assert client.get(f"/static/app.css?api_key={QUERY_SECRET}").status_code == 200
    finally:
        assert served.stop() in (0, -signal.SIGTERM), served.output()
    log = served.output()
    assert SECRET not in log and QUERY_SECRET not in log, log
    assert "access_token=***" in log and "token=***&x=1" in log and "api_key=***" in log
    assert "cannot be used" in log  # the outage is logged, masked


def test_the_library_never_quotes_the_password_either() -> None:
    """From Python too: every way a PostgreSQL URL can fail names it masked."""
    for url in [*URLS, f"postgresql://u:{SECRET}@h/db?bogus=1", f"mysql://u:{SECRET}@h/db"]:
        with pytest.raises(StoreError) as refused:
            App(url).store  # noqa: B018 - opening the store is the point
        assert SECRET not in str(refused.value) and "***" in str(refused.value), str(refused.value)
