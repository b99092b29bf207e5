"""A process of a deployed release, for tests/test_periodic_sync.py.

The release is a module (``MODULE``, found on ``PYTHONPATH``) whose ``app`` declares
schedules with ``@app.periodic``; its database is ``TICKWORK_DB``.

``python -m tests.apps.periodic_node node MODULE [--no-sync] [--ready FILE --go FILE]``
runs one node of it until SIGTERM (``app.run_worker``, which syncs first unless
``--no-sync``). With ``--ready``/``--go`` the node opens its store, creates FILE
``--ready`` and waits for ``--go`` to exist before it starts: several processes so
released start (and sync) as nearly at once as processes can.

``python -m tests.apps.periodic_node sync MODULE [--dry-run] [--force]`` runs one
``app.sync_schedules`` and prints its plan as one line of JSON.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import time
from pathlib import Path

from tickwork import App

GO_WAIT_S = 30.0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="periodic_node")
    sub = parser.add_subparsers(dest="command", required=True)
    node = sub.add_parser("node")
    node.add_argument("module")
    node.add_argument("--no-sync", action="store_true")
    node.add_argument("--ready", type=Path)
    node.add_argument("--go", type=Path)
    sync = sub.add_parser("sync")
    sync.add_argument("module")
    sync.add_argument("--dry-run", action="store_true")
    sync.add_argument("--force", action="store_true")
    options = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    app: App = importlib.import_module(options.module).app
    if options.command == "sync":
        changes = app.sync_schedules(dry_run=options.dry_run, force=options.force)
        print(json.dumps([change.to_dict() for change in changes]), flush=True)
        app.close()
        return 0
    if options.ready is not None:
        app.store  # noqa: B018  # opened (and migrated) before the start line, not in the race
        options.ready.touch()
    if options.go is not None:
        deadline = time.monotonic() + GO_WAIT_S
        while not options.go.exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"{options.go} did not appear within {GO_WAIT_S} s")
            time.sleep(0.001)
    app.run_worker(concurrency=2, sync=not options.no_sync)
    app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
