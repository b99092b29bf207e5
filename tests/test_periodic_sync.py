"""Schedules in code (``@app.periodic``) kept in line by ``sync_schedules`` across real
deploys, on both stores.

Each test deploys releases of an application: a module, ``periodic_release``, written
to a folder of tmp_path that is on the processes' PYTHONPATH and rewritten by every
deploy (without bytecode caches, so a rewrite within the same second is still read).
Nodes of a release are real processes (tests/apps/periodic_node.py: ``run_worker``,
which syncs at start-up unless told not to); ``Code.sync`` runs one
``sync_schedules`` in a process of its own and returns its plan. The test process
reads the store and schedules the runtime tasks a sync must leave alone; only the
thread race syncs from it (several Apps of its own, each with its own connections).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import STORE_KINDS, url_of, wait_for
from tests.workers import ROOT
from tickwork import App, Context, ExecutionStatus, Kind, Status, Task, fire_times
from tickwork.declarations import REMOVED
from tickwork.editing import DEFINITION

RELEASE = "periodic_release"
RUNNER = "tests.apps.periodic_node"
SYNCED = "schedules in code synced"
STARTED = re.compile(r"node \S+ started: ")
CRON_A = "17 3 * * *"
CRON_B = "29 4 * * *"

HEADER = '''\
"""One release of the application, deployed by tests/test_periodic_sync.py."""

import os
import time
from pathlib import Path

from tickwork import App, Context

app = App(poll_interval=0.1, heartbeat=0.5, lease=10, shutdown_grace=10)
'''


def beat(*periodic: str) -> str:
    """The task ``periodic.beat``, under the given ``@app.periodic`` lines (none: the
    task is still registered, but code no longer declares a schedule for it)."""
    return "\n".join(
        [*periodic, '@app.task(name="periodic.beat")', 'def beat(ctx: Context, release: str = "") -> str:',
         "    return release", ""]
    )  # fmt: skip


def report(*periodic: str) -> str:
    return "\n".join(
        [*periodic, '@app.task(name="periodic.report")', "def report(ctx: Context) -> None:", "    pass", ""]
    )


def slow(*periodic: str) -> str:
    """``periodic.slow``: each run waits for the file ``gate`` of $PERIODIC_DIR."""
    return "\n".join(
        [*periodic, '@app.task(name="periodic.slow")', 'def slow(ctx: Context, release: str = "") -> str:',
         '    folder = Path(os.environ["PERIODIC_DIR"])',
         '    (folder / f"started-{ctx.execution_id}").touch()',
         "    deadline = time.monotonic() + 30",
         '    while not (folder / "gate").exists() and time.monotonic() < deadline:',
         "        time.sleep(0.01)  # the run's own work, held until the test opens the gate",
         "    return release", ""]
    )  # fmt: skip


class Code:
    """The application's code as deployed: one module, rewritten by each deploy."""

    def __init__(self, folder: Path, db_url: str) -> None:
        self.folder = folder
        (folder / "code").mkdir()
        (folder / "gates").mkdir()
        self.gates = folder / "gates"
        self.env = {
            **os.environ,
            "TICKWORK_DB": db_url,
            "PYTHONPATH": str(folder / "code"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PERIODIC_DIR": str(self.gates),
        }

    def deploy(self, *tasks: str) -> None:
        (self.folder / "code" / f"{RELEASE}.py").write_text("\n\n".join([HEADER, *tasks]))

    def sync(self, *flags: str) -> list[dict[str, Any]]:
        """One ``app.sync_schedules`` of the deployed code, in a process of its own."""
        done = subprocess.run(
            [sys.executable, "-m", RUNNER, "sync", RELEASE, *flags],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        plan: list[dict[str, Any]] = json.loads(done.stdout.splitlines()[-1])
        return plan


class Node:
    """One node of the deployed code (a real process), until ``stop``."""

    def __init__(self, code: Code, log: Path, args: Sequence[str]) -> None:
        self.log = log
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", RUNNER, "node", RELEASE, *args],
            cwd=ROOT, env=code.env, stdout=self._log_file, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def synced(self) -> bool:
        return SYNCED in self.output()

    def running(self) -> bool:
        """Started (its signal handlers are in place from then on)."""
        return STARTED.search(self.output()) is not None

    def actions(self) -> list[tuple[str, str]]:
        """(key, action) of each change its start-up sync logged (not the unchanged)."""
        return re.findall(r"schedule '([^']+)': (\w+)", self.output())

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM once it has started, then wait for a clean exit."""
        wait_for(lambda: self.running() or self.proc.poll() is not None, timeout=timeout)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        finally:
            self._log_file.close()
        assert code == 0, self.output()
        assert "Traceback" not in self.output(), self.output()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log_file.close()


class Nodes:
    def __init__(self, code: Code, folder: Path) -> None:
        self.code = code
        self.folder = folder
        folder.mkdir()
        self.started: list[Node] = []

    def start(self, *args: str) -> Node:
        node = Node(self.code, self.folder / f"node-{len(self.started)}.log", args)
        self.started.append(node)
        return node

    def kill_all(self) -> None:
        for node in self.started:
            node.kill()


@pytest.fixture(params=STORE_KINDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each store kind. On PostgreSQL, conftest's ``pg_url``
    empties the tasks, executions and nodes but not the declaration sets a sync
    remembers; those are emptied here, or an earlier test's first-seen times of the same
    declarations would decide this test's syncs."""
    url = url_of(request.param, request, tmp_path)
    if request.param == "postgres":
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("TRUNCATE tickwork_schedule_sets")
    return url


@pytest.fixture
def code(tmp_path: Path, db_url: str) -> Code:
    return Code(tmp_path, db_url)


@pytest.fixture
def nodes(code: Code, tmp_path: Path) -> Iterator[Nodes]:
    """The node processes of one test; whatever still runs at the end is killed."""
    started = Nodes(code, tmp_path / "logs")
    yield started
    started.kill_all()


@pytest.fixture
def client(db_url: str) -> Iterator[App]:
    """Reads the store, and schedules at runtime tasks of the same names as the code's
    (its own App declares nothing and never syncs)."""
    app = App(db_url)

    @app.task(name="periodic.beat")
    def beat(ctx: Context, release: str = "") -> str:
        return release

    yield app
    app.close()


def code_tasks(client: App, key: str) -> list[Task]:
    """Every code schedule ever stored for ``key``, oldest first."""
    return sorted((t for t in client.tasks(limit=1000) if t.key == key and t.origin == "code"), key=lambda t: t.id)


def the_code_task(client: App, key: str) -> Task | None:
    tasks = code_tasks(client, key)
    assert len(tasks) <= 1, tasks
    return tasks[0] if tasks else None


def state(task: Task) -> dict[str, Any]:
    """What a sync could change of a task: its definition, status and slot, and the
    revision every edit bumps."""
    fields = ("status", "revision", "version", "origin", "key", "scheduled_at", "next_run_at", "declared_at")
    return {f: getattr(task, f) for f in (*DEFINITION, *fields)}


def next_slots(cron: str, *moments: datetime) -> set[datetime]:
    """The cron's first slot after each moment: a slot placed from "now" at some point
    between the moments is one of them."""
    return {fire_times(cron=cron, after=moment, n=1)[0] for moment in moments}


def snapshot(db_url: str) -> dict[str, list[str]]:
    """Every row of every tickwork table, as text."""
    if db_url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as conn:
            names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return {t: sorted(map(repr, conn.execute(f"SELECT * FROM {t}"))) for t in names}
    import psycopg

    with psycopg.connect(db_url) as conn:
        query = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        names = [r[0] for r in conn.execute(query)]
        return {t: sorted(map(repr, conn.execute(f"SELECT * FROM {t}"))) for t in names}


# -- a schedule's life across deploys -----------------------------------------------------------


def test_a_schedule_follows_each_deploy_in_place_and_leaves_runtime_tasks_alone(
    code: Code, nodes: Nodes, client: App
) -> None:
    unkeyed = client.schedule("periodic.beat", every=3600, kwargs={"release": "runtime"})
    keyed = client.schedule("periodic.beat", cron="0 0 1 1 *", key="runtime-beat")
    runtime = {t.id: state(t) for t in (unkeyed, keyed)}

    # Release 1 declares it: the node's start-up sync creates it, and it runs.
    code.deploy(beat('@app.periodic(every=1, key="beat", kwargs={"release": "v1"})'))
    node = nodes.start()
    created = wait_for(lambda: the_code_task(client, "beat"))
    assert isinstance(created, Task)
    assert (created.kind, created.interval, created.cron) == (Kind.RECURRING, 1.0, None)
    assert created.kwargs == {"release": "v1"}
    assert created.declared_at is not None
    wait_for(lambda: client.executions(created.id, status="COMPLETED"), timeout=30)
    node.stop()
    assert node.actions() == [("beat", "create")]
    history = client.executions(created.id)
    assert {e.status for e in history} == {ExecutionStatus.COMPLETED}
    assert {e.result for e in history} == {"v1"}
    before = client.get(created.id)

    # Release 2 changes its schedule: the same task, edited in place, placed from now.
    code.deploy(beat(f'@app.periodic("{CRON_A}", key="beat", kwargs={{"release": "v2"}})'))
    deployed = datetime.now(UTC)
    node = nodes.start()
    wait_for(node.synced)
    synced = datetime.now(UTC)
    node.stop()
    assert node.actions() == [("beat", "update")]
    [updated] = code_tasks(client, "beat")
    assert updated.id == created.id and updated.created_at == created.created_at
    assert (updated.cron, updated.interval, updated.kwargs) == (CRON_A, None, {"release": "v2"})
    assert updated.status is Status.PENDING and updated.revision == before.revision + 1
    assert updated.scheduled_at in next_slots(CRON_A, deployed, synced)
    assert updated.next_run_at == updated.scheduled_at  # no jitter
    assert updated.run_count == before.run_count == len(history)
    assert client.executions(created.id) == history  # its history is kept
    assert updated.declared_at is not None and before.declared_at is not None
    assert updated.declared_at > before.declared_at

    # Release 3 still registers the task but no longer declares the schedule: cancelled.
    code.deploy(beat())
    node = nodes.start()
    wait_for(node.synced)
    node.stop()
    assert node.actions() == [("beat", "remove")]
    [removed] = code_tasks(client, "beat")
    assert removed.id == created.id and removed.status is Status.CANCELLED
    assert removed.last_decision == REMOVED and "code no longer declares" in REMOVED
    runs = client.executions(created.id)
    [note] = [e for e in runs if e.status is ExecutionStatus.CANCELLED]
    assert note.note == REMOVED and note.scheduled_for == updated.scheduled_at
    assert [e for e in runs if e is not note] == history

    # The runtime tasks of the same name went through all three deploys untouched.
    for task_id, was in runtime.items():
        assert state(client.get(task_id)) == was


def test_a_running_run_finishes_as_claimed_when_a_new_release_edits_its_schedule(
    code: Code, nodes: Nodes, client: App
) -> None:
    code.deploy(slow('@app.periodic(every=1, key="slow", kwargs={"release": "v1"})'))
    old = nodes.start()
    running = wait_for(lambda: (t := the_code_task(client, "slow")) is not None and t.status is Status.RUNNING and t)
    assert isinstance(running, Task)
    wait_for(lambda: list(code.gates.glob("started-*")))

    # A rolling deploy: a node of the new release starts while the old one runs it.
    code.deploy(slow(f'@app.periodic("{CRON_A}", key="slow", kwargs={{"release": "v2"}})'))
    deployed = datetime.now(UTC)
    new = nodes.start()
    wait_for(new.synced)
    synced = datetime.now(UTC)
    assert new.actions() == [("slow", "update")]
    edited = client.get(running.id)
    assert edited.status is Status.RUNNING and edited.version == running.version  # the run's fence holds
    assert (edited.cron, edited.interval, edited.kwargs) == (CRON_A, None, {"release": "v2"})
    assert edited.replan_at in next_slots(CRON_A, deployed, synced)

    (code.gates / "gate").touch()
    done = wait_for(lambda: (t := client.get(running.id)).status is Status.PENDING and t)
    assert isinstance(done, Task)
    [run] = client.executions(running.id)
    assert run.status is ExecutionStatus.COMPLETED and run.result == "v1"  # as it was claimed
    assert run.fence == running.version
    assert (done.scheduled_at, done.next_run_at) == (edited.replan_at, edited.replan_run_at)
    assert done.replan_at is None and done.cron == CRON_A
    old.stop()
    new.stop()


# -- runtime tasks, dry runs, sync=False --------------------------------------------------------


def test_a_runtime_task_holding_a_declared_key_is_a_conflict_left_alone(code: Code, nodes: Nodes, client: App) -> None:
    held = client.schedule("periodic.beat", every=3600, key="beat", kwargs={"release": "runtime"})
    code.deploy(beat(f'@app.periodic("{CRON_A}", key="beat", kwargs={{"release": "code"}})'))
    node = nodes.start()
    wait_for(node.synced)
    node.stop()
    assert node.actions() == [("beat", "conflict")]
    assert f"key is held by task {held.id}, scheduled at runtime: left alone" in node.output()
    assert code_tasks(client, "beat") == []
    assert state(client.get(held.id)) == state(held)

    # Once the runtime task has ended, the key is free for the declared schedule.
    cancelled = state(client.cancel(held.id))
    [change] = code.sync()
    assert change["action"] == "create"
    [task] = code_tasks(client, "beat")
    assert task.id != held.id and task.cron == CRON_A and task.status is Status.PENDING
    assert state(client.get(held.id)) == cancelled


def test_a_dry_run_plans_and_changes_nothing(code: Code, db_url: str) -> None:
    code.deploy(beat(f'@app.periodic("{CRON_A}", key="beat")'))
    [created] = code.sync()
    assert created["action"] == "create"
    before = snapshot(db_url)

    code.deploy(beat(f'@app.periodic("{CRON_B}", key="beat")', '@app.periodic(every=60, key="beat-2")'))
    plan = code.sync("--dry-run")
    assert [(c["key"], c["action"]) for c in plan] == [("beat", "update"), ("beat-2", "create")]
    assert plan[0]["fields"] == {"cron": {"old": CRON_A, "new": CRON_B}}
    assert snapshot(db_url) == before

    code.deploy(beat())
    assert [(c["key"], c["action"], c["note"]) for c in code.sync("--dry-run")] == [("beat", "remove", REMOVED)]
    assert snapshot(db_url) == before  # not even the declaration sets were remembered

    # What the dry run planned is what the sync then does.
    code.deploy(beat(f'@app.periodic("{CRON_B}", key="beat")', '@app.periodic(every=60, key="beat-2")'))
    done = code.sync()
    assert [(c["key"], c["action"], c["fields"]) for c in done] == [(c["key"], c["action"], c["fields"]) for c in plan]


def test_a_node_started_with_sync_false_leaves_the_schedules_as_they_are(code: Code, nodes: Nodes, client: App) -> None:
    code.deploy(beat(f'@app.periodic("{CRON_A}", key="beat")'))
    assert [c["action"] for c in code.sync()] == ["create"]
    task = the_code_task(client, "beat")
    assert task is not None
    code.deploy(beat(f'@app.periodic("{CRON_B}", key="beat")'))
    node = nodes.start("--no-sync")
    wait_for(node.running)
    node.stop()
    assert not node.synced()
    assert [state(t) for t in code_tasks(client, "beat")] == [state(task)]


# -- nodes syncing at once ----------------------------------------------------------------------


def test_two_nodes_starting_at_once_leave_one_task_per_key(
    code: Code, nodes: Nodes, client: App, tmp_path: Path
) -> None:
    code.deploy(
        beat(f'@app.periodic("{CRON_A}", key="beat-a")', '@app.periodic(every=3600, key="beat-b")'),
        report('@app.periodic("0 * * * *")'),
    )
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{i}" for i in range(2)]
    pair = [nodes.start("--ready", str(flag), "--go", str(go)) for flag in ready]
    wait_for(lambda: all(flag.exists() for flag in ready), timeout=30)  # imported, store open
    go.touch()
    for node in pair:
        wait_for(node.synced)
    keys = ["beat-a", "beat-b", "periodic.report"]
    for key in keys:
        [task] = code_tasks(client, key)
        assert task.status is Status.PENDING
    # One node created all three; the other found them done (its plan: all unchanged).
    assert sorted([node.actions() for node in pair], key=len) == [[], [(key, "create") for key in keys]]
    for node in pair:
        node.stop()


ROUNDS = 4
THREADS = 6


def declaring(url: str, keys: Sequence[str]) -> App:
    """An App of its own (its own store connections) declaring ``keys`` on one task."""
    app = App(url)

    def beat(ctx: Context, release: str = "") -> str:
        return release

    app.task(name="periodic.beat")(beat)
    for key in keys:
        app.periodic(every=3600, key=key)(beat)
    return app


def test_syncs_racing_in_threads_create_and_remove_each_schedule_once(db_url: str, client: App) -> None:
    """Each round is a new release declaring new keys, synced by several Apps at once: one
    creates each new key and cancels each of the previous release's, the others find it
    done."""
    previous: list[str] = []
    for round_ in range(ROUNDS):
        keys = [f"r{round_}-{letter}" for letter in "abc"]
        apps = [declaring(db_url, keys) for _ in range(THREADS)]
        try:
            for app in apps:
                app.store  # noqa: B018  # opened before the start line
            start = threading.Barrier(THREADS)

            def sync(app: App, start: threading.Barrier = start) -> list[Any]:
                start.wait(30)
                return app.sync_schedules()

            with ThreadPoolExecutor(THREADS) as pool:
                plans = [future.result(60) for future in [pool.submit(sync, app) for app in apps]]
        finally:
            for app in apps:
                app.close()
        actions = Counter((c.key, c.action) for plan in plans for c in plan)
        expected = {(key, "create"): 1 for key in keys}
        expected.update({(key, "unchanged"): THREADS - 1 for key in keys})
        expected.update({(key, "remove"): 1 for key in previous})
        assert actions == expected, f"round {round_}"
        for key in keys:
            [task] = code_tasks(client, key)
            assert task.status is Status.PENDING
        for key in previous:
            [task] = code_tasks(client, key)
            assert task.status is Status.CANCELLED
            assert [e.status for e in client.executions(task.id)] == [ExecutionStatus.CANCELLED]
        previous = keys


# -- rolling deploys ----------------------------------------------------------------------------


def test_an_older_release_cannot_undo_a_newer_one_unless_forced(code: Code, nodes: Nodes, client: App) -> None:
    release_a = beat(f'@app.periodic("{CRON_A}", key="beat")')
    release_b = beat(f'@app.periodic("{CRON_B}", key="beat")')

    code.deploy(release_a)
    assert [c["action"] for c in code.sync()] == ["create"]
    code.deploy(release_b)
    assert [c["action"] for c in code.sync()] == ["update"]
    newer = the_code_task(client, "beat")
    assert newer is not None and newer.cron == CRON_B

    # A node of release A starts again (a rolling deploy's old half): it changes nothing.
    code.deploy(release_a)
    node = nodes.start()
    wait_for(node.synced)
    node.stop()
    assert node.actions() == [("beat", "kept")]
    assert "written by a newer declaration" in node.output()
    assert [state(t) for t in code_tasks(client, "beat")] == [state(newer)]

    # A deliberate rollback to A wins, in place ...
    [forced] = code.sync("--force")
    assert (forced["action"], forced["task_id"]) == ("update", newer.id)
    assert forced["fields"] == {"cron": {"old": CRON_B, "new": CRON_A}}
    [rolled_back] = code_tasks(client, "beat")
    assert rolled_back.id == newer.id and rolled_back.cron == CRON_A
    assert rolled_back.declared_at is not None and newer.declared_at is not None
    assert rolled_back.declared_at > newer.declared_at
    # ... and A now counts as the newest: B, first seen before the rollback, is older.
    code.deploy(release_b)
    assert [c["action"] for c in code.sync()] == ["kept"]
    assert [state(t) for t in code_tasks(client, "beat")] == [state(rolled_back)]


# -- found and fixed --------------------------------------------------------------------------------


def test_a_dry_run_of_a_forced_rollback_plans_what_the_rollback_does(code: Code, db_url: str) -> None:
    code.deploy(beat(f'@app.periodic("{CRON_A}", key="beat")'))
    code.sync()
    code.deploy(beat(f'@app.periodic("{CRON_B}", key="beat")'))
    code.sync()
    code.deploy(beat(f'@app.periodic("{CRON_A}", key="beat")'))
    before = snapshot(db_url)
    preview = code.sync("--dry-run", "--force")
    assert snapshot(db_url) == before
    assert code.sync("--force") == preview  # the preview of a rollback is the rollback


def test_a_second_sync_of_the_same_release_changes_nothing_when_arguments_hold_tuples(code: Code, client: App) -> None:
    code.deploy(beat('@app.periodic(every=3600, key="beat", kwargs={"release": ("v", 1)})'))
    assert [c["action"] for c in code.sync()] == ["create"]
    task = the_code_task(client, "beat")
    assert task is not None
    assert [c["action"] for c in code.sync()] == ["unchanged"]  # in fact: "update", kwargs [..] -> (..)
    assert state(client.get(task.id)) == state(task)
