"""How big is a run's HTML report, and how fast does it open, sort and filter in Chromium?

For N in 1,000 / 5,000 / 100,000 cases it uses the synthetic run of `score_bench.py` (made
once, cached under --workdir: K = 20 chunks per case, chunk text cut to 200 characters,
written by `evalkit.run_eval()`), then:

    write   `write_run_report` in a fresh process: wall time, peak RSS, page size
    open    the page in headless Debian chromium (the browser tests' launcher), a fresh
            context each time: "table drawn" is when the first frame after the case table
            became usable was painted (ms from navigation start); "load" is the load event
    sort    a click on a header until the next frame is painted: latency (numbers),
            then id (text; the first text sort of a column also makes its sort keys)
    filter  the category select set to one category; the search box set to "note 12"
    expand  (new pages) a click on the first question until its chunks are on the page

Each browser figure is the median of --repeat fresh page loads (after one uncounted load
that warms the browser up). Pages written by another
checkout (`--checkout DIR`: its evalkit is imported instead of this one) are measured the
same way, so the numbers before and after a change come from one script; the page before
issue 27 has no "expand" step (its details were inline).

Usage:
    python bench/report_bench.py                            # N = 1000 5000 100000
    python bench/report_bench.py --n 1000 5000 --repeat 5
    git archive <commit> evalkit | tar -x -C /tmp/old && python bench/report_bench.py --checkout /tmp/old --n 1000 5000

Targets (issue 27 item 1): 5,000 cases ≤ 5 MB and usable in ≤ 1 s; 100,000 cases usable
in ≤ 2 s, none cut; a sort or filter of 100,000 rows ≤ 200 ms.
Results: bench/README.md, section "Run report at scale".
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_WRITE_JOB = textwrap.dedent(
    """
    import json, resource, sys, time
    from evalkit.report.html.run import write_run_report
    results, out = sys.argv[1], sys.argv[2]
    t0 = time.perf_counter()
    path = write_run_report("bench", results_dir=results, output=out)
    wall = time.perf_counter() - t0
    print(json.dumps({"wall_s": wall, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
    """
)

# Installed before the page's own script: on each frame, checks whether the case table is
# usable (the new page marks it data-ready; the old one adds class "js" once its rows are
# wired), then notes the time once that frame has been painted.
_READY_HOOK = """
(() => {
  const ready = () => document.querySelector('#cases-table[data-ready]') ||
    (document.documentElement.classList.contains('js') && !document.querySelector('#cases-table[data-virtual]'));
  const tick = () => {
    if (ready()) { setTimeout(() => { window.__tableDrawnAt = performance.now(); }, 0); return; }
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
})();
"""

# A user action and the frame that shows its result: ms from the action to after that paint.
_TIMED = """
async ([kind, arg]) => {
  const frame = () => new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  await frame();
  const t0 = performance.now();
  if (kind === 'sort') {
    const th = [...document.querySelectorAll('#cases-table thead th')].find(th => th.textContent.trim() === arg);
    th.querySelector('button').click();
  } else if (kind === 'select') {
    const s = document.querySelector('select[data-filter-key="category"]');
    s.value = arg; s.dispatchEvent(new Event('change'));
  } else if (kind === 'search') {
    const i = document.querySelector('input[data-filter-for="cases-table"]');
    i.value = arg; i.dispatchEvent(new Event('input'));
  } else if (kind === 'expand') {
    document.querySelector('#cases-table tbody button.expand').click();
    while (!document.querySelector('#cases-table .case-detail ol.chunks')) { await new Promise(r => setTimeout(r, 1)); }
  }
  await frame();
  return performance.now() - t0;
}
"""


def _score_bench():
    spec = importlib.util.spec_from_file_location("score_bench", ROOT / "bench" / "score_bench.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def write(folder: Path, out: Path, checkout: Path | None) -> dict:
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout)
    done = subprocess.run(
        [sys.executable, "-c", _WRITE_JOB, str(folder / "results"), str(out)], capture_output=True, text=True, env=env,
        cwd=str(checkout or ROOT), check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"writing the report failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(browser, url: str, *, expand: bool) -> dict[str, float]:
    """One fresh page load of `url` and the timed actions on it."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.add_init_script(_READY_HOOK)
        page.goto(url, wait_until="load", timeout=600_000)
        page.wait_for_function("window.__tableDrawnAt !== undefined", timeout=600_000)
        out = {
            "drawn_ms": page.evaluate("window.__tableDrawnAt"),
            "load_ms": page.evaluate("performance.getEntriesByType('navigation')[0].loadEventStart"),
        }
        category = page.evaluate("document.querySelector('select[data-filter-key=\"category\"]').options[1].value")
        out["sort_num_ms"] = page.evaluate(_TIMED, ["sort", "latency"])
        out["sort_text_ms"] = page.evaluate(_TIMED, ["sort", "id"])
        out["sort_text2_ms"] = page.evaluate(_TIMED, ["sort", "id"])
        out["filter_ms"] = page.evaluate(_TIMED, ["select", category])
        page.evaluate(_TIMED, ["select", ""])
        out["search_ms"] = page.evaluate(_TIMED, ["search", "note 12"])
        page.evaluate(_TIMED, ["search", ""])
        if expand:
            out["expand_ms"] = page.evaluate(_TIMED, ["expand", ""])
        return out
    finally:
        context.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 5000, 100000])
    ap.add_argument("--repeat", type=int, default=3, help="Fresh page loads per page (medians are shown).")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/evalkit_score_bench"),
                    help="Where the synthetic runs live (shared with score_bench.py).")
    ap.add_argument("--checkout", type=Path, default=None, help="Write the pages with the evalkit under this folder.")
    ap.add_argument("--json", type=Path, help="Also append each row to this JSON-lines file (bench/table.py reads it).")
    args = ap.parse_args()

    from tests.browser import chromium

    why = chromium.missing()
    if why:
        raise SystemExit(f"report_bench: {why}")
    from playwright.sync_api import sync_playwright

    score_bench = _score_bench()
    label = "new" if args.checkout is None else args.checkout.name
    rows = []
    # Made before the browser starts: playwright's sync API runs an event loop, and run_eval
    # (which makes a missing run) cannot start its own inside one.
    folders = {n: score_bench.prepare(n, args.workdir) for n in args.n}
    with sync_playwright() as p:
        browser = chromium.launch(p)
        try:
            for k, n in enumerate(args.n):
                folder = folders[n]
                out = args.workdir / f"report-{label}-{n}.html"
                wrote = write(folder, out, args.checkout)
                if k == 0:  # a first load pays the browser's own warm-up: not counted
                    measure(browser, out.resolve().as_uri(), expand=False)
                runs = [measure(browser, out.resolve().as_uri(), expand=args.checkout is None) for _ in range(args.repeat)]
                med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                rows.append((n, out.stat().st_size / 1e6, wrote, med))
                print(f"  n={n}: {json.dumps({k: round(v, 1) for k, v in med.items()})}", file=sys.stderr)
        finally:
            browser.close()

    if args.json is not None:
        with open(args.json, "a") as f:
            for n, mb, wrote, m in rows:
                f.write(json.dumps({"n": n, "page_mb": mb, "write": wrote, **m}) + "\n")
    print("| N | page MB | write s | write RSS MB | table drawn ms | load ms | sort latency ms | sort id ms (1st / 2nd) "
          "| filter ms | search ms | expand ms |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, mb, wrote, m in rows:
        expand = f"{m['expand_ms']:.0f}" if "expand_ms" in m else "—"
        print(f"| {n:,} | {mb:.2f} | {wrote['wall_s']:.1f} | {wrote['rss_mb']:.0f} | {m['drawn_ms']:.0f} | {m['load_ms']:.0f} "
              f"| {m['sort_num_ms']:.0f} | {m['sort_text_ms']:.0f} / {m['sort_text2_ms']:.0f} | {m['filter_ms']:.0f} "
              f"| {m['search_ms']:.0f} | {expand} |")


if __name__ == "__main__":
    main()
