"""Issue 41 item 6, screenshot tests: four studio pages at 1400 and 800 px wide, pixel for pixel
against the PNGs in tests/browser/golden/ (made by this test with EVALKIT_UPDATE_GOLDEN=1).

A screenshot depends on the browser build and the fonts it finds, not only on our HTML and
CSS: the goldens hold for the chromium version and the font set recorded beside them
(golden/studio.json), and the test skips on another one, saying how to make them again. Within
one build the pages are drawn byte-identically (the test checks that first, by shooting each
page twice in fresh browser contexts), so any difference is a change of the layout.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalkit.studio.project import StudioProject
from tests.studio_project import add_second_run, running_studio, write_project

GOLDEN = Path(__file__).parent / "golden"
PAGES = {
    "queue": "/queue?set=eval_set.jsonl&run=r1",
    "case": "/case?set=eval_set.jsonl&id=g-2&run=r1&note=car/Car.md",
    "grade": "/grade?run=r1&id=g-2&grader=ana",
    "pair": "/pair?a=r1&b=r2&id=g-4&reviewer=ana",
}
WIDTHS = (1400, 800)


def _fonts() -> str:
    """A digest of the fonts chromium may draw with (fontconfig's list), or "" without fc-list."""
    if shutil.which("fc-list") is None:
        return ""
    listed = subprocess.run(["fc-list", "--format", "%{file}\\n"], capture_output=True, text=True, check=False, timeout=60).stdout
    return hashlib.sha256("\n".join(sorted(listed.splitlines())).encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # the same folder name in every session: nothing on these pages shows it, but a stable one costs nothing
    root = tmp_path_factory.mktemp("pixels")
    made: dict[str, Path] = {}
    maker = threading.Thread(target=lambda: made.update(write_project(root)))  # asyncio.run away from Playwright's loop
    maker.start()
    maker.join()
    add_second_run(made["results"])
    project = StudioProject([made["eval_set"]], made["vault"], made["results"], root=made["root"])
    with running_studio(project) as url:
        yield url


def _shoot(browser: Any, url: str, path: str, width: int) -> bytes:
    context = browser.new_context(viewport={"width": width, "height": 900}, device_scale_factor=1)
    try:
        page = context.new_page()
        page.goto(url)  # the token becomes this context's cookie
        origin = url.split("/?")[0]
        page.goto(origin + path)
        return page.screenshot(full_page=True, animations="disabled", caret="hide")
    finally:
        context.close()


def test_the_pages_match_their_screenshots(browser: Any, studio: str, tmp_path: Path) -> None:
    build = {"chromium": browser.version, "fonts": _fonts()}
    update = os.environ.get("EVALKIT_UPDATE_GOLDEN") == "1"
    recorded = json.loads((GOLDEN / "studio.json").read_text()) if (GOLDEN / "studio.json").exists() else None
    if not update and recorded != build:
        pytest.skip(f"the studio's screenshots were made with {recorded}, this is {build}: "
                    "EVALKIT_UPDATE_GOLDEN=1 pytest tests/browser/test_studio_pixels.py makes them again (look at them first)")
    changed = []
    for name, path in PAGES.items():
        for width in WIDTHS:
            png = _shoot(browser, studio, path, width)
            assert png == _shoot(browser, studio, path, width), f"{name} at {width} px is not drawn the same twice"
            golden = GOLDEN / f"studio-{name}-{width}.png"
            if update:
                GOLDEN.mkdir(exist_ok=True)
                golden.write_bytes(png)
            elif png != golden.read_bytes():
                (tmp_path / golden.name).write_bytes(png)
                changed.append(f"{golden.name} (now: {tmp_path / golden.name})")
    if update:
        (GOLDEN / "studio.json").write_text(json.dumps(build, indent=2) + "\n")
    assert changed == [], "the layout changed: " + ", ".join(changed)
