"""run_eval.py starts light: --help imports no SDK, no httpx, no numpy."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


# Issue 39 item 5: --help of every script and of `evalkit` builds no pydantic model and loads
# no SDK: what made it cost 0.26-0.37 s of CPU was what it imported (bench/startup_bench.py
# times it; a test says what is loaded, never how long it takes).
_NOT_FOR_HELP = ("pydantic", "evalkit.config", "evalkit.schema", "openai", "anthropic", "httpx", "numpy", "rich",
                 "asyncio", "jinja2", "textual")
_SCRIPTS = sorted(p.name for p in (ROOT / "scripts").glob("*.py"))


def _loaded_by_help(argv0: str, run: str, own: tuple[str, ...] = ()) -> list[str]:
    """What of _NOT_FOR_HELP, and which evalkit.cli modules beyond common, door, main and `own`, are
    loaded once `run` has printed the help. What typer loads to print a bare app's help (one
    option in a help panel, as every evalkit command has) is not counted: typer 0.19
    (pyproject's lower bound) renders help panels through rich."""
    allowed = ("evalkit.cli.common", "evalkit.cli.door", "evalkit.cli.main", *own)
    code = (
        "import atexit, contextlib, io, runpy, sys\nimport typer\n"
        "_bare = typer.Typer(rich_markup_mode=None, add_completion=False)\n"
        "def _one(x: int = typer.Option(0, '--x', rich_help_panel='p')) -> None: ...\n"
        "_bare.command()(_one)\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(BaseException):\n"
        "    _bare(['--help'], prog_name='bare')\n"
        "_by_typer = set(sys.modules)\n"
        f"atexit.register(lambda: print('loaded:', sorted(m for m in sys.modules if m not in _by_typer and (m in {_NOT_FOR_HELP!r}"
        f" or m.startswith('evalkit.cli.') and m not in {allowed!r}))))\n"
        f"sys.argv = [{argv0!r}, '--help']\n{run}\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100", "TERM": "dumb"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1].startswith("loaded: "), out.stdout
    return eval(out.stdout.splitlines()[-1].removeprefix("loaded: "))


@pytest.mark.parametrize("script", _SCRIPTS)
def test_script_help_builds_no_model_and_loads_no_sdk(script: str) -> None:
    # its own cli module may load (label_eval's also validate's, whose helpers it shares)
    own = [f"evalkit.cli.{m}" for m in re.findall(r'^    main\("(\w+)"\)$', (ROOT / "scripts" / script).read_text(), flags=re.M)]
    assert own, script
    own += ["evalkit.cli.validate"] if script == "label_eval.py" else []
    assert _loaded_by_help(f"scripts/{script}", f"runpy.run_path('scripts/{script}', run_name='__main__')", tuple(own)) == []


def test_evalkit_help_imports_no_command_module() -> None:
    # `evalkit --help` lists the commands from COMMANDS; none of their modules is imported
    assert _loaded_by_help("evalkit", "from evalkit.cli.main import app\napp()") == []


def test_evalkit_command_imports_only_its_own_module() -> None:
    code = (
        "import sys\nfrom evalkit.cli.main import app\nsys.argv = ['evalkit', 'export', '--help']\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('evalkit.cli.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert eval(out.stdout.splitlines()[-1]) == ["evalkit.cli.common", "evalkit.cli.export", "evalkit.cli.main"]


def _without_typer(script: str, *args: str) -> subprocess.CompletedProcess:
    # A bare python3: typer is blocked here as an uninstalled package is.
    code = (f"import sys, runpy\nsys.modules['typer'] = None\nsys.argv = {[f'scripts/{script}', *args]!r}\n"
            f"runpy.run_path('scripts/{script}', run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_script_without_evalkits_dependencies_says_what_to_install() -> None:
    # One line naming the missing package and the README's setup, exit 2 (bad input), never a traceback.
    out = _without_typer("run_eval.py", "--eval-set", "eval_set.jsonl")
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("evalkit: typer is not installed in this Python (") and "Traceback" not in out.stderr
    assert "pip install -e '.[dev]'" in out.stderr and out.stdout == ""


@pytest.mark.parametrize("script", ["run_eval.py", "compare_runs.py", "label_eval.py"])
def test_a_scripts_help_without_evalkits_dependencies_is_the_help_typer_prints(script: str) -> None:
    # --help still works (exit 0): the stored help, the very text the app prints on an
    # 80-column terminal, with the line on what to install for running it on stderr.
    out = _without_typer(script, "--help")
    live = subprocess.run([sys.executable, f"scripts/{script}", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert out.returncode == 0 and live.returncode == 0, out.stderr + live.stderr
    assert out.stdout.startswith(f"Usage: {script} [OPTIONS]")
    import json

    import typer

    stored = json.loads((ROOT / "evalkit" / "cli" / "script_help.json").read_text(encoding="utf-8"))
    if stored["typer"] == getattr(typer, "__version__", "?"):  # another typer words and wraps its own way
        assert out.stdout == live.stdout
    assert "typer is not installed" in out.stderr and "Traceback" not in out.stderr
