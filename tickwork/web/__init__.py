"""HTTP API and dashboard of tickwork (``tickwork serve``): ``create_app(app, token=...)``.

Its two names load on first use (PEP 562): the CLI imports light modules of this package
(``tickwork.web.auth`` for its duration parser) and must not pay for FastAPI, Starlette,
pydantic and Jinja2 at every command's start (~0.3 s of CPU) when it serves nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tickwork.web.app import create_app
    from tickwork.web.auth import TokenConfigError

__all__ = ["TokenConfigError", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from tickwork.web.app import create_app

        return create_app
    if name == "TokenConfigError":
        from tickwork.web.auth import TokenConfigError

        return TokenConfigError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
