"""The API's strict reading of the URL: typed path and query parameters, and no query
parameter a route does not take.

The dashboard reads what a person typed leniently; this is the interface programs use,
so a mistake is an answer (422) rather than a silently wider result.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Request

from tickwork.errors import InvalidInput
from tickwork.redact import secret_name
from tickwork.urls import MASK
from tickwork.web.schemas import MAX_ID

TaskId = Annotated[int, Path(ge=1, le=MAX_ID, description="The task's id.")]
Limit = Annotated[int, Query(ge=1, le=1000)]


async def known_query(request: Request) -> None:
    """Refuse query parameters the route does not take: a misspelt filter (``?stauts=``)
    must not silently answer with everything."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    allowed = {param.alias for param in getattr(dependant, "query_params", [])}
    for name in request.query_params:
        if name not in allowed:
            choices = ", ".join(sorted(allowed)) or "none"
            if secret_name(name):
                # Never echo what looks like a credential (nor log it: see tickwork.redact).
                raise InvalidInput(
                    name,
                    MASK,
                    "credentials are not taken from the URL (it is logged and kept in histories): "
                    "send the header 'Authorization: Bearer <TICKWORK_API_TOKEN>'",
                )
            raise InvalidInput(
                name, request.query_params[name], f"unknown query parameter (this route takes: {choices})"
            )
