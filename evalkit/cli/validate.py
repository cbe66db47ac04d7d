"""validate.py: check an eval set before running it, and its gold labels as they age.

The one door for every check of an eval set (`evalkit validate`); `label_eval.py --validate`
/ `--fix` and `evalkit validate-labels` are aliases of `--labels` / `--fix` and call the same
`check_labels` below.

- No flag: the eval set's own validation (JSON, types, a required boolean `answerable`,
  misspelled field names) and, given the corpus (`--vault`, or `--api-url` of a target whose
  /api/v1/index/stats lists its files), every gold anchor against it. Nothing is run and
  nothing is written. Exit 0 clean, 1 an anchor does not match the corpus, 2 the eval set
  itself is invalid (or cannot be read, or bad flags).
- `--labels`: every gold support as the labeler sees it, stale or a warning: against the
  notes (`--vault`, default sample_vault) and, unless `--no-retrieval`, through the target's
  own retrieval (its top `--k` chunks for the question). Exit 1 when a label is stale.
- `--fix`: `--labels`, then anchorcheck's suggested paths written into a new version (after a
  y/N question, or `--yes`). Exit 1 when fixes were declined or stale labels are left.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Optional

import typer

from evalkit.cli.common import (
    EXIT_INPUT,
    PanelledCommand,
    api_url_option,
    categories_option,
    eval_set_option,
    exit_on_known_errors,
    force_option,
    load_dotenv_once,
    plain_metavars,
    printable,
    results_dir_option,
    settings_default,
    target_options,
)

EXIT_ANCHOR_PROBLEMS = 1
EXIT_STALE = 1
DEFAULT_VAULT = Path(settings_default("vault"))

app = typer.Typer(
    rich_markup_mode=None,  # plain usage errors: one readable line, not a box (DESIGN §4)
    add_completion=False,
    help="Validate an eval set, and check its gold anchors (files, heading paths, snippets) against "
    "the corpus when one is given. Runs nothing. With --labels, check every gold support the way the labeler "
    "does, against the notes and the target's retrieval (stale or a warning); --fix writes the suggested paths "
    "into a new version. Exit 0 ok, 1 anchor problems or stale labels, 2 invalid eval set.",
)

_E = "Eval set"
_N = "Notes and target"
_L = "Labels"
_F = "Fix (--fix)"
_TARGET = target_options(_N)


@app.command(cls=PanelledCommand)
def main(
    eval_set: Optional[list[Path]] = eval_set_option(panel=_E),
    categories: Optional[list[str]] = categories_option(_E),
    vault: Optional[Path] = typer.Option(
        None, "--vault", rich_help_panel=_N, help="Notes folder to check anchors against: files, heading chains, "
        "snippets, line spans. With --labels / --fix also the notes the in-process reference chatbot indexes "
        f"(default there: {DEFAULT_VAULT}).",
    ),
    api_url: Optional[str] = api_url_option(
        ": check anchors' files against the `files` list of GET /api/v1/index/stats; with --labels / --fix also the "
        "chatbot asked (POST /api/v1/ask).", _N,
    ),
    target: Optional[str] = _TARGET["target"],
    param: Optional[list[str]] = _TARGET["param"],
    timeout: Optional[float] = typer.Option(
        None, "--timeout", min=1.0, metavar="SECONDS", rich_help_panel=_N,
        help="Seconds per try of a request, all of it: connect, send and the whole answer. (default: 30 for the "
        f"--api-url stats request, {settings_default('timeout'):g} per question with --labels)",
    ),
    retries: Optional[int] = _TARGET["retries"],
    labels: bool = typer.Option(
        False, "--labels", rich_help_panel=_L, help="Check every gold support the way the labeler does: against the notes "
        "and, unless --no-retrieval, the target's top --k chunks for its question; exit 1 when any is stale "
        "(label_eval.py --validate).",
    ),
    no_retrieval: bool = typer.Option(
        False, "--no-retrieval", rich_help_panel=_L, help="--labels: look at the notes only, do not ask the target.",
    ),
    k: Optional[int] = typer.Option(
        None, "--k", min=1, metavar="K", rich_help_panel=_L,
        help="--labels: chunks to ask the target for per question. (default: 50)",
    ),
    fix: bool = typer.Option(
        False, "--fix", rich_help_panel=_F, help="Check the labels (--labels), then write the suggested file and heading "
        "paths into a new version (after a y/N question; label_eval.py --fix).",
    ),
    output: Optional[Path] = typer.Option(
        None, "--output", metavar="PATH", rich_help_panel=_F,
        help="The new version --fix writes. (default: <stem>.v2.jsonl beside the eval set)",
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before writing --fix's new version.", rich_help_panel=_F),
    force: bool = force_option(" (the old file is first copied to <file>.bak, or .bak.1, ... when taken: never lost)", _F),
    results_dir: Path = results_dir_option(_F),
) -> None:
    """Validate EVAL_SET and, with --vault or --api-url, check its gold anchors against the corpus;
    with --labels or --fix, check (and fix) its gold labels against the notes and the target."""
    load_dotenv_once()
    paths = eval_set or [Path(p) for p in settings_default("eval_set")]
    if labels or fix or no_retrieval or k is not None or target is not None or param or retries is not None:
        with exit_on_known_errors():
            from evalkit.errors import BadConfig, Problem

            if categories:
                raise BadConfig(Problem("goes with the eval set check, not --labels / --fix", field="--categories"))
            if not (labels or fix):
                given = next(f for f, v in (("--no-retrieval", no_retrieval), ("--k", k is not None), ("--target", target),
                                            ("--param", param), ("--retries", retries is not None)) if v)
                raise BadConfig(Problem("goes with --labels or --fix", field=given))
        check_labels(
            paths, vault=vault, api_url=api_url, target=target, param=param, timeout=timeout, retries=retries, k=k,
            no_retrieval=no_retrieval, fix=fix, output=output, yes=yes, force=force, results_dir=results_dir,
        )
        return
    with exit_on_known_errors():
        from evalkit.errors import BadConfig, Problem

        for flag, value in (("--output", output), ("--yes", yes), ("--force", force)):
            if value:
                raise BadConfig(Problem("goes with --fix", field=flag))
    _check_eval_set(paths, vault=vault, api_url=api_url, timeout=30.0 if timeout is None else timeout, categories=categories)


def _check_eval_set(
    paths: list[Path], *, vault: Path | None, api_url: str | None, timeout: float, categories: list[str] | None
) -> None:
    """The eval set's own validation and, given a corpus, its anchors; prints and exits 0, 1 or 2."""
    with exit_on_known_errors():
        from evalkit.errors import BadConfig, Problem
        from evalkit.evalset.anchorcheck import (
            corpus_from_index_stats,
            corpus_from_vault,
            validate_eval_set,
        )

        if vault is not None and api_url is not None:
            raise BadConfig(Problem("give --vault or --api-url, not both", field="--vault"))
        corpus, note = None, "anchors not checked: pass --vault PATH or --api-url URL to check them against the corpus"
        if vault is not None:
            corpus = corpus_from_vault(vault)
        elif api_url is not None:
            stats, source = _fetch_stats(api_url, timeout)
            corpus = corpus_from_index_stats(stats, source=source)
            if corpus is None:
                note = (
                    f"anchors not checked: {source} serves no /api/v1/index/stats"
                    if stats is None
                    else f"anchors not checked: {source} does not list its files (no `files` in /api/v1/index/stats)"
                )
        from evalkit.evalset.load import configured_categories

        extra = [p.strip() for c in categories or [] for p in c.split(",") if p.strip()]
        result = validate_eval_set(paths, corpus, extra_categories=[*configured_categories(), *extra] if extra else None)

    order = {f["path"]: i for i, f in enumerate(result.eval_set.files)}
    listed = result.problems + result.anchor_problems + result.warnings
    for problem in sorted(listed, key=lambda p: (order.get(p.path, -1), p.line or 0)):
        print(problem)
    n_cases = len(result.eval_set.cases)
    turns = result.eval_set.turns
    # A conversation's turns are cases (evalset/turns.py): said so, beside the count.
    of = f" ({_n(len(turns), 'turn')} of {_n(len({c for c, _ in turns.values()}), 'conversation')})" if turns else ""
    if result.problems:
        print(f"evalkit: {_n(len(result.problems), 'problem')} in the eval set; fix them before running it")
    if corpus is not None:
        found = len(result.anchor_problems)
        checked = f"{_n(result.n_anchors, 'gold anchor')} of {_n(n_cases, 'case')}{of} checked against {corpus.source}"
        scope = "" if corpus.has_outlines else " (file existence only)"
        print(f"evalkit: {checked}{scope}: " + (_n(found, "problem") if found else "all found"))
    else:
        print(f"evalkit: {note}")
    if result.warnings:
        print(f"evalkit: {_n(len(result.warnings), 'warning')}: rules that scoring cannot check as written")
    if not result.problems and not result.anchor_problems:
        print(f"evalkit: {_n(n_cases, 'case')}{of} OK")
    if result.problems:
        raise typer.Exit(EXIT_INPUT)
    if result.anchor_problems:
        raise typer.Exit(EXIT_ANCHOR_PROBLEMS)


def _fetch_stats(api_url: str, timeout: float) -> tuple[object | None, str]:
    """GET {api_url}/api/v1/index/stats through the HTTP target (same client, retries, key)."""
    import asyncio

    from evalkit.targets.http import HttpTarget, safe_url

    async def fetch() -> object | None:
        target = HttpTarget(api_url, timeout=timeout, retries=1)
        try:
            return await target.index_stats()
        finally:
            await target.aclose()

    return asyncio.run(fetch()), f"target {safe_url(api_url)}"


def check_labels(
    paths: Sequence[Path],
    *,
    vault: Path | None = None,
    api_url: str | None = None,
    target: str | None = None,
    param: list[str] | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    k: int | None = None,
    no_retrieval: bool = False,
    fix: bool = False,
    output: Path | None = None,
    yes: bool = False,
    force: bool = False,
    results_dir: Path = Path("results"),
) -> None:
    """Check every gold support of `paths` against the notes and (unless no_retrieval) the
    target's retrieval, print the issues, and with `fix` write anchorcheck's suggestions into a
    new version. The one implementation of `validate --labels / --fix`, `label_eval.py
    --validate / --fix` and `evalkit validate-labels`. Raises typer.Exit(1) when a label is
    stale (or fixes were declined), exits 2 on bad input."""
    with exit_on_known_errors():
        from evalkit.authoring import labeling
        from evalkit.errors import BadConfig, Problem

        if force and not fix:
            raise BadConfig(Problem("--force replaces an existing --output; only --fix writes one", field="--force"))
        timeout, retries = request_settings(timeout, retries)
        if output is not None and fix and len(paths) != 1:
            raise BadConfig(Problem("--output names one new version; give one --eval-set with it", field="--output"))
        if no_retrieval:
            if vault is None and (api_url or target):
                raise BadConfig(Problem("--no-retrieval needs --vault: nothing else to check the labels against", field="--no-retrieval"))
            validation = labeling.validate_labels(paths, vault=vault or DEFAULT_VAULT)
        else:
            validation = with_target(
                lambda: build_target_from(target, api_url, vault, timeout, retries, param),
                lambda t: labeling.avalidate_labels(paths, vault=vault, target=t, k=k or labeling.DEFAULT_K),
            )
        _print_validation(validation)
        if not fix:
            if not validation.ok:
                raise typer.Exit(EXIT_STALE)
            return

        fixes, left = labeling.plan_fixes(validation)
        if not fixes:
            print("evalkit: nothing --fix can change" + ("; the stale labels above need a person" if left else ""))
            raise typer.Exit(EXIT_STALE if left else 0)
        outputs = _fix_outputs({f.path for f in fixes}, output, results_dir, force=force)
        for f in fixes:
            print(printable(f"fix: {f}"))
        targets = ", ".join(str(p) for p in outputs.values())
        replaced = [p for p in outputs.values() if p.exists()]
        if replaced:
            print(printable("evalkit: --force: replacing " + ", ".join(map(str, replaced)) + " (each is copied to a .bak first)"))
        if not yes and not _confirm(f"Write {len(fixes)} fix(es) to {targets}? [y/N] "):
            print("evalkit: nothing written")
            raise typer.Exit(EXIT_STALE)
        for written in labeling.apply_fixes(fixes, outputs, force=force, on_backup=said_backup):
            print(f"evalkit: wrote {written}; check it with: evalkit validate --labels --eval-set {written}")
    if left:
        for issue in left:
            print(printable(f"not fixed: {issue.problem()}"))
        raise typer.Exit(EXIT_STALE)


def request_settings(timeout: float | None, retries: int | None) -> tuple[float, int]:
    """--timeout and --retries as run_eval takes them: RunSettings' defaults and checks
    (BadConfig naming the flag)."""
    from evalkit.config import build_settings

    settings = build_settings({"timeout": timeout, "retries": retries})
    return settings.timeout, settings.retries


def build_target_from(target: str | None, api_url: str | None, vault: Path | None, timeout: float, retries: int, param: list[str] | None) -> Any:
    """run_eval's target from the flags (the in-process reference chatbot over --vault by default)."""
    from evalkit.targets import build_target, parse_param_options

    return build_target(target=target, api_url=api_url, vault=vault or DEFAULT_VAULT, timeout=timeout, retries=retries, rps=None, params=parse_param_options(param or []))


def with_target(make_target: Callable[[], Any], work: Callable[[Any], Awaitable[Any]]) -> Any:
    """Build the target, run `work` with it, close it: all in one event loop."""
    import asyncio  # not at the top: --help need not load it

    async def go() -> Any:
        t = make_target()
        try:
            return await work(t)
        finally:
            await t.aclose()

    return asyncio.run(go())


def said_backup(path: Path, bak: Path | None) -> None:
    """Say where --force kept the file it replaced."""
    if bak is not None:
        print(printable(f"evalkit: --force: the old {path} is kept as {bak}"))


def _fix_outputs(sources: set[str], output: Path | None, results_dir: Path, *, force: bool = False) -> dict[str, Path]:
    """Where each fixed file goes: --output, else <stem>.v2.jsonl next to it; refused when
    frozen, or taken (unless `force`: then it is replaced, after a copy to a .bak)."""
    from evalkit.authoring import labeling
    from evalkit.errors import BadConfig, Problem

    outputs = {}
    for src in sorted(sources):
        dest = output if output is not None else labeling.next_version_path(src)
        if dest.exists() and dest.resolve() != Path(src).resolve() and not force:
            raise BadConfig(Problem(f"already exists; nothing written: give another --output (e.g. {labeling.next_version_path(dest)}), "
                                    f"or --force to replace it (the old file is kept as {dest.name}.bak)", path=str(dest), field="--output"))
        labeling.check_writable(dest, results_dir, source=src)
        outputs[src] = dest
    return outputs


def _confirm(question: str) -> bool:
    """A y/N question: y or yes is True; n, no, blank or the end of input is False; anything
    else is asked again."""
    while True:
        print(question, end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            print()
            return False
        answer = line.strip().lower() or "n"
        if answer in ("y", "yes", "n", "no"):
            return answer in ("y", "yes")
        print(printable(f"evalkit: answer y or n, got {line.strip()!r}; asked again"))


def _print_validation(v: Any) -> None:
    for issue in v.issues:
        print(printable(str(issue.problem())))
    where = []
    if v.corpus is not None:
        where.append(str(v.corpus.source) + ("" if v.corpus.has_outlines else " (file existence only)"))
    if v.retrieval_k is not None:
        where.append(f"the target's top {v.retrieval_k}")
    n_cases = len(v.eval_set.cases)
    summary = f"evalkit: {v.n_supports} gold supports of {n_cases} cases checked against {' and '.join(where) or 'nothing'}: "
    summary += f"{len(v.stale)} stale, {len(v.warnings)} warnings" if v.issues else "all current"
    print(summary)


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


plain_metavars(app)
