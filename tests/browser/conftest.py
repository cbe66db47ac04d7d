"""Browser fixtures: a Playwright page on the system chromium that records everything a
self-contained, script-safe report must not do.

`report_page` gives a `WatchedPage`: `.page` plus what happened on it: console errors,
uncaught page errors, dialogs (an `alert` means injected script ran: the test fails) and
every request that was not for a file:// URL (all are aborted; a self-contained page
makes none). Without chromium or playwright the tests skip, saying how to install them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.browser import chromium


@dataclass
class WatchedPage:
    page: Any
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def problems(self) -> dict[str, list[str]]:
        """Everything that went wrong so far (empty lists when the page behaved)."""
        return {
            "console errors": self.console_errors, "page errors": self.page_errors,
            "dialogs (script ran)": self.dialogs, "network requests": self.requests,
        }


# Module scope, not session: Playwright's sync API keeps an event loop running in the main
# thread while the browser is open, and later tests (asyncio.run) must not find it.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    why = chromium.missing()
    if why:
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = chromium.launch(p)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def report_page(browser: Any) -> Iterator[WatchedPage]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, java_script_enabled=True)
    page = context.new_page()
    watched = WatchedPage(page)
    page.on("console", lambda m: watched.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: watched.page_errors.append(str(e)))

    def on_dialog(dialog: Any) -> None:
        watched.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    page.on("dialog", on_dialog)

    def on_route(route: Any) -> None:
        url = route.request.url
        if url.startswith("file://"):
            route.continue_()
        else:
            watched.requests.append(url)
            route.abort()

    page.route("**/*", on_route)
    try:
        yield watched
    finally:
        context.close()
