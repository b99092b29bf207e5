"""The App a ``tickwork:cli`` worker loads (``tickwork worker bench.peers.cli_app:app``):
bench.tickwork_bench's, its store and sink given by the launching harness."""

from __future__ import annotations

import os
from pathlib import Path

from bench.tickwork_bench import make_app

app = make_app(os.environ["TICKWORK_BENCH_URL"], "skip_locked", Path(os.environ["TICKWORK_BENCH_SINK"]))
