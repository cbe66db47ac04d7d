"""Make docs/labeling.md's screenshots of the studio, with the browser the tests use.

    python -m tests.browser.studio_screenshots          # -> docs/studio-case.png, studio-grade.png, studio-pair.png

Runs the bundled eval set (eval_set.jsonl) against the in-process reference chatbot over
sample_vault/ (retrieval only, no network) into a temp folder, serves the studio over a copy of
the eval set, opens a case, an answer to grade, and a case whose answer changed in a second run
(the abstention threshold raised to 0.5) side by side, in headless system chromium 1400 px
wide, and saves the top of each page as a PNG. Needs Debian's chromium and the dev extra.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
from pathlib import Path

from tests.browser import chromium

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    args = parser.parse_args(argv)
    why = chromium.missing()
    if why:
        print(why, file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    from evalkit.studio.project import StudioProject
    from tests.studio_project import running_studio
    from tests.support import run_eval_api

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        eval_set = work / "eval_set.jsonl"
        shutil.copy(ROOT / "eval_set.jsonl", eval_set)
        run = threading.Thread(target=run_eval_api, kwargs=dict(
            eval_set=str(eval_set), vault=str(ROOT / "sample_vault"), results_dir=str(work / "results"), run_id="baseline",
            quiet=True))
        run.start()
        run.join()
        again = threading.Thread(target=run_eval_api, kwargs=dict(
            eval_set=str(eval_set), vault=str(ROOT / "sample_vault"), results_dir=str(work / "results"), run_id="threshold-0.5",
            params={"abstain_threshold": 0.5}, quiet=True))
        again.start()
        again.join()
        project = StudioProject([eval_set], ROOT / "sample_vault", work / "results", root=work)
        with running_studio(project) as url, sync_playwright() as p:
            origin = url.split("/?")[0]
            browser = chromium.launch(p)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(url)
            page.goto(f"{origin}/case?set=eval_set.jsonl&id=sv-021&run=baseline&note=personal/travel/Lisbon%202023.md")
            page.screenshot(path=str(args.out / "studio-case.png"))
            page.goto(f"{origin}/grade?run=baseline&id=sv-001&grader=ana")
            page.screenshot(path=str(args.out / "studio-grade.png"))
            page.goto(f"{origin}/pairs?a=baseline&b=threshold-0.5&reviewer=ana")
            page.locator("[data-queue] tbody a").first.click()
            page.wait_for_load_state()
            page.screenshot(path=str(args.out / "studio-pair.png"))
            browser.close()
    print(f"wrote {args.out / 'studio-case.png'}, {args.out / 'studio-grade.png'} and {args.out / 'studio-pair.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
