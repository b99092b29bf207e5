"""HTTP API and dashboard of tickwork (``tickwork serve``): ``create_app(app, token=...)``."""

from tickwork.http.app import create_app
from tickwork.http.auth import TokenConfigError

__all__ = ["TokenConfigError", "create_app"]
