"""An application module that fails while it is imported (``tests.apps.broken:app``):
the command line must say so in one line, naming APP."""

raise RuntimeError("this module is broken on purpose")
