"""HTTP API and dashboard of tickwork (``tickwork serve``): ``create_app(app, token=...)``."""

from tickwork.web.app import create_app
from tickwork.web.auth import TokenConfigError

__all__ = ["TokenConfigError", "create_app"]
