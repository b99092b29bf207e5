"""tickwork beside its peers, on the same workloads, database and machine, in one run.

    .venv/bin/pip install -e '.[bench]'          # the peers, pinned (pyproject's bench extra)
    .venv/bin/python -m bench.peers [--systems tickwork,pgqueuer,pgqueuer:batch_size=100,ceiling]
                                    [--workloads W1,W2,W3] [--scale 1.0]

Every system runs the same protocol (workloads.py): a fresh PostgreSQL database; all
tasks stored before any worker starts (the time that takes is the enqueue figure); 2
worker processes launched; the run ends when every task has started. Each task is a
no-op that appends "<task number> <start ns>" to its process's own file (sink.py), so
starts are counted outside every system's database, the same way for all of them.

Systems (systems.py; each at its documented defaults unless the name says otherwise):
  tickwork               ``App.run_worker(concurrency=16)``, tasks from ``schedule_many``
  pgqueuer               PgQueuer on asyncpg, ``QueueManager.run()`` at its defaults
                         (``batch_size=10``); ``pgqueuer:batch_size=100`` is its best tuning
  ceiling                a bare loop on tickwork's own tables: claim 500 rows ``FOR UPDATE
                         SKIP LOCKED``, run nothing, write one execution row per task and
                         mark them done (what a scheduler that logs every run cannot beat)
"""
