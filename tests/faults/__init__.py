"""The fault-injection suite of issue 13: real worker processes against private servers
(PostgreSQL, Redis) that the tests restart, stop, partition, make read-only or fill up.
Run it with ``pytest tests/faults -m faults -s`` to see each case's figures."""
