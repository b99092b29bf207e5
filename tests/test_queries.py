"""Named queries as loaded (store/queries.py): comments and indentation are left out,
quoted text is kept whole, and the hot path's statements stay short enough for
psycopg's cache of converted queries (over 4 KB it converts the text on every run)."""

from __future__ import annotations

from psycopg import _queries

from tickwork.store import queries
from tickwork.store.postgres import PostgresDialect, translate

HOT_PATH = (
    "claim_skip_locked", "claim_cas_batch", "claim_candidates_and_lane", "write_outcomes_batch",
    "write_fresh_outcomes", "renew_batch",
)  # fmt: skip


def test_comments_and_indentation_are_left_out_and_quoted_text_kept() -> None:
    text = """
-- name: one
-- what it does
SELECT a, -- the first
       'x -- not a comment' AS b   -- the second
FROM t;  -- done

-- name: two
SELECT {{one}}
"""
    loaded = queries.parse(text)
    assert loaded["one"] == "SELECT a,\n'x -- not a comment' AS b\nFROM t"
    assert loaded["two"] == "SELECT {{one}}"


def test_the_hot_path_statements_fit_psycopgs_cache_of_converted_queries() -> None:
    texts = queries.load(*PostgresDialect.QUERY_FILES)
    for name in HOT_PATH:
        assert len(translate(texts[name]).encode()) <= _queries.MAX_CACHED_STATEMENT_LENGTH, name
