"""Make the README's screenshots of the compare page and the trend page.

    python -m tests.browser.screenshots_compare_trend          # -> docs/report-compare.png, docs/report-trend.png
    python -m tests.browser.screenshots_compare_trend --out-dir /tmp/shots
    python -m tests.browser.screenshots_compare_trend --only trend   # -> docs/report-trend.png only

Runs the bundled sample data (eval_set.jsonl, then eval_set_sanity.jsonl) against the
in-process reference chatbot over sample_vault/ with the offline heuristic judge, five runs
into a temp folder: a baseline, the abstention threshold raised to 0.5 (README, "Comparing
two runs"), a run on the sanity eval set, the threshold lowered to 0.3, and a `--limit 4`
try of it (a partial run: the trend draws it apart). Writes each run's report, the compare
page of the first two and the trend page, and saves the top of each as a PNG (1400 px wide)
with the browser the tests use (Debian's chromium, the dev extra's playwright).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.browser import chromium
from tests.browser.screenshots import ROOT, screenshot

RUNS = (
    ("run1-baseline", "eval_set.jsonl", {}, None),
    ("run2-abstain-05", "eval_set.jsonl", {"abstain_threshold": 0.5}, None),
    ("run3-sanity", "eval_set_sanity.jsonl", {}, None),
    ("run4-abstain-03", "eval_set.jsonl", {"abstain_threshold": 0.3}, None),
    ("run5-limit-4", "eval_set.jsonl", {"abstain_threshold": 0.3}, 4),
)


def make_pages(workdir: Path) -> tuple[Path, Path]:
    """The sample runs, their reports, and (compare page, trend page)."""
    import time

    from evalkit.report.html.run import write_run_report
    from evalkit.report.html.compare import write_compare_report
    from evalkit.report.html.trend import write_trend_report
    from tests.support import run_eval_api

    results = workdir / "results"
    for run_id, eval_set, params, limit in RUNS:
        run_eval_api(eval_set=str(ROOT / eval_set), vault=str(ROOT / "sample_vault"), results_dir=str(results), run_id=run_id,
                     params=params, limit=limit, quiet=True)
        write_run_report(run_id, results_dir=results)
        time.sleep(1.1)  # created_at has whole seconds: keep the runs apart in time
    compare = write_compare_report(RUNS[0][0], RUNS[1][0], results_dir=results)
    return compare, write_trend_report(results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=ROOT / "docs")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1500)
    parser.add_argument("--only", choices=("compare", "trend"), help="write only this page's PNG")
    args = parser.parse_args(argv)
    why = chromium.missing()
    if why:
        print(f"screenshots: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="evalkit-shots-") as tmp:
        compare, trend = make_pages(Path(tmp))
        for page, name in ((compare, "report-compare.png"), (trend, "report-trend.png")):
            if args.only and not name.endswith(f"-{args.only}.png"):
                continue
            out = screenshot(page, args.out_dir / name, width=args.width, height=args.height)
            print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
