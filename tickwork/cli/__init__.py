"""The ``tickwork`` command line: a thin layer over the App's client API.

``main`` is the entry point (``tickwork = "tickwork.cli:main"``). The commands live in
modules by what they do (worker, serve, tasks, reports, admin), the plumbing they share
in ``common``, and ``root`` puts them together.
"""

from tickwork.cli.root import main

__all__ = ["main"]
