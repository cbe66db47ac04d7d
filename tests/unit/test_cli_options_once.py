"""Issue 25 item 9, "CLI options once": a flag several scripts share is declared in one place
(evalkit/cli/common.py) and run_eval's parameters map onto RunSettings by name."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import typer.main

CLI = Path(__file__).resolve().parents[2] / "evalkit" / "cli"
SCRIPTS = [p.stem for p in sorted(CLI.glob("*.py")) if p.stem not in ("__init__", "common", "door", "main", "label_app", "run_matrix")]

# Flags shared by scripts with one meaning: their declaration lives in common.py alone.
SHARED = (
    "--json", "--results-dir", "--concurrency", "--rps", "--max-retry-wait", "--quiet", "--force", "--tolerance",
    "--api-url", "--target", "--param", "--retries", "--vault-id", "--allow-unpinned", "--answer-quality", "--no-cache",
    "--refresh-cache", "--cache-path", "--price-file", "--allow-regressions", "--ignore-invariants",
    "--allow-missing-metrics", "--require-snippets", "--allow-truncated-text", "--eval-set", "--tag", "--category",
)
# Scripts where a flag of the same name means something else, so it keeps its own declaration.
OTHER_MEANING = {
    # the run.trec tag column; a tag added to imported cases, or to promoted ones
    "--tag": {"export.py", "import_cases.py", "promote.py"},
    "--eval-set": {"promote.py"},  # the one file promoted questions are added to, not the set a run reads
    "--category": {"import_cases.py"},  # the category of imported cases
}


def _declared_flags(path: Path) -> set[str]:
    """Every flag name declared in `path`: the strings given to typer.Option(...)."""
    flags = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Option":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-"):
                    flags.update(arg.value.split("/"))
                elif isinstance(arg, ast.JoinedStr):  # f"--regression-threshold-{...}"
                    flags.add("".join(str(v.value) for v in arg.values if isinstance(v, ast.Constant)))
    return flags


@pytest.mark.parametrize("flag", SHARED)
def test_a_shared_flag_is_declared_in_common_only(flag: str) -> None:
    declared_in = {p.name for p in CLI.glob("*.py") if flag in _declared_flags(p)}
    assert declared_in == {"common.py"} | OTHER_MEANING.get(flag, set())


def test_the_declaration_scan_sees_declarations() -> None:
    # the test above would pass on a scan that finds nothing
    assert {"--json", "--results-dir", "--regression-threshold-"} <= _declared_flags(CLI / "common.py")
    assert "--baseline" in _declared_flags(CLI / "run_eval.py")


def _commands() -> dict[str, object]:
    out = {}
    for name in SCRIPTS:
        command = typer.main.get_command(importlib.import_module(f"evalkit.cli.{name}").app)
        subs = getattr(command, "commands", None)
        for sub, cmd in (subs.items() if subs else [(None, command)]):
            out[f"{name} {sub}" if sub else name] = cmd
    return out


def _option(command: object, flag: str) -> object | None:
    return next((p for p in command.params if flag in p.opts), None)  # type: ignore[attr-defined]


def test_json_is_one_option_in_the_scripts_that_print_json() -> None:
    # issue 25 item 9: "--json in 9" declarations; one now, each saying what the object holds
    with_json = {name: _option(cmd, "--json") for name, cmd in _commands().items() if _option(cmd, "--json")}
    assert sorted(with_json) == sorted([
        "cache merge", "check_target", "export", "generate", "index_runs", "judge_answers", "merge", "promote",
        "query_runs", "repro", "run_eval", "score", "score_abstention", "score_retrieval",
    ])
    for name, option in with_json.items():
        assert option.is_flag and option.opts == ["--json"], name
        assert option.help.startswith("Print one JSON object on stdout: "), (name, option.help)
        assert len(option.help) > len("Print one JSON object on stdout: ") + 10, name  # it says what


@pytest.mark.parametrize(
    ("flag", "scripts"),
    [
        ("--results-dir", ["compare_runs", "export", "judge_answers", "label_eval", "merge", "redact", "report", "repro",
                           "score", "score_abstention", "score_retrieval", "validate"]),
        ("--allow-unpinned", ["judge_answers", "score", "score_abstention", "generate"]),
        ("--no-cache", ["judge_answers", "score", "score_abstention", "generate"]),
        ("--cache-path", ["judge_answers", "score", "score_abstention"]),
        ("--price-file", ["judge_answers", "score", "generate"]),
        ("--allow-truncated-text", ["export", "score", "score_retrieval"]),
        ("--require-snippets", ["export", "score", "score_retrieval"]),
        ("--eval-set", ["score", "score_abstention", "score_retrieval"]),
        ("--into", ["merge", "cache merge"]),
    ],
)
def test_a_shared_flag_reads_the_same_in_every_script(flag: str, scripts: list[str]) -> None:
    commands = _commands()
    seen = {(o.help, o.metavar, o.default, tuple(o.opts)) for o in (_option(commands[s], flag) for s in scripts)}
    assert len(seen) == 1, seen


def test_run_eval_and_label_eval_share_the_target_flags() -> None:
    commands = _commands()
    for flag in ("--api-url", "--target", "--param", "--timeout", "--retries"):
        run, label = _option(commands["run_eval"], flag), _option(commands["label_eval"], flag)
        assert (run.help, run.metavar, run.default) == (label.help, label.metavar, label.default), flag
    # only run_eval reads the URL from the environment, as before
    assert _option(commands["run_eval"], "--api-url").envvar == "EVAL_API_URL"
    assert _option(commands["label_eval"], "--api-url").envvar is None


def test_the_literal_defaults_in_common_are_the_library_ones() -> None:
    # common.py keeps a few defaults as literals so that --help need not import pydantic or
    # the judges; each equals the default the library applies.
    import inspect

    from evalkit.cli import common, merge
    from evalkit.config import DEFAULT_RESULTS_DIR, RunSettings
    from evalkit.judges.cache import DEFAULT_CACHE_PATH
    from evalkit.judges.settings import JudgeSettings
    from evalkit.run.repro import repro_run

    judge = common.judge_options("x")
    assert common.RESULTS_DIR.default == Path(DEFAULT_RESULTS_DIR)
    assert judge["cache_path"].default == DEFAULT_CACHE_PATH == merge.CACHE_PATH
    assert judge["timeout"].default == JudgeSettings.timeout
    assert common.CONCURRENCY.default == JudgeSettings.concurrency == RunSettings.model_fields["concurrency"].default
    assert common.max_retry_wait_option("x").default == RunSettings.model_fields["max_retry_wait"].default
    assert common.TOLERANCE == inspect.signature(repro_run).parameters["tolerance"].default


def test_every_run_eval_parameter_is_a_run_setting_or_named_cli_only() -> None:
    # "RunSettings built from them": given_settings maps parameters onto fields by name, so a
    # parameter that is neither a field nor CLI_ONLY would be dropped without a word
    import inspect

    from evalkit.cli.run_eval import CLI_ONLY, FIELD_OF, main
    from evalkit.config import RunSettings

    params = set(inspect.signature(main).parameters)
    fields = set(RunSettings.model_fields)
    assert {FIELD_OF.get(p, p) for p in params - CLI_ONLY} == fields  # and every field has its flag
    assert not CLI_ONLY & fields and CLI_ONLY <= params


def _given(*args: str) -> dict:
    from evalkit.cli.run_eval import app, given_settings

    ctx = typer.main.get_command(app).make_context("run_eval", list(args))
    return given_settings(ctx.params)


def test_flags_not_given_are_not_settings(monkeypatch) -> None:
    # None means "not given": on --resume only given values override the stored run
    monkeypatch.delenv("EVAL_API_URL", raising=False)
    assert _given() == {}
    assert _given("--resume", "r1") == {"resume": "r1"}
    monkeypatch.setenv("EVAL_API_URL", "")  # set but empty: not given, as before
    assert _given() == {}


def test_given_flags_become_their_run_settings(monkeypatch) -> None:
    monkeypatch.delenv("EVAL_API_URL", raising=False)
    values = _given(
        "--eval-set", "a.jsonl", "--eval-set", "dir", "--k", "3", "--k", "10", "--vault", "v", "--param", "a=1",
        "--param", "b=x", "--threshold", "0.7", "--tag", "t", "--ids", "q1,q2", "--output-dir", "out", "--json",
        "--no-cache", "--concurrency", "2", "--regression-threshold-mrr", "0.2", "--shard", "1/4", "--repro",
        "--tolerance", "0.1",
    )
    assert values == {
        "eval_set": ["a.jsonl", "dir"], "k": [3, 10], "vault": "v", "params": {"a": 1, "b": "x"},
        "thresholds": ["0.7"], "tag": ["t"], "ids": "q1,q2", "results_dir": "out", "json_output": True,
        "no_cache": True, "concurrency": 2, "regression_threshold_mrr": 0.2, "shard": "1/4",
    }
    from evalkit.config import build_settings

    settings = build_settings(values)  # and RunSettings takes them as they are
    assert settings.params == {"a": 1, "b": "x"} and settings.ids == ["q1", "q2"] and settings.thresholds


def test_a_bad_setting_is_reported_under_a_flag_run_eval_has() -> None:
    # build_settings names the flag of a refused value (config.flag_of); each one exists
    from evalkit.config import RunSettings, flag_of

    opts = {o for p in _commands()["run_eval"].params for o in p.opts}
    assert {f: flag_of(f) for f in RunSettings.model_fields if flag_of(f) not in opts} == {}
