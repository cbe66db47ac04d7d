"""How big is a run's HTML report with real text, how fast is it written, and how fast does it
open, sort and filter in Chromium? Beside the page of a reference evalkit, in the same rounds.

The runs are real text (`real_runs.py`: SciFact abstracts and the obsidian-tasks user guide,
K = 20 chunks of at most 300 characters, stored cut to 200, TF-IDF ranked, one gold support per
case, a fifth never retrieved; written by `run_eval`, made once under --workdir). For each
round, for each run, for the reference and this checkout in alternating order:

    write   `write_run_report` in a fresh process: wall and CPU time (with its forked readers'),
            peak RSS (the largest process), page size, the load average when it ended
    open    the page in headless Debian chromium (the browser tests' launcher), a fresh
            context: "first row" is the first frame painted with a case row in the table
            (the template draws the first rows before any script); "table drawn" the first
            frame painted after the case table became usable; "load" the load event (ms from
            navigation start)
    sort    a click on a header until the next frame is painted: latency (numbers), then id
            (text; the page ships the id column's sort ranks)
    filter  the category select set to one category; the search box set to a word of the corpus
    expand  a click on the first question until its chunks are on the page

Figures are medians over the rounds (after one uncounted load that warms the browser up).
The reference is an evalkit tree (`--reference DIR`, or `--reference-commit C`: `git archive
C evalkit` into the workdir; default REFERENCE, the page before issue 39 item 2); `--no-reference`
measures this checkout only.

Usage:
    python bench/report_bench.py                                  # the runs of RUNS, 3 rounds
    python bench/report_bench.py --runs scifact:5000 --repeat 5
    python bench/report_bench.py --runs scifact:100000 --repeat 2 --json rows.jsonl
    python bench/report_bench.py --runs scifact:100000 --repeat 5 --write-only --reference-commit C   # writing only

Targets (issue 39 item 2): 5,000 real cases ≤ 5 MB with the first row ≤ 1 s; 100,000 cases
written in ≤ 10 s; opening, sort and filter within issue 27's targets (usable ≤ 1 s at 5,000
and ≤ 2 s at 100,000; a sort or filter of 100,000 rows ≤ 200 ms).
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
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The evalkit before issue 39 item 2 (chunk text stored once per 256-case block).
REFERENCE = "9299810"
RUNS = ("scifact:5000", "obsidian-tasks:5000", "scifact:100000")
# A word of each corpus for the search box (a few percent of the questions hold it).
SEARCH = {"scifact": "cancer", "obsidian-tasks": "filter"}

_WRITE_JOB = textwrap.dedent(
    """
    import json, os, resource, sys, time
    from evalkit.report.html.run import write_run_report
    results, out = sys.argv[1], sys.argv[2]
    c0, t0 = time.process_time(), time.perf_counter()
    path = write_run_report("bench", results_dir=results, output=out)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    # the forked readers' CPU too (reaped before write_run_report returns); RSS: the largest process
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    own_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall_s": wall, "cpu_s": cpu + kids.ru_utime + kids.ru_stime, "cpu_readers_s": kids.ru_utime + kids.ru_stime,
                      "rss_mb": max(own_rss, kids.ru_maxrss / 1024), "load": os.getloadavg()[0]}))
    """
)

# Installed before the page's own script: on each frame, notes (once each, after that frame
# has been painted) when a case row is on the page and when the case table is usable (the
# page marks it data-ready).
_READY_HOOK = """
(() => {
  const tick = () => {
    if (window.__firstRowAt === undefined && document.querySelector('#cases-table tbody tr')) {
      window.__firstRowAt = null;
      setTimeout(() => { window.__firstRowAt = performance.now(); }, 0);
    }
    if (document.querySelector('#cases-table[data-ready]')) {
      setTimeout(() => { window.__tableDrawnAt = performance.now(); }, 0);
      return;
    }
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


def _real_runs():
    spec = importlib.util.spec_from_file_location("real_runs", ROOT / "bench" / "real_runs.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def reference_tree(workdir: Path, commit: str) -> Path:
    """`git archive <commit> evalkit` under workdir (made once)."""
    tree = workdir / f"evalkit-{commit}"
    if not (tree / "evalkit" / "__init__.py").exists():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "evalkit"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


def write(folder: Path, out: Path, tree: Path) -> dict:
    """Write the report of folder/results/bench with the evalkit of `tree`, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", _WRITE_JOB, str(folder / "results"), str(out)], capture_output=True,
                          text=True, env=env, cwd=str(tree), check=False)
    if done.returncode != 0:
        raise SystemExit(f"writing the report failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(browser, url: str, search: str) -> dict[str, float]:
    """One fresh page load of `url` and the timed actions on it."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.add_init_script(_READY_HOOK)
        page.goto(url, wait_until="load", timeout=900_000)
        # Polled from here: wait_for_function re-evaluates its predicate with eval() in the page,
        # which the page's CSP refuses (it fails whenever the table is not drawn by the load event).
        deadline = time.monotonic() + 900
        while not page.evaluate("typeof window.__tableDrawnAt === 'number' && typeof window.__firstRowAt === 'number'"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: the case table was not drawn within 900 s")
            time.sleep(0.05)
        out = {
            "first_row_ms": page.evaluate("window.__firstRowAt"),
            "drawn_ms": page.evaluate("window.__tableDrawnAt"),
            "load_ms": page.evaluate("performance.getEntriesByType('navigation')[0].loadEventStart"),
        }
        category = page.evaluate("document.querySelector('select[data-filter-key=\"category\"]').options[1].value")
        out["sort_num_ms"] = page.evaluate(_TIMED, ["sort", "latency"])
        out["sort_text_ms"] = page.evaluate(_TIMED, ["sort", "id"])
        out["sort_text2_ms"] = page.evaluate(_TIMED, ["sort", "id"])
        out["filter_ms"] = page.evaluate(_TIMED, ["select", category])
        page.evaluate(_TIMED, ["select", ""])
        out["search_ms"] = page.evaluate(_TIMED, ["search", search])
        page.evaluate(_TIMED, ["search", ""])
        out["expand_ms"] = page.evaluate(_TIMED, ["expand", ""])
        return out
    finally:
        context.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="+", default=list(RUNS), help="corpus:N of each run (corpus: scifact, obsidian-tasks)")
    ap.add_argument("--repeat", type=int, default=3, help="Rounds (each: every run, reference and this tree alternating).")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/evalkit_real_runs"), help="Where the real-text runs live.")
    ref = ap.add_mutually_exclusive_group()
    ref.add_argument("--reference", type=Path, help="An evalkit tree to write the reference pages with.")
    ref.add_argument("--reference-commit", default=REFERENCE, help="Make the reference tree from this commit.")
    ref.add_argument("--no-reference", action="store_true", help="Measure this checkout only.")
    ap.add_argument("--write-only", action="store_true", help="Write the pages, do not open them (no browser).")
    ap.add_argument("--json", type=Path, help="Also append each measurement to this JSON-lines file (bench/table.py reads it).")
    args = ap.parse_args()

    real_runs = _real_runs()
    runs = [(c, int(n)) for c, n in (r.split(":") for r in args.runs)]
    trees = {"new": ROOT}
    if not args.no_reference:
        trees = {"reference": args.reference or reference_tree(args.workdir, args.reference_commit), "new": ROOT}
    # Made before the browser starts: playwright's sync API runs an event loop, and run_eval
    # (which makes a missing run) cannot start its own inside one.
    folders = {(c, n): real_runs.prepare(c, n, args.workdir) for c, n in runs}
    rows: list[dict] = []

    def rounds(opened: Callable[[Path, str], dict] | None) -> None:
        for round_ in range(args.repeat):
            for corpus, n in runs:
                order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
                for label in order:
                    out = args.workdir / f"report-{label}-{corpus}-{n}.html"
                    wrote = write(folders[(corpus, n)], out, trees[label])
                    m = opened(out, SEARCH[corpus]) if opened else {}
                    row = {"corpus": corpus, "n": n, "tree": label, "round": round_, "page_mb": out.stat().st_size / 1e6,
                           "write": wrote, **m}
                    rows.append(row)
                    print(f"  round {round_} {corpus} n={n} {label}: {row['page_mb']:.2f} MB, write "
                          f"{wrote['wall_s']:.1f} s wall {wrote['cpu_s']:.1f} s CPU (load {wrote['load']:.1f}), "
                          f"{json.dumps({k: round(v) for k, v in m.items()})}", file=sys.stderr)

    if args.write_only:
        rounds(None)
    else:
        from tests.browser import chromium

        why = chromium.missing()
        if why:
            raise SystemExit(f"report_bench: {why}")
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = chromium.launch(p)
            warm = [True]

            def opened(out: Path, search: str) -> dict:
                url = out.resolve().as_uri()
                if warm[0]:  # a first load pays the browser's own warm-up: not counted
                    measure(browser, url, search)
                    warm[0] = False
                return measure(browser, url, search)

            try:
                rounds(opened)
            finally:
                browser.close()

    if args.json is not None:
        with open(args.json, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    print(table(rows))


def table(rows: list[dict]) -> str:
    """Medians per run and tree, and this tree's figures over the reference's (same rounds)."""
    def med(got: list[dict], key) -> float:
        return statistics.median(key(r) for r in got)

    keys = [("page MB", lambda r: r["page_mb"], "{:.2f}"), ("write s", lambda r: r["write"]["wall_s"], "{:.1f}"),
            ("write CPU s", lambda r: r["write"]["cpu_s"], "{:.1f}"), ("write RSS MB", lambda r: r["write"]["rss_mb"], "{:.0f}"),
            ("first row ms", lambda r: r["first_row_ms"], "{:.0f}"), ("table drawn ms", lambda r: r["drawn_ms"], "{:.0f}"),
            ("load ms", lambda r: r["load_ms"], "{:.0f}"), ("sort latency ms", lambda r: r["sort_num_ms"], "{:.0f}"),
            ("sort id ms", lambda r: r["sort_text_ms"], "{:.0f}"), ("filter ms", lambda r: r["filter_ms"], "{:.0f}"),
            ("search ms", lambda r: r["search_ms"], "{:.0f}"), ("expand ms", lambda r: r["expand_ms"], "{:.0f}")]
    if not all("drawn_ms" in r for r in rows):  # --write-only
        keys = keys[:4]
    loads = [r["write"]["load"] for r in rows]
    lines = [f"Load average (1 min) at the writes: {min(loads):.1f}–{max(loads):.1f} on {os.cpu_count()} CPUs; "
             f"medians of {len({r['round'] for r in rows})} rounds.", "",
             "| run | tree | " + " | ".join(k for k, _, _ in keys) + " |", "| --- | --- |" + " ---: |" * len(keys)]
    groups: dict[tuple[str, int], dict[str, list[dict]]] = {}
    for r in rows:
        groups.setdefault((r["corpus"], r["n"]), {}).setdefault(r["tree"], []).append(r)
    for (corpus, n), by_tree in groups.items():
        for label, got in by_tree.items():
            lines.append(f"| {corpus} {n:,} | {label} | " + " | ".join(f.format(med(got, k)) for _, k, f in keys) + " |")
        if "reference" in by_tree and "new" in by_tree:
            ratios = []
            for _, k, _f in keys:
                ref, new = med(by_tree["reference"], k), med(by_tree["new"], k)
                ratios.append(f"{new / ref:.2f}×" if ref else "—")
            lines.append(f"| {corpus} {n:,} | new / reference | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
