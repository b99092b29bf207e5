"""A worker node and its parts (see docs/architecture.md)."""
