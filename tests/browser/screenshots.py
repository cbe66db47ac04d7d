"""Make the README's screenshot of the run report, with the browser the tests use.

    python -m tests.browser.screenshots                  # -> docs/report-run.png
    python -m tests.browser.screenshots --out /tmp/x.png --height 1400

Runs the bundled eval set (eval_set.jsonl) against the in-process reference chatbot over
sample_vault/ with the offline heuristic judge (the default run, no network), into a temp
folder; writes its report; opens it in headless system chromium 1400 px wide; saves the top
of the page as a PNG. Needs Debian's chromium and the dev extra (playwright).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.browser import chromium

ROOT = Path(__file__).resolve().parents[2]


def make_run_report(workdir: Path) -> Path:
    """The default run of the bundled sample data, and its report.html."""
    from evalkit.report.html.run import write_run_report
    from tests.support import run_eval_api

    result = run_eval_api(
        eval_set=str(ROOT / "eval_set.jsonl"), vault=str(ROOT / "sample_vault"), results_dir=str(workdir / "results"),
        run_id="sample", quiet=True,
    )
    return write_run_report(result.run_id, results_dir=workdir / "results")


def screenshot(html: Path, out: Path, *, width: int = 1400, height: int = 1500) -> Path:
    """A PNG of the top `height` px of `html` at `width` px."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = chromium.launch(p)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(html.resolve().as_uri(), wait_until="load")
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out), full_page=False)
        finally:
            browser.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "report-run.png")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1500)
    args = parser.parse_args(argv)
    why = chromium.missing()
    if why:
        print(f"screenshots: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        html = make_run_report(Path(tmp))
        print(screenshot(html, args.out, width=args.width, height=args.height))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
