"""Who may call the JSON API: the bearer token on every write, and on every read unless
the server was started with ``--public-read``.

The checks are FastAPI dependencies so that each route declares its rule where it is
defined, and so that ``/openapi.json`` documents the bearer scheme.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tickwork.web.auth import Auth
from tickwork.web.errors import Unauthorized

bearer = HTTPBearer(auto_error=False, scheme_name="token", description="TICKWORK_API_TOKEN, as a bearer token.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]


def guards(auth: Auth) -> tuple[Any, Any]:
    """FastAPI dependencies for reads and for writes (the bearer scheme is declared so
    that ``/openapi.json`` documents it)."""

    def require(request: Request) -> None:
        if not auth.has_token:
            raise Unauthorized("this server has no API token (TICKWORK_API_TOKEN is unset): it authorises nothing")
        header = request.headers.get("authorization")
        if not header:
            raise Unauthorized("missing token: send the header 'Authorization: Bearer <TICKWORK_API_TOKEN>'")
        if not auth.bearer_ok(header):
            raise Unauthorized("invalid token")

    # async: a comparison of digests needs no trip through the thread pool
    async def read(request: Request, _: Credentials) -> None:
        if not auth.public_read:
            require(request)

    async def write(request: Request, _: Credentials) -> None:
        require(request)

    return Depends(read), Depends(write)
