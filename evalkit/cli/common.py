"""Shared CLI options and the mapping from known errors to exit codes (DESIGN.md §4, §9)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from evalkit.errors import GateFailed, InputError, format_error

RESULTS_DIR = typer.Option(Path("results"), "--results-dir", metavar="PATH", help="Folder holding run folders.")
RUN_ID = typer.Option(..., "--run-id", metavar="RUN_ID", help="Run id (a folder name under --results-dir).")
CONCURRENCY = typer.Option(4, "--concurrency", min=1, metavar="N", help="Requests in flight at once (1 = sequential).")
RPS = typer.Option(None, "--rps", min=0.0, metavar="N", help="At most this many requests per second (default: no limit).")

# The gate's --regression-threshold-* flags, defined once for run_eval and compare_runs: the
# flag, what the threshold bounds, and the default shown (evalkit.compare.gate.Thresholds').
_THRESHOLD_HELP = {
    "recall": "Max absolute drop of Recall@K.",
    "mrr": "Max absolute drop of MRR.",
    "scope_miss": "Max absolute rise of the scope miss rate.",
    "groundedness": "Max drop of mean groundedness (0-5 points).",
    "correctness": "Max drop of mean correctness (0-5 points).",
    "attribution": "Max absolute drop of the attribution hit rate.",
    "abstention": "Max absolute drop of abstention accuracy (unanswerable cases).",
    "hallucination": "Max absolute rise of the hallucination rate on unanswerable cases.",
    "false_abstention": "Max absolute rise of the false-abstention rate on answerable cases.",
}


def regression_threshold_option(name: str, panel: str) -> Any:
    """The `--regression-threshold-<name>` option (None: the gate's default, said in the help)."""
    from evalkit.compare.gate import Thresholds

    default = getattr(Thresholds(), name)
    return typer.Option(
        None, f"--regression-threshold-{name.replace('_', '-')}", min=0.0, metavar="FLOAT",
        help=f"{_THRESHOLD_HELP[name]} (default: {default:g})", rich_help_panel=panel,
    )


def allow_missing_metrics_option(panel: str) -> Any:
    """`--allow-missing-metrics`, for run_eval's --baseline gate and compare_runs' gate (one gate)."""
    return typer.Option(
        None, "--allow-missing-metrics", rich_help_panel=panel,
        help="Pass a gate that could not compare Recall@K or MRR@K (the runs share no K, or one lacks them); "
        "by default such a gate fails, naming the metric.",
    )


def judge_options(panel: str) -> dict[str, Any]:
    """The judge flags, defined once for every script that builds a judge (run_eval,
    judge_answers, score_abstention's LLM classifier): {parameter name: typer.Option}."""
    return {
        "judge_provider": typer.Option(
            None, "--judge-provider", metavar="PROVIDER", rich_help_panel=panel,
            help="openai | anthropic | openai-compatible | heuristic. (default: heuristic unless --judge-model, "
            "--judge-base-url or EVALKIT_JUDGE_* say otherwise)",
        ),
        "judge_model": typer.Option(
            None, "--judge-model", metavar="MODEL", rich_help_panel=panel,
            help="Pinned judge model: a dated snapshot, or name@<hash|build-id> for local servers; "
            "'local' = llama.cpp at 127.0.0.1:8080.",
        ),
        "judge_base_url": typer.Option(
            None, "--judge-base-url", metavar="URL", rich_help_panel=panel,
            help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:11434/v1 (Ollama).",
        ),
        "judge_temperature": typer.Option(
            None, "--judge-temperature", min=0.0, metavar="FLOAT", rich_help_panel=panel,
            help="Judge sampling temperature. (default: 0)",
        ),
    }


EXIT_OK, EXIT_GATE, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
# The run finished but the target failed on more cases than --max-error-rate allows.
EXIT_INCOMPLETE = 3
# An unexpected exception, i.e. a bug (sysexits' EX_SOFTWARE): not 1, which a CI job reads
# as "the gate failed".
EXIT_INTERNAL = 70


def load_dotenv_once() -> None:
    """Read `.env` from the working directory into the environment (never overrides)."""
    try:
        from dotenv import load_dotenv
    except ImportError:  # pragma: no cover - dependency of the package
        return
    load_dotenv(Path.cwd() / ".env", override=False)


@contextmanager
def exit_on_known_errors(resume_hint: str | None = None) -> Iterator[None]:
    """Turn expected failures into exit codes; let everything else crash loudly.

    InputError -> one line per problem on stderr, exit 2.
    OSError (last resort; run folders raise InputErrors) -> one line with the path, exit 2.
    GateFailed -> the regressions, exit 1.
    KeyboardInterrupt -> a resume hint, exit 130.
    Anything else (a bug) -> its traceback, redacted, exit 70.
    Every line is said through print_error, i.e. redacted (no key leaves in an error).
    """
    try:
        yield
    except InputError as e:
        print_error(e)
        raise typer.Exit(EXIT_INPUT) from None
    except OSError as e:
        # Exit 1 means "regression" to CI: a full disk or a bad path must not look like one.
        print_error(e)
        raise typer.Exit(EXIT_INPUT) from None
    except GateFailed as e:
        print_error(e)
        raise typer.Exit(EXIT_GATE) from None
    except KeyboardInterrupt as e:
        print_error(e, resume_hint)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Exception as e:
        if type(e).__module__.startswith(("typer", "click")):
            raise  # typer.Exit from the command body, usage errors: typer says those
        # Python's own traceback could print a key (an SDK's message, a URL); this one is redacted.
        print_error(e)
        raise typer.Exit(EXIT_INTERNAL) from None


def print_error(exc: BaseException, resume_hint: str | None = None) -> None:
    """Say on stderr why the command stopped: `errors.format_error`'s lines (redacted), printable."""
    for line in format_error(exc, resume_hint=resume_hint):
        print(printable(line), file=sys.stderr)


def printable(text: str) -> str:
    """`text` with control characters (ESC, CR, newlines...) shown as escapes such as
    `\\x1b`, so that a user-supplied value cannot drive the terminal."""
    return "".join(c if c.isprintable() or c == "\t" else repr(c)[1:-1] for c in text)


# Flag value names in --help, by parameter name, else by type: click's plain upper-case
# words ("--vault PATH"), not typer's "<list[Path]>" / "<float range>".
_METAVAR_BY_NAME = {
    "api_url": "URL", "judge_base_url": "URL", "target": "SPEC", "run_id": "RUN_ID", "resume": "RUN_ID",
    "baseline": "RUN_ID", "ids": "ID,ID,...", "tag": "TAG", "category": "CATEGORY", "judge_model": "MODEL",
    "spot_check_model": "MODEL", "judge_provider": "PROVIDER", "spot_check_provider": "PROVIDER",
    "host": "HOST", "port": "PORT", "vault_id": "ID", "timeout": "SECONDS", "k": "K", "param": "KEY=VALUE",
}
_METAVAR_BY_TYPE = {"Path": "PATH", "str": "TEXT", "int": "N", "float": "NUMBER"}


def plain_metavars(app: typer.Typer) -> typer.Typer:
    """Give every option of `app`'s commands a plain metavar unless it set one. Returns app."""
    import inspect
    import typing

    for command in app.registered_commands:
        fn = command.callback
        if fn is None:
            continue
        hints = typing.get_type_hints(fn)
        for name, param in inspect.signature(fn).parameters.items():
            info = param.default
            if not isinstance(info, typer.models.OptionInfo | typer.models.ArgumentInfo) or info.metavar is not None:
                continue
            kind = hints.get(name)
            args = [a for a in typing.get_args(kind) if a is not type(None)]
            while args:  # Optional[X] -> X, list[X] -> X
                kind = args[0]
                args = [a for a in typing.get_args(kind) if a is not type(None)]
            type_name = getattr(kind, "__name__", str(kind))
            if type_name == "bool":
                continue
            plain = _METAVAR_BY_NAME.get(name) or _METAVAR_BY_TYPE.get(type_name, "VALUE")
            if isinstance(info, typer.models.ArgumentInfo):
                plain = name.upper()  # positional: its own name, as click shows arguments
            info.metavar = plain
    return app


def emit_scoring(result: Any, printer: str, *, quiet: bool, json_output: bool) -> None:
    """The end of score_retrieval / score_abstention: the tables (report.scoring.<printer>),
    or only the warnings when quiet; then one JSON object on stdout with --json."""
    if not quiet:
        from rich.console import Console

        from evalkit.report import scoring

        getattr(scoring, printer)(result, Console(stderr=json_output))
    elif result.warnings:
        for w in result.warnings:
            print(f"evalkit: warning: {w}", file=sys.stderr)
    if json_output:
        import orjson

        sys.stdout.write(orjson.dumps(result.to_json(), option=orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
