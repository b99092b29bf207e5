"""Property-based fuzzing of the API from its own OpenAPI schema (schemathesis), with the
token: whatever the input, no answer is a 5xx, and every answer (status code, content
type, body) is one the schema documents. Schema-invalid requests must be refused (4xx).

Bounded for CI: a few dozen examples per operation, on each store.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.http_support import AUTH, TOKEN, make_app
from tickwork import App
from tickwork.web import create_app

EXAMPLES = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture
def fuzzed_app(store_url: str) -> Iterator[App]:
    app = make_app(store_url)  # registers "reports.daily", the name of the schema's example
    # Something to find: the first ids exist, in several states.
    app.schedule("web.ok", delay=3600)
    app.schedule("web.ok", cron="0 9 * * 1-5", timezone="Europe/Berlin")
    app.schedule("web.ok", every=60)
    app.pause(app.schedule("web.ok", delay=60).id)
    app.cancel(app.schedule("web.ok", delay=60).id)
    yield app
    app.close()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_api_answers_as_documented(fuzzed_app: App, mode: GenerationMode) -> None:
    """Each operation of the schema, fuzzed on its own (so none is starved of examples)."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(fuzzed_app, token=TOKEN))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 13
    fuzzed = 0
    for operation in operations:
        cases = operation.as_strategy(generation_mode=mode)
        if mode is GenerationMode.POSITIVE and operation.label == "POST /api/v1/tasks":
            cases = _with_real_names(cases, fuzzed_app)

        @given(case=cases)
        @settings(
            max_examples=EXAMPLES * 3 if operation.label == "POST /api/v1/tasks" else EXAMPLES,
            deadline=None,
            derandomize=True,  # the same examples on every run: a CI failure reproduces
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def fuzz(case: Any) -> None:
            case.call_and_validate(headers=_auth(case, mode), checks=CHECKS)

        try:
            fuzz()
        except Unsatisfiable:
            # An operation without parameters or body has no schema-violating request.
            assert mode is GenerationMode.NEGATIVE, operation.label
            continue
        fuzzed += 1
    assert fuzzed >= (13 if mode is GenerationMode.POSITIVE else 8)


def _auth(case: Any, mode: GenerationMode) -> dict[str, str] | None:
    """The real token, in place of the generated one; none for a negative case whose
    mutation was to leave the required Authorization header out (adding it back would
    make the request valid, and its acceptance look like a missed rejection)."""
    given = {name.lower() for name in (case.headers or {})}
    if mode is GenerationMode.NEGATIVE and "authorization" not in given and _requires_auth(case):
        return None
    return AUTH


def _requires_auth(case: Any) -> bool:
    """The operation's security scheme makes the Authorization header a required parameter."""
    return any(
        p.location.value == "header" and p.name.lower() == "authorization" and p.is_required
        for p in case.operation.iter_parameters()
    )


def _with_real_names(cases: st.SearchStrategy[Any], app: App) -> st.SearchStrategy[Any]:
    """Schedule bodies naming registered tasks half of the time: random names are all
    refused at once, and the rest of the body would never be looked at."""

    def named(pair: tuple[Any, str | None]) -> Any:
        case, name = pair
        if name is not None and isinstance(case.body, dict):
            case.body = {**case.body, "name": name}
        return case

    return st.tuples(cases, st.none() | st.sampled_from(app.registry.names())).map(named)
