"""Launching Debian's system chromium through Python Playwright (never a downloaded browser).

`find_chromium()` says where it is (EVALKIT_CHROMIUM, else `chromium` / `chromium-browser`
on PATH, else /usr/bin/chromium) or why not; `launch(playwright)` starts it headless with
every background network feature off, so that a test sees only the page's own requests.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

SKIP_REASON = "no chromium: install Debian's chromium package (apt-get install chromium) to run the browser tests"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def find_chromium() -> str | None:
    """The chromium executable to use, or None."""
    given = os.environ.get("EVALKIT_CHROMIUM")
    if given:
        return given if Path(given).is_file() else None
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else None


def missing() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return f"{SKIP_REASON}; and the playwright package (pip install -e '.[dev]')"
    return None if find_chromium() else SKIP_REASON


def launch(playwright: Any) -> Any:
    """A headless system chromium (Playwright Browser)."""
    return playwright.chromium.launch(executable_path=find_chromium(), headless=True, args=ARGS)
