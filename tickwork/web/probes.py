"""What load balancers and Prometheus ask: ``/healthz`` and ``/metrics``.

``/healthz`` needs no token, so it tells only whether the service can work, never why in
detail (an error may quote the database URL; the log has it, masked); it is 503 with
Retry-After when the database cannot be reached (answered at once while the server
knows it is away) or its schema is not the one this code knows, so a load balancer
takes the replica out. ``/metrics`` follows the read rule of the API: the task
names it carries are the application's business.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from tickwork.app import App
from tickwork.errors import StoreError
from tickwork.metrics import exposition
from tickwork.web.database import RETRY_AFTER_S, Database, DatabaseUnavailable
from tickwork.web.errors import responses
from tickwork.web.schemas import HealthOut

log = logging.getLogger("tickwork.web")


def router(app: App, read: Any, db: Database) -> APIRouter:
    r = APIRouter(tags=["operations"])

    @r.get(
        "/healthz",
        response_model=HealthOut,
        responses={503: {"model": HealthOut, "description": "Database unreachable or schema not current."}},
        summary="Database reachable and schema current",
    )
    def healthz() -> Response:
        def check() -> int:
            store = app.store
            # migrate() answers the schema's version, applying nothing when it is current,
            # and refuses a schema newer than this code: both are what "current" means.
            version = store.migrate()
            store.queue_depth()  # a real read of the tables
            return version

        try:
            version = db.run(check)
        except DatabaseUnavailable as exc:  # logged by the watcher, once per outage
            state = "starting" if db.state == "starting" else "unreachable"
            return _unhealthy(state, "the database cannot be used now: see the server log", exc.retry_after)
        except StoreError as exc:  # a schema newer than this code
            log.warning("health check failed: %s", exc)
            return _unhealthy("unusable", "the database cannot be used (schema or connection): see the server log")
        except Exception as exc:  # a driver error: the database is not reachable
            log.warning("health check failed: %s", type(exc).__name__)
            return _unhealthy("unreachable", f"database error ({type(exc).__name__}): see the server log")
        return JSONResponse(HealthOut(status="ok", database="reachable", schema_version=version).model_dump())

    @r.get(
        "/metrics",
        dependencies=[read],
        response_class=Response,
        responses={
            200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format."},
            **responses(401),
        },
        summary="Prometheus metrics",
    )
    def metrics() -> Response:
        body, content_type = exposition()
        return Response(body, media_type=content_type)

    return r


def _unhealthy(database: str, reason: str, retry_after: int = RETRY_AFTER_S) -> JSONResponse:
    body = HealthOut(status="unavailable", database=database, reason=reason)
    return JSONResponse(body.model_dump(), status_code=503, headers={"Retry-After": str(retry_after)})
