"""run_eval.py starts light: --help imports no SDK, no httpx, no numpy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


# What made --help slow was what it imported: the test says what --help loads, not how long
# it takes (a loaded machine fails a time limit; timings are bench/'s).
_HELP_LOADS = (
    "import atexit, runpy, sys; "
    "atexit.register(lambda: print('loaded:', [m for m in ('openai', 'anthropic', 'httpx', 'numpy', 'evalkit.run') "
    "if m in sys.modules])); "
    "sys.argv = ['scripts/run_eval.py', '--help']; runpy.run_path('scripts/run_eval.py', run_name='__main__')"
)


def test_help_loads_nothing_heavy_and_lists_the_seed_flags():
    out = subprocess.run(
        [sys.executable, "-c", _HELP_LOADS], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": "200", "TERM": "dumb"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "loaded: []"
    for flag in (
        "--eval-set", "--api-url", "--target", "--vault", "--k", "--folder-mode", "--rerank-vector-weight",
        "--rerank-lexical-weight", "--retrieval-only", "--judge-model", "--judge-provider", "--judge-base-url",
        "--judge-temperature", "--allow-unpinned", "--no-cache", "--output-dir", "--results-dir",
        "--store-full-text", "--concurrency", "--timeout", "--retries", "--rps", "--param", "--limit", "--ids",
        "--tag", "--category", "--run-id", "--resume", "--baseline", "--regression-threshold-recall",
        "--regression-threshold-mrr", "--regression-threshold-scope-miss", "--regression-threshold-groundedness",
        "--allow-regressions", "--require-snippets", "--quiet", "--json", "--seed",
    ):
        assert flag in out.stdout, flag


def test_import_pulls_in_no_sdk_and_no_heavy_library():
    code = (
        "import evalkit.cli.run_eval, sys; "
        "bad = [m for m in ('openai', 'anthropic', 'httpx', 'numpy', 'evalkit.run') if m in sys.modules]; "
        "assert not bad, bad"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_library_import_stays_light():
    code = (
        "import evalkit.run.api, sys; "
        "bad = [m for m in ('openai', 'anthropic', 'httpx', 'rich') if m in sys.modules]; "
        "assert not bad, bad"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_export_import_and_merge_are_callable_from_the_package() -> None:
    # Issue 15 item 6: the Python doors of export / import / merge, loaded on first use.
    import evalkit
    from evalkit.interop.importers import import_cases
    from evalkit.interop.trec import export_trec
    from evalkit.run.merge import merge_runs

    assert (evalkit.export_trec, evalkit.import_cases, evalkit.merge_runs) == (export_trec, import_cases, merge_runs)
    assert {"export_trec", "import_cases", "merge_runs"} <= set(evalkit.__all__)
