"""What a module's import pulls in: the CLI's commands (and a worker started by one) must
not load the web stack or the terminal's rendering before they use them, and the names
made on first use (``tickwork.web``'s, the CLI's console) are still there."""

from __future__ import annotations

import subprocess
import sys

import pytest

WEB_STACK = ("fastapi", "starlette", "pydantic", "jinja2", "uvicorn")


def loaded_after(statement: str) -> set[str]:
    """Top-level packages in sys.modules after ``statement`` ran in a fresh interpreter."""
    code = f"import sys\n{statement}\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return set(done.stdout.split())


@pytest.mark.parametrize("statement", ["import tickwork.cli", "import tickwork.web.auth", "import tickwork"])
def test_the_web_stack_stays_unloaded(statement: str) -> None:
    assert not loaded_after(statement) & set(WEB_STACK)


def test_the_cli_loads_rich_only_to_print() -> None:
    assert "rich" not in loaded_after("import tickwork.cli")
    assert "rich" in loaded_after("from tickwork.cli import common; common.console.width")


def test_the_web_package_still_gives_its_names() -> None:
    loaded = loaded_after("from tickwork.web import TokenConfigError, create_app; assert callable(create_app)")
    assert "fastapi" in loaded
    import tickwork.web

    with pytest.raises(AttributeError, match="no_such_name"):
        tickwork.web.no_such_name  # noqa: B018
