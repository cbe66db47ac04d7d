"""Shared CLI options and the mapping from known errors to exit codes (DESIGN.md §4, §9)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

from evalkit.defaults import DEFAULT_RESULTS_DIR, default_of
from evalkit.errors import GateFailed, InputError, format_error

# Help panels several scripts share: `--help` lists options by task under these titles
# (PanelledCommand below; typer's own panels need its rich help, which we turn off).
PANEL_TARGET = "Target"
PANEL_SELECTION = "Selection"
PANEL_SCORING = "Scoring"
PANEL_JUDGE = "Judge"
PANEL_GATE = "Regression gate"
PANEL_OUTPUT = "Output"


class PanelledCommand(TyperCommand):
    """A command whose plain `--help` lists its options in one section per `rich_help_panel`,
    in order of first use, as typer's rich help does; options without a panel go under
    "Options". Plain because the apps keep rich_markup_mode=None (usage errors as one line)."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments: list[tuple[str, str]] = []
        sections: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append(record)
            else:
                sections.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(record)
        for title, rows in ([("Arguments", arguments)] if arguments else []) + list(sections.items()):
            with formatter.section(title):
                formatter.write_dl(rows)


def settings_default(field: str) -> Any:
    """RunSettings' default of `field` (a fresh copy of a list), from evalkit.defaults, where
    RunSettings reads it too: --help does not build the pydantic models."""
    return default_of(field)


def run_default(field: str, *, show: Callable[[Any], str] | None = None) -> str:
    """'(default: X)' with X RunSettings' default of `field`, for a help text; '' when the
    default is None, False or empty (nothing to say). `show` formats X (default: a list of
    one item as the item, several comma-separated, floats without trailing zeros).

    The one place help texts read run defaults from: a default changed in evalkit.config
    changes every help that shows it.
    """
    value = settings_default(field)
    if value is None or value is False or value == [] or value == {}:
        return ""
    if show is not None:
        text = show(value)
    elif isinstance(value, list):
        text = ", ".join(str(v) for v in value)
    elif isinstance(value, float):
        text = f"{value:g}"
    else:
        text = str(value)
    return f"(default: {text})"


def run_setting(option: Any, field: str | None = None, *, show: Callable[[Any], str] | None = None) -> Any:
    """`option` as a run_eval flag for RunSettings' `field` (default: the first flag's name,
    `-` -> `_`): None when not given, so that on --resume only given values override the
    stored run, with RunSettings' default said at the end of its help. Returns option."""
    field = field or option.param_decls[0].lstrip("-").replace("-", "_")
    option.default = None
    shown = run_default(field, show=show)
    if shown:
        option.help = f"{option.help} {shown}"
    return option


def run_id_option(panel: str | None = None) -> Any:
    """`--run-id` of the scripts that work on one stored run (required)."""
    return typer.Option(..., "--run-id", metavar="RUN_ID", help="Run id (a folder name under --results-dir).", rich_help_panel=panel)


RUN_ID = run_id_option()


def results_dir_option(panel: str | None = None, *aliases: str) -> Any:
    """`--results-dir`, the folder of run folders (run_eval also takes --output-dir)."""
    return typer.Option(
        Path(DEFAULT_RESULTS_DIR), "--results-dir", *aliases, metavar="PATH", help="Folder holding run folders.", rich_help_panel=panel,
    )


RESULTS_DIR = results_dir_option()

EVAL_SET_HELP = "Eval set: a .jsonl file or a folder of per-domain .jsonl files; repeatable."


def eval_set_option(help: str = EVAL_SET_HELP, panel: str | None = None) -> Any:
    """`--eval-set` of the scripts that read an eval set (run_eval, validate, label_eval):
    None when not given, the default (RunSettings') said in the help."""
    return typer.Option(None, "--eval-set", metavar="PATH", help=f"{help} {run_default('eval_set')}", rich_help_panel=panel)


def concurrency_option(what: str = "Requests", panel: str | None = None) -> Any:
    """`--concurrency`: how many of `what` are in flight at once."""
    # JudgeSettings' and RunSettings' 4 (run_eval shows RunSettings'); a test holds them equal.
    return typer.Option(
        4, "--concurrency", min=1, metavar="N", help=f"{what} in flight at once (1 = sequential).", rich_help_panel=panel,
    )


CONCURRENCY = concurrency_option()


def rps_option(panel: str | None = None) -> Any:
    """`--rps`, the request rate limit of the target (run_eval) or the judge (judge_answers)."""
    return typer.Option(
        None, "--rps", min=0.0, metavar="N", help="At most this many requests per second (default: no limit).",
        rich_help_panel=panel,
    )


RPS = rps_option()


def max_retry_wait_option(server: str, panel: str | None = None) -> Any:
    """`--max-retry-wait`, the cap on a Retry-After honoured from `server`."""
    # RunSettings' 60 (run_eval shows it from there); a test holds them equal.
    return typer.Option(
        60.0, "--max-retry-wait", min=0.0, metavar="SECONDS", rich_help_panel=panel,
        help=f"Longest wait honoured when {server} answers 429/503 with Retry-After; a longer request is cut to this.",
    )


def quiet_option(prints: str | None = None, panel: str | None = None) -> Any:
    """`--quiet` / `-q`: no progress bar or tables; `prints` says what is printed instead."""
    return typer.Option(
        False, "--quiet", "-q", rich_help_panel=panel,
        help="No progress bar or tables" + (f"; print {prints}." if prints else "."),
    )


def json_option(what: str, panel: str | None = None) -> Any:
    """`--json`, defined once for every script that can print its result as JSON.

    Args:
        what: what the object holds and where the people-facing output goes, e.g.
            "run_id, run_dir, aggregate_metrics, gate; printed last, the tables go to stderr".
        panel: the help panel.
    """
    return typer.Option(False, "--json", help=f"Print one JSON object on stdout: {what}.", rich_help_panel=panel)


def force_option(also: str = "", panel: str | None = None) -> Any:
    """`--force`: overwrite --output (and whatever else `also` names) when it exists."""
    return typer.Option(False, "--force", help=f"Overwrite --output{also} when it exists.", rich_help_panel=panel)


def api_url_option(purpose: str, panel: str | None = None, envvar: str | None = None) -> Any:
    """`--api-url`, the chatbot's base URL; `purpose` says what the script does with it."""
    return typer.Option(
        None, "--api-url", metavar="URL", envvar=envvar, help=f"Chatbot API base URL{purpose}", rich_help_panel=panel,
    )


def target_options(panel: str, *, api_url_envvar: str | None = None, vault_help: str | None = None) -> dict[str, Any]:
    """The flags that say which chatbot answers and how it is asked, defined once for the
    scripts that build a target (run_eval, label_eval): {parameter name: typer.Option}.

    Each is None when not given and resolves through RunSettings, whose defaults the help
    shows. run_eval also reads --api-url from the environment (api_url_envvar).
    """
    return {
        "api_url": api_url_option(
            " (POST /api/v1/ask). Without it and --target, the in-process reference chatbot over --vault answers.",
            panel, api_url_envvar,
        ),
        "target": typer.Option(
            None, "--target", metavar="SPEC", rich_help_panel=panel,
            help="python:package.module:function, replay:path.jsonl or an http(s) URL.",
        ),
        "vault": typer.Option(
            None, "--vault", metavar="PATH", rich_help_panel=panel,
            help=f"{vault_help or 'Notes folder of the in-process reference chatbot (no --api-url/--target).'} "
            f"{run_default('vault')}",
        ),
        "param": typer.Option(
            None, "--param", metavar="KEY=VALUE", rich_help_panel=panel,
            help="Free option sent in the request's `options`, key=value (JSON values parsed); repeatable.",
        ),
        "timeout": typer.Option(
            None, "--timeout", metavar="SECONDS", rich_help_panel=panel,
            help=f"Seconds per try of a request, all of it: connect, send and the whole answer. {run_default('timeout')}",
        ),
        "retries": typer.Option(
            None, "--retries", min=0, metavar="N", rich_help_panel=panel,
            help=f"Retries on connection errors, 429 and 5xx (backoff + jitter). {run_default('retries')}",
        ),
    }


def vault_id_option(panel: str | None = None, *, from_eval_set: bool = True) -> Any:
    """`--vault-id`: the vault id the reference chatbot serves, part of every chunk id
    (run_eval, check-target, serve_reference; only the first two read an eval set)."""
    default = ("the eval set's one vault under --send-scope vaults/both, else the folder's name" if from_eval_set
               else "the vault folder's name")
    return typer.Option(
        None, "--vault-id", metavar="ID", rich_help_panel=panel,
        help=f"The vault id the reference chatbot over --vault serves: part of every chunk id; a request naming "
        f"another vault gets 400. (default: {default})",
    )


def selection_options(panel: str, *, ids_help: str = "Comma-separated case ids to run.") -> dict[str, Any]:
    """Which cases: --ids, --tag, --category (run_eval; label_eval's labeler and
    judge_answers take some of them). {parameter name: typer.Option}."""
    return {
        "ids": typer.Option(None, "--ids", metavar="ID,ID,...", help=ids_help, rich_help_panel=panel),
        "tag": typer.Option(None, "--tag", metavar="TAG", help="Only cases with this tag; repeatable (OR).", rich_help_panel=panel),
        "category": typer.Option(
            None, "--category", metavar="CATEGORY", help="Only cases of this category; repeatable (OR).", rich_help_panel=panel,
        ),
    }


def k_option(note: str = "", panel: str | None = None, *, rescore: bool = False) -> Any:
    """`--k`, the metrics' cut-offs (run_eval, score_retrieval); `note` adds the script's limits.
    A re-scoring's --k only adds cut-offs: its primary K stays the run's (`--primary-k`)."""
    first = "never changes the run's primary K (see --primary-k)" if rescore else "the first is the primary K"
    return typer.Option(
        None, "--k", metavar="K", rich_help_panel=panel,
        help=f"Cut-off K; repeatable, {first}." + (f" {note}" if note else ""),
    )


def require_snippets_option(panel: str | None = None, *, rescore: bool = False) -> Any:
    """`--require-snippets`: run_eval's matching rule; the re-scoring scripts can also turn
    it off (`--no-require-snippets`) and default to the run's setting."""
    text = "A chunk matches a gold support only if it contains the gold snippets."
    if rescore:
        return typer.Option(
            None, "--require-snippets/--no-require-snippets", help=f"{text} (default: the run's setting)", rich_help_panel=panel,
        )
    return typer.Option(None, "--require-snippets", help=text, rich_help_panel=panel)


def trec_run_options(panel: str | None = None) -> dict[str, Any]:
    """The flags that score a TREC run file (`score_retrieval --trec-run`, `evalkit score --trec-run`):
    `evalkit.interop.trec_run` reads them. New objects per call, so each command lists them under its panel."""
    return {
        "trec_run": typer.Option(
            None, "--trec-run", metavar="PATH", rich_help_panel=panel, help="Score this TREC run file (qid Q0 docno "
            "rank score tag) against --qrels instead of a stored run: sorted by score, then docno descending, as "
            "trec_eval sorts. --k: the cut-offs (default: 10 and the longest ranking).",
        ),
        "qrels": typer.Option(
            None, "--qrels", metavar="PATH", rich_help_panel=panel, help="--trec-run: the qrels (qid 0 docno rel; `#` "
            "comment lines skipped); repeatable.",
        ),
        "relevance_level": typer.Option(
            None, "--relevance-level", metavar="L", rich_help_panel=panel, help="--trec-run: a grade >= L is relevant "
            "(trec_eval -l); a grade in (0, L) counts for nDCG only. (default: every grade > 0, trec_eval's -l 1 on "
            "integer grades)",
        ),
        "gain": typer.Option(
            None, "--gain", metavar="exponential|linear", rich_help_panel=panel, help="--trec-run: nDCG's gain, 2^rel - 1 "
            "(exponential) or rel (linear, trec_eval's ndcg_cut); equal on binary grades. (default: exponential, "
            "evalkit's everywhere)",
        ),
        "no_relevant": typer.Option(
            None, "--no-relevant", metavar="skip|zero", rich_help_panel=panel, help="--trec-run: a judged query with no "
            "relevant document is left out of every mean (skip) or counts 0 on every metric (zero, as trec_eval and "
            "ir_measures). (default: skip, evalkit's rule for a case without gold supports)",
        ),
        "per_query": typer.Option(
            False, "--per-query", rich_help_panel=panel, help="--trec-run: each query's values too (trec_eval -q).",
        ),
    }


def score_trec_file(
    trec: dict[str, Any], *, run_id: str | None, k: list[int] | None, quiet: bool, json_output: bool
) -> bool:
    """The `--trec-run RUN --qrels Q` door of score_retrieval and `evalkit score` (`trec`: the values of
    `trec_run_options`' flags by name): print the table (stderr with --json) and, with --json, the object;
    True when it scored a run file. False when no TREC flag was given (the caller scores RUN_ID, which it
    then needs). Exit 2 for a TREC flag without --trec-run, --trec-run with --run-id, or bad files."""
    import json
    import sys

    with exit_on_known_errors():
        from evalkit.errors import BadConfig, Problem

        given = [f"--{name.replace('_', '-')}" for name, v in trec.items() if v not in (None, False, [])]
        if trec["trec_run"] is None:
            if given:
                raise BadConfig(Problem("goes with --trec-run RUN (a TREC run file to score)", field=given[0]))
            if run_id is None:
                raise BadConfig(Problem("pass --run-id RUN_ID (or --trec-run RUN --qrels QRELS)", field="--run-id"))
            return False
        if not trec["qrels"]:
            raise BadConfig(Problem("--trec-run needs --qrels PATH", field="--qrels"))
        if run_id is not None:
            raise BadConfig(Problem("--trec-run scores a run file, not a stored run: drop --run-id", field="--run-id"))
        from evalkit.interop.trec_run import read_trec_run, score_trec_run

        run = read_trec_run(trec["trec_run"])
        # Default cut-offs: 10 and the longest ranking, where map, rprec, mrr and ndcg are trec_eval's uncut ones.
        depth = max((len(r) for r in run.rankings.values()), default=10)
        ks = list(k) if k else sorted({10, max(depth, 1)})
        scores = score_trec_run(
            run, trec["qrels"], ks=ks, relevance_level=trec["relevance_level"], gain=trec["gain"] or "exponential",
            no_relevant=trec["no_relevant"] or "skip",
        )
    per_query = trec["per_query"]
    out = sys.stderr if json_output else sys.stdout
    for w in scores.warnings:
        print(printable(f"evalkit: warning: {w}"), file=sys.stderr)
    if not quiet:
        print(trec_table(scores), file=out)
    if per_query and not json_output:
        for qid, values in scores.per_query.items():
            for key, block in values.items():
                for m, v in block.items():
                    if v is not None:
                        print(printable(f"{m}@{key}\t{qid}\t{v:.4f}"), file=out)
    if json_output:
        print(json.dumps(scores.to_json(per_query=per_query), ensure_ascii=False))
    return True


def trec_table(scores) -> str:  # noqa: ANN001 - TrecScores, imported lazily
    """The means as a table: evalkit's name, the trec_eval measures it equals (— none: a cut-off trec_eval
    lacks, or exponential nDCG), the value and its n; one row per metric and K."""
    from evalkit.interop.trec_run import TREC_METRICS, trec_eval_names

    rows = [("metric", "trec_eval", "value", "n")]
    for k in scores.ks:
        for m in TREC_METRICS:
            v = scores.means[str(k)][m]
            name = " = ".join(trec_eval_names(m, k, scores.depth, scores.gain)) or "—"
            rows.append((f"{m}@{k}", name, "—" if v is None else f"{v:.4f}", str(scores.n[str(k)][m])))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    head = (f"{scores.n_queries} queries; gain {scores.gain}; relevance level "
            f"{scores.relevance_level if scores.relevance_level is not None else '> 0'}; no relevant: {scores.no_relevant}")
    lines = [head] + ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
                      for r in rows]
    return "\n".join(lines)


def rescore_options() -> dict[str, Any]:
    """The flags of the scripts that re-read a stored run's records (score_retrieval,
    score_abstention, export): which eval set and which matching rule to score them with."""
    return {
        "eval_set": typer.Option(
            None, "--eval-set", metavar="PATH",
            help="Score against this eval set (file or folder; repeatable), even if it changed since the run. "
            "(default: the one config.json names, which must be unchanged)",
        ),
        "require_snippets": require_snippets_option(rescore=True),
        "allow_truncated_text": typer.Option(
            False, "--allow-truncated-text",
            help="With snippets required on a run stored without --store-full-text, match them on the 200-char "
            "texts anyway (snippet-based numbers are then upper bounds).",
        ),
    }


# --tolerance's default: repro_run's (evalkit.run.repro), which --help must not import.
TOLERANCE = 0.0


def tolerance_option(panel: str | None = None, *, with_repro: bool = False) -> Any:
    """`--tolerance` of the reproducibility check (`evalkit reproduce`, or run_eval's --repro when
    with_repro: then None when not given, since it goes with --repro only)."""
    text = "Largest |b - a| of a per-case metric that is not a difference (a chunk's score_final: at least 1e-10)."
    if with_repro:
        return typer.Option(
            None, "--tolerance", min=0.0, metavar="FLOAT", rich_help_panel=panel,
            help=f"With --repro: {text[0].lower()}{text[1:]} (default: {TOLERANCE:g})",
        )
    return typer.Option(TOLERANCE, "--tolerance", min=0.0, metavar="FLOAT", help=text, rich_help_panel=panel)


# The gate's --regression-threshold-* flags, defined once for run_eval and compare_runs: the
# flag, what the threshold bounds, and the default shown (evalkit.gate.thresholds.Thresholds').
def _threshold_help() -> dict[str, str]:
    """{gate threshold name: its help}, from the registry: the metric each one watches, by its label."""
    from evalkit.metrics.registry import METRICS, label_of

    # Recall@K (any) is the hit rate; seed 001's "recall" is another metric (issue 30).
    notes = {"recall": " The hit rate; seed 001's recall is --regression-threshold recall_frac=0.05."}
    return {
        m.gated: f"Max {'drop' if m.direction == 'higher' else 'rise'} of {label_of(m.key)}"
        f"{', in points' if m.scale != 1.0 else ' (absolute)'}.{notes.get(m.gated, '')}"
        for m in METRICS
        if m.gated
    }


_THRESHOLD_HELP = _threshold_help()
THRESHOLD_NAMES = tuple(_THRESHOLD_HELP)


def regression_threshold_option(name: str, panel: str) -> Any:
    """The `--regression-threshold-<name>` option (None: the gate's default, said in the help)."""
    from evalkit.gate.thresholds import Thresholds

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


def gate_options(panel: str) -> dict[str, Any]:
    """The regression gate's flags, defined once for its two doors (run_eval --baseline and
    compare_runs): {parameter name: typer.Option}, each None when not given."""
    from evalkit.gate.thresholds import DEFAULT_MIN_SLICE_N

    options = {
        "allow_regressions": typer.Option(
            None, "--allow-regressions", rich_help_panel=panel,
            help="Report a failed gate (regressions, nothing comparable, broken invariants) but exit 0.",
        ),
        "ignore_invariants": typer.Option(
            None, "--ignore-invariants", rich_help_panel=panel,
            help="Compare with a run that breaks an invariant (another eval set version or case count, another "
            "judge), refused by default; the report marks what is not comparable.",
        ),
        "allow_missing_metrics": allow_missing_metrics_option(panel),
        "allow_label_change": typer.Option(
            None, "--allow-label-change", rich_help_panel=panel,
            help="Compare with a run that holds the same cases (ids and questions) scored with other gold labels "
            "(a re-score with score_retrieval --eval-set relabelled.jsonl), refused by default; a warning then says "
            "the deltas mix the label change with the chatbot's.",
        ),
        "same_corpus": typer.Option(
            None, "--same-corpus", rich_help_panel=panel,
            help="The runs must have searched the same notes and index: a changed index version, document or "
            "chunk count or coverage (the targets' index stats) is a broken invariant (exit 2 unless "
            "--ignore-invariants), not only a warning; a target without index stats breaks it too.",
        ),
    }
    for name in THRESHOLD_NAMES:
        options[f"regression_threshold_{name}"] = regression_threshold_option(name, panel)
    options["regression_threshold"] = typer.Option(
        None, "--regression-threshold", metavar="NAME=VALUE", rich_help_panel=panel,
        help="Gate any metric: the largest allowed worsening of NAME, absolute, on the metric's own scale "
        "(direction from the metric registry); repeatable. NAME: a metrics.json key (recall_frac_avg, error_rate), "
        "an @K metric (recall_frac: at the gate's K; recall_frac@10) or ir_measures' (R@10); a gated one's name "
        "sets its --regression-threshold-* (and wins over it). VALUE: 0.05 or 5% (= 0.05 absolute, as seed 000 "
        "reads its thresholds; seed 001's 'drop > X%' is a share of the baseline's value: compare_runs "
        "--gate-preset bob).",
    )
    options["gate_by"] = typer.Option(
        None, "--gate-by", metavar="GROUPING", rich_help_panel=panel,
        help="Apply every threshold within each slice of GROUPING too (domain, category, tag, difficulty, "
        "answerable, language, scenario), over slices both runs have; a regression names its slice "
        "(recall_frac_avg in domain:install). Repeatable.",
    )
    options["gate_min_n"] = typer.Option(
        None, "--gate-min-n", min=1, metavar="N", rich_help_panel=panel,
        help="With --gate-by: a slice whose n for a metric is below N is not gated on it, and listed as skipped "
        f"(a one-case slice is a flip: --fail-on-flip). (default: {DEFAULT_MIN_SLICE_N})",
    )
    return options


def categories_option(panel: str | None = None) -> Any:
    """`--categories`: categories an eval set may use beyond the built-in ones (validate, run_eval)."""
    return typer.Option(
        None, "--categories", metavar="A,B", rich_help_panel=panel,
        help="Categories the eval set may use beyond the built-in ones (e.g. seed 001's installation,configuration,"
        "usage,troubleshooting,api); repeatable. Also declared by [eval_set] categories in evalkit.toml, in the "
        "working directory or beside the eval set file.",
    )


def rejudge_options(*, judge: str, reliability: str, batch: str, answers: str) -> dict[str, Any]:
    """The flags of judging a stored run's answers, defined once for judge_answers.py and
    `evalkit score --answers` (each lists them under its own panels): {parameter name:
    typer.Option}."""
    return {
        "allow_truncated_context": typer.Option(
            False, "--allow-truncated-context", help="Judge chunk text cut to 200 chars when the full text cannot be "
            "re-read (otherwise exit 2).", rich_help_panel=answers,
        ),
        "claim_level": typer.Option(
            False, "--claim-level", help="Judge groundedness claim by claim (score = 5 × supported / claims).",
            rich_help_panel=judge,
        ),
        "judge_trials": judge_samples_option(judge),
        "spot_check": typer.Option(
            0, "--spot-check", min=0, help="Re-judge N random judged cases with a second judge.",
            rich_help_panel=reliability,
        ),
        "spot_check_model": typer.Option(
            None, "--spot-check-model", help="Second judge model (same provider unless --spot-check-provider).",
            rich_help_panel=reliability,
        ),
        "spot_check_provider": typer.Option(
            None, "--spot-check-provider", help="Provider of the second judge.", rich_help_panel=reliability,
        ),
        "spot_check_prompt_version": typer.Option(
            None, "--spot-check-prompt-version", help="Second prompt set for the same judge, e.g. v1-alt.",
            rich_help_panel=reliability,
        ),
        "seed": typer.Option(
            0, "--seed", help="Seed of the spot-check and bias-probe samples (np.random.default_rng).",
            rich_help_panel=reliability,
        ),
        "bias_probes": typer.Option(
            0, "--bias-probes", min=0, metavar="N", rich_help_panel=reliability,
            help="Judge N random judged cases again with the answer padded (a verbatim copy appended) and with the "
            "context order reversed; report the mean score change with its interval and the position flip rate, and "
            "flag self-preference (answerer and judge of one model family). (default: 0, off)",
        ),
        "batch": typer.Option(
            False, "--batch", help="Submit the judge prompts the cache lacks through the provider's batch API (OpenAI "
            "Batch API, Anthropic Message Batches: half the price), wait for it, then judge from the cache. Killed, "
            "rerun the same command: it picks the recorded batch up instead of submitting it again.",
            rich_help_panel=batch,
        ),
        "batch_poll_interval": typer.Option(
            30.0, "--batch-poll-interval", min=0.0, metavar="SECONDS", help="Seconds between two looks at a running "
            "batch.", rich_help_panel=batch,
        ),
        "batch_resubmit": typer.Option(
            False, "--batch-resubmit", help="A batch submission was killed before its id was recorded: submit a new one "
            "(if the provider did receive the first, you pay for both).", rich_help_panel=batch,
        ),
        "batch_id": typer.Option(
            None, "--batch-id", metavar="ID", help="A batch submission was killed before its id was recorded: collect "
            "this batch (its id from the provider's console).", rich_help_panel=batch,
        ),
    }


def judge_samples_option(panel: str | None = None) -> Any:
    """`--judge-samples N` (alias `--judge-trials`) of judge_answers, `evalkit score --answers`
    and run_eval: the judge asked N times per answer."""
    return typer.Option(
        1, "--judge-trials", "--judge-samples", min=1, metavar="N",
        help="Judge each answer N times (each sample cached apart); report per-case spread and the mean's SE.",
        rich_help_panel=panel,
    )


def custom_metric_options(panel: str | None = None) -> dict[str, Any]:
    """`--rubric FILE` and `--scorer python:MODULE:FUNCTION`, the project's own metrics, defined
    once for `evalkit score` and run_eval: {parameter name: typer.Option}."""
    return {
        "rubric": typer.Option(
            None, "--rubric", metavar="FILE", help="Score the answers with this rubric (a TOML file: criteria, scale, "
            "examples; docs/judges.md) as metric rubric/<name>; repeatable. The judge is --judge-* (the offline "
            "heuristic without one).", rich_help_panel=panel,
        ),
        "scorer": typer.Option(
            None, "--scorer", metavar="python:MODULE:FUNCTION", help="Score each record with this Python function (it "
            "gets the record, returns a number, a bool or None) as metric scorer/<function>; repeatable. Its "
            "direction, scale and margin come from evalkit.toml's [[scorers]] entry with the same spec (default: "
            "higher, 1, 0.05).", rich_help_panel=panel,
        ),
    }


def judge_options(panel: str) -> dict[str, Any]:
    """The judge flags, defined once for every script that builds a judge (run_eval,
    judge_answers, score_abstention's LLM classifier; generate's LLM takes the cache, pinning
    and request ones): {parameter name: typer.Option}."""
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
            help=f"Judge sampling temperature. {run_default('judge_temperature')}",
        ),
        "allow_unpinned": typer.Option(
            False, "--allow-unpinned", rich_help_panel=panel,
            help="Accept a model alias that is not a dated snapshot (scores may drift).",
        ),
        "answer_quality": typer.Option(
            False, "--answer-quality", rich_help_panel=panel,
            help="Also run seed 002's answer-quality judge on answered answerable cases: relevance, groundedness and "
            "completeness vs the case's expected_topics, 0-1 each; answer_quality_avg is their mean.",
        ),
        # evalkit.config.EVALUATORS, named here for a fast --help (a test holds them equal).
        "evaluators": typer.Option(
            None, "--evaluators", metavar="NAMES", rich_help_panel=panel,
            help="Which evaluators run, comma-separated (repeatable): retrieval, groundedness, correctness, abstention "
            "(the classifier, for answers whose target gives no `abstained`), conflict (acknowledge_both cases), "
            "answer_quality, context_relevance (each retrieved chunk judged against the question: needs no gold). "
            "Retrieval is always scored; `--evaluators retrieval` is --retrieval-only. "
            "(default: all but answer_quality and context_relevance)",
        ),
        "no_cache": typer.Option(False, "--no-cache", help="Do not read or write the judge cache.", rich_help_panel=panel),
        "refresh_cache": typer.Option(
            False, "--refresh-cache", help="Ignore cached replies but store the new ones.", rich_help_panel=panel,
        ),
        # evalkit.judges.cache.DEFAULT_CACHE_PATH (a test holds them equal); importing the
        # judges package for --help would cost a tenth of a second.
        "cache_path": typer.Option(
            Path("cache/judge_cache.sqlite"), "--cache-path", metavar="PATH", help="SQLite judge cache file.",
            rich_help_panel=panel,
        ),
        "price_file": typer.Option(
            None, "--price-file", metavar="PATH", rich_help_panel=panel,
            help="JSON prices (USD per 1M tokens) overriding the built-in table.",
        ),
        "timeout": typer.Option(
            60.0, "--timeout", min=1.0, metavar="SECONDS", help="Seconds per LLM request.", rich_help_panel=panel,
        ),
    }


EXIT_OK, EXIT_GATE, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
# The merge decision could not decide: a gated metric is not settled (DESIGN.md §10;
# --on-inconclusive pass|fail maps it to 0 or 1).
EXIT_INCONCLUSIVE = 4
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
    GateFailed -> the regressions, exit 1 (4: the merge decision found not enough evidence).
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
        raise typer.Exit(e.exit_code) from None
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
