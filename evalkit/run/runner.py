"""run()/arun(): check every input, write config.json, run the session, write metrics.json.

Nothing is written until the eval set, the flags, the selection, the baseline, the judge
and the target have all been checked; then config.json is written before the first case.
"""

from __future__ import annotations

import asyncio
import os
import platform
import shlex
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from evalkit import __version__
from evalkit.config import (
    RunSettings,
    build_settings,
    diff_hashed,
    judge_identity,
    project_run_defaults,
)
from evalkit.derive import RecordPass, RunFacts, derive_run, now_utc
from evalkit.derive.health import UNMEASURABLE
from evalkit.errors import BadConfig, EvalkitError, Problem
from evalkit.evalset.load import EvalSet, configured_categories, git_output, load_eval_set
from evalkit.gate.decision import gate_exit_code
from evalkit.gate.invariants import check_invariants, scorer_identity
from evalkit.metrics.keys import ir_measures_values
from evalkit.net.breaker import CircuitBreaker
from evalkit.run.probe import probe_target
from evalkit.run.records import Selection, WorkList, select_indices, versions_tuple
from evalkit.run.session import Prepared, ProgressSink, Session
from evalkit.schema import SCHEMA_VERSION
from evalkit.store.runs import (
    LATEST,
    RunDir,
    config_hash,
    new_run_id,
    point_latest,
    resolve_run_id,
    run_folder_taken,
)

__all__ = ["RunInterrupted", "RunResult", "arun", "run"]


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run. What was written is kept; `--resume run_id` finishes the run."""

    def __init__(self, run_id: str, run_dir: Path, results_dir: str):
        self.run_id = run_id
        self.run_dir = run_dir
        self.results_dir = results_dir
        super().__init__(f"interrupted run {run_id}")

    @property
    def resume_command(self) -> str:
        """The command that finishes the run, shell-quoted so that pasting it runs only that."""
        cmd = f"python scripts/run_eval.py --resume {shlex.quote(self.run_id)}"
        if Path(self.results_dir) != Path("results"):
            cmd += f" --results-dir {shlex.quote(str(self.results_dir))}"
        return cmd


@dataclass
class RunResult:
    """What `run_eval()` returns.

    Attributes:
        run_id: the run folder's name.
        run_dir: path of `results/<run_id>/`.
        metrics: the whole metrics.json body.
        data: seed 001's result dict, at the primary K: `recall_at_k` (B.O.B's recall,
            |gold hit in top K| / |gold|: evalkit's recall_frac, metrics.json `recall_frac_avg`),
            `precision_at_k` (`precision_at_k_avg`), `mrr` (`mrr_avg`), `k`; and `recall_frac`
            (= recall_at_k) and `recall_any` (the hit rate, `recall_at_k_avg`) by evalkit's
            names. Every other aggregate is in `metrics["aggregate_metrics"]`.
        gate: the gate object ({passed, allowed, regressions, ...}) or None without --baseline.
        success: False when the gate failed (without --allow-regressions), or the run is
            incomplete: the target failed on more than `max_error_rate` of the cases.
            Also False when an absolute threshold failed (`thresholds_failed`).
        thresholds: metrics.json's `thresholds` ({passed, checked, not_measured, failures})
            when thresholds were given (`thresholds=` / --threshold), else None.
        n_cases / n_errors: records in the run / records with a target error.
        error_rate / max_error_rate: n_errors / n_cases, and the share allowed.
        warnings: metrics.json's `warnings` (runs that measured less than they seem to).
        resumed / repaired_tail / skipped: whether this call resumed a run, cut a torn
            last line, and how many cases were already done.
        judge: the judge's describe() ({"provider": None} for retrieval-only).
        trials: metrics.json's `trials` (per-trial values, mean, std, flake rates) with
            `trials=N` > 1, else None. n_cases then counts records (cases x trials).
        stopped: when the target failed every request and the run stopped asking
            (`evalkit.net.breaker`): {"after_failures", "last", "n_not_asked", "message"};
            the run is then incomplete and resumable. None otherwise.
    """

    run_id: str
    run_dir: Path
    metrics: dict[str, Any]
    data: dict[str, Any]
    gate: dict[str, Any] | None
    success: bool
    n_cases: int = 0
    n_errors: int = 0
    resumed: bool = False
    repaired_tail: bool = False
    skipped: int = 0
    judge: dict[str, Any] | None = None
    max_error_rate: float = 0.0
    warnings: list[dict[str, Any]] = field(default_factory=list)
    thresholds: dict[str, Any] | None = None  # metrics.json "thresholds" (issue 13), None without --threshold
    allow_format_mismatch: bool = False
    trials: dict[str, Any] | None = None  # metrics.json "trials" (issue 13), None without --trials N > 1
    stopped: dict[str, Any] | None = None  # the circuit breaker stopped the run (issue 28), else None

    @property
    def error_rate(self) -> float:
        return self.n_errors / self.n_cases if self.n_cases else 0.0

    @property
    def incomplete(self) -> bool:
        """True when the target failed on more cases than --max-error-rate allows: the
        metrics score those cases as misses, so they do not describe the chatbot. Also True
        when the run stopped asking a target that failed every request (`stopped`)."""
        return self.stopped is not None or self.error_rate > self.max_error_rate + 1e-12

    @property
    def unmeasurable(self) -> bool:
        """True when not one retrieved chunk matched any gold support (the run warning
        `retrieval_unmeasurable`): the run did not measure retrieval, usually because the
        answers and the labels are in different forms. Silenced by --allow-format-mismatch."""
        return not self.allow_format_mismatch and any(w.get("kind") == UNMEASURABLE for w in self.warnings)

    @property
    def thresholds_failed(self) -> bool:
        """True when an absolute --threshold failed (below it, or not measured). Not
        silenced by --allow-regressions, which is about the baseline gate."""
        return bool(self.thresholds and not self.thresholds.get("passed"))

    @property
    def gate_failed(self) -> bool:
        """True when the gate failed (regressions, nothing compared, broken invariants) or
        found not enough evidence (exit 4, unless --on-inconclusive pass), and that was not
        allowed."""
        return bool(self.gate and gate_exit_code(self.gate) != 0 and not self.gate.get("allowed"))

    def to_json(self) -> dict[str, Any]:
        """The object `run_eval.py --json` prints (DESIGN.md §9)."""
        gate = self.gate or {"passed": True, "regressions": []}
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "aggregate_metrics": self.metrics.get("aggregate_metrics", {}),
            "ir_measures": ir_measures_values((self.metrics.get("aggregate_metrics") or {}).get("at_k")),
            "gate": {
                "passed": bool(gate["passed"]),
                "outcome": gate.get("outcome", "pass" if gate["passed"] else "fail"),
                "headline": gate.get("headline"),
                "regressions": list(gate["regressions"]),
                "failures": list(gate.get("failures") or []),
                "skipped": list(gate.get("skipped") or []),
            },
            "success": self.success,
            "error_rate": self.error_rate,
            "incomplete": self.incomplete,
            "unmeasurable": self.unmeasurable,
            "thresholds": self.thresholds,
            "trials": self.trials,
            "warnings": list(self.warnings),
        }


# --------------------------------------------------------------------------- config.json


def _git_revision(cwd: Path) -> dict[str, Any] | None:
    commit = git_output(["rev-parse", "HEAD"], cwd)
    if not commit:
        return None
    status = git_output(["status", "--porcelain", "--untracked-files=no"], cwd)
    return {"commit": commit, "dirty": bool(status)}


def reproducibility_knobs(
    settings: RunSettings, target_desc: Mapping[str, Any], judge_desc: Mapping[str, Any]
) -> dict[str, Any]:
    """config.json's `reproducibility`: what makes a rerun give the same records (issue 14).

    `tie_break` and `target_deterministic` are what the target declares in describe()
    (None: not declared, unknown). Kept out of `hashed`: recording them changes no hash.
    """
    judged = judge_desc.get("provider") is not None
    return {
        "seed": settings.seed,
        "top_k": settings.request_k,
        "ks": list(settings.k),
        "tie_break": target_desc.get("tie_break"),
        "timestamps": "UTC",
        "judge_temperature": judge_desc.get("temperature", settings.judge_temperature) if judged else None,
        "target_deterministic": target_desc.get("deterministic"),
    }


def _build_config(
    settings: RunSettings,
    eval_set: EvalSet,
    selected: Sequence[tuple[int, str]],
    target_desc: Mapping[str, Any],
    judge_desc: Mapping[str, Any],
    git: dict[str, Any] | None,
) -> dict[str, Any]:
    from evalkit.run.hardware import hardware_info

    hashed = {
        **settings.hashed(),
        "dataset_version": eval_set.version,
        "judge": judge_identity(judge_desc),
    }
    chash = config_hash(hashed)
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": None,  # filled by the caller once the id is known
        "created_at": now_utc(),
        "config_hash": chash,
        "dataset_version": eval_set.version,
        "eval_set_commit_hash": eval_set.commit_hash,
        "eval_set": {
            "paths": list(settings.eval_set),
            "files": eval_set.files,
            "version": eval_set.version,
            # The cases apart from their labels, and the labels' support forms: metrics.json's
            # `cases_version` and `invariants.gold_forms` (compare tells a relabel from another set).
            "cases_version": eval_set.cases_version,
            "gold_forms": list(eval_set.gold_forms),
            "commit_hash": eval_set.commit_hash,
            "n_cases": len(eval_set.cases),
            "n_selected": len(selected),
        },
        "settings": settings.public_dump(),
        "hashed": hashed,
        "reproducibility": reproducibility_knobs(settings, target_desc, judge_desc),
        "target": dict(target_desc),
        "judge": dict(judge_desc),
        "versions": versions_tuple(settings, eval_set, None, judge_desc),
        "versions_observed": False,
        "hardware": hardware_info(),
        "evalkit_version": __version__,
        # What scores this run's records (issue 30): derive_run copies it into metrics.json's invariants.
        "scorer": scorer_identity(),
        "python": platform.python_version(),
        "git": git,
        "sessions": [],
    }


# --------------------------------------------------------------------------- the run


_OBSERVED_KEYS = ("dataset_version", "judge")


def _only_retrieval(evaluators: Any) -> bool:
    """Whether an --evaluators value names retrieval alone (a retrieval-only run)."""
    from evalkit.config import parse_evaluators

    try:
        return evaluators is not None and parse_evaluators(evaluators) == ["retrieval"]
    except ValueError:
        return False  # RunSettings says what is wrong with it


def _prepare_inputs(values: Mapping[str, Any]) -> Prepared:
    """Everything that can be checked without the target or the judge. Writes nothing."""
    stored: dict[str, Any] | None = None
    values = {k: v for k, v in values.items() if v is not None}
    for key in ("resume", "baseline"):
        # `latest` is stored, gated and resumed under the real id it stands for.
        if values.get(key) == LATEST:
            values[key] = resolve_run_id(Path(values.get("results_dir") or "results"), LATEST, flag=f"--{key}")
    resume = values.get("resume")
    if values.get("retry_errors") and not resume:
        raise BadConfig(Problem("goes with --resume RUN_ID (it redoes the failed cases of that run)", field="--retry-errors"))
    if values.get("answer_quality") and (values.get("retrieval_only") or _only_retrieval(values.get("evaluators"))):
        # It would measure nothing, silently: no judge runs in a retrieval-only run.
        raise BadConfig(Problem("needs a judge; --retrieval-only runs none (judge later with judge_answers.py "
                                "--answer-quality)", field="--answer-quality"))
    if resume:
        results_dir = values.get("results_dir") or "results"
        run = RunDir.open(Path(results_dir), resume, flag="--resume")
        stored = run.read_config()
        # The run lives where it was found, whatever results_dir its config recorded.
        values["results_dir"] = results_dir
    # EVAL_API_URL names the API when neither --api-url nor --target does (the CLI reads it
    # too); resolved here so that config.json and the hash say which target really ran.
    # evalkit.toml's [run] table: this project's defaults, under what the user gave (not on resume).
    project = {} if resume else project_run_defaults()
    if "api_url" in values or "target" in values:  # a target named now replaces the project's
        project = {k: v for k, v in project.items() if k not in ("api_url", "target")}
    stored_target = (stored or {}).get("settings", {}).get("target")
    env_url = os.environ.get("EVAL_API_URL")
    if env_url and "api_url" not in values and "target" not in values and not stored_target and "target" not in project:
        values["api_url"] = env_url
    if resume and stored is not None:
        given_run_id = values.get("run_id")
        if given_run_id and given_run_id != resume:
            raise BadConfig(Problem(f"--run-id {given_run_id} and --resume {resume} name different runs"))
        base = dict(stored.get("settings") or {})
        if base.get("shard"):
            # settings.shard of a run stored before issue 28 is 0-based; config.json's `shard` block
            # says the shard alike in every version.
            from evalkit.evalset.shard import stored_shard

            ran = stored_shard(stored)
            base["shard"] = str(ran) if ran is not None else base["shard"]
        # URLs were stored without credentials; a value given again (or the env) wins.
        settings = build_settings({**values, "run_id": resume}, base)
        if base.get("shard") != settings.shard:
            raise BadConfig(
                Problem(f"cannot resume {resume}: it ran shard {base.get('shard')}, not {settings.shard}", field="--shard")
            )
        stored_hashed = {k: v for k, v in (stored.get("hashed") or {}).items() if k not in _OBSERVED_KEYS}
        changed = diff_hashed(stored_hashed, settings.hashed())
        if changed:
            raise BadConfig(
                [Problem(f"cannot resume {resume}: the result-affecting config differs: {c}") for c in changed]
            )
    else:
        settings = build_settings(values, project)

    # --response-schema is read and checked against its meta-schema before anything runs.
    response_validator = _response_validator(settings)
    # --categories adds to evalkit.toml's [eval_set] categories (issue 30: seed 001's installation).
    eval_set = load_eval_set(settings.eval_set, [*configured_categories(), *settings.categories] if settings.categories else None)
    if stored is not None and stored.get("dataset_version") != eval_set.version:
        raise BadConfig(
            Problem(
                f"cannot resume {resume}: the eval set changed (dataset_version {str(stored.get('dataset_version'))[:12]}… "
                f"in the run, {eval_set.version[:12]}… now in {', '.join(settings.eval_set)})"
            )
        )
    # (position in the set, id) pairs: the run rebuilds each case from the stored set when it asks it.
    selected = Selection(
        select_indices(eval_set.keys, ids=settings.ids, tags=settings.tag, categories=settings.category, limit=settings.limit),
        eval_set.ids,
    )
    unsharded, shard_info = selected, None
    if settings.shard:  # issue 15: this machine's slice of the selection (may be empty)
        selected, shard_info = _shard_selection(selected, settings.shard)
    baseline = None
    if settings.baseline:
        base_run = RunDir.open(Path(settings.results_dir), settings.baseline, flag="--baseline")
        baseline = base_run.read_metrics()
        if baseline is None:
            raise BadConfig(
                Problem(f"baseline run {settings.baseline} has no metrics.json (did it finish?)", field="--baseline")
            )
        # Seed 000 §10.1: refuse, before running anything, a baseline that is not comparable.
        violations = check_invariants(baseline, {"dataset_version": eval_set.version, "total_tests": len(selected),
                                                 "cases_version": eval_set.cases_version,
                                                 "invariants": {"scorer": scorer_identity()}},
                                      allow_label_change=settings.allow_label_change)
        if violations and not settings.ignore_invariants:
            raise BadConfig(
                [Problem(f"cannot gate against {settings.baseline}: {v}", field="--baseline") for v in violations]
                + [Problem("pass --ignore-invariants to compare anyway", field="--baseline")]
            )
    prepared = Prepared(settings, eval_set, selected, baseline, stored_config=stored, unsharded=unsharded)
    prepared.response_validator = response_validator
    prepared.shard_info = shard_info
    if values.get("suite"):  # given now; a resume without it keeps config.json's suite
        from evalkit.metrics.suite import load_suite

        prepared.suite = load_suite(values["suite"])
    if resume:
        prepared.run = RunDir.open(Path(settings.results_dir), resume, flag="--resume")
    return prepared


def _shard_selection(
    selected: Selection, shard_spec: str
) -> tuple[Selection, dict[str, Any]]:
    """The shard's cases and config.json's `shard` block: which shard, its cases, and the
    whole selection it is a slice of (count and ids' sha256), which `evalkit merge` checks."""
    from evalkit.evalset.shard import ids_sha256, parse_shard

    shard = parse_shard(shard_spec)
    mine = Selection((i for i, _ in shard.select(selected, id_of=str)), selected.ids)
    all_ids = [case_id for _, case_id in selected]
    # `index` stays 0-based (sha256 mod count), as in run folders stored before shards counted
    # from 1 (issue 28), so merge and resume read old and new folders alike; `number` is the
    # 1-based shard users type and read (`--shard 2/4`), absent from older folders.
    return mine, {
        "index": shard.index,
        "number": shard.number,
        "count": shard.count,
        "n_cases": len(mine),
        "ids_sha256": ids_sha256([case_id for _, case_id in mine]),
        "n_selected_total": len(all_ids),
        "selected_ids_sha256": ids_sha256(all_ids),
    }


def _response_validator(settings: RunSettings) -> Any:
    """The ResponseValidator of --response-schema / --require-fields, or None (BadConfig: a bad schema)."""
    if settings.response_schema is None and not settings.require_fields and settings.response_field is None:
        return None
    from evalkit.metrics.validity import build_response_validator

    return build_response_validator(
        settings.response_schema, field=settings.response_field, require_fields=settings.require_fields
    )


def _check_baseline_judge(baseline: Mapping[str, Any], judge_desc: Mapping[str, Any], baseline_id: str | None) -> None:
    """Seed 000 §10.1 before the first case: a baseline judged by another judge model,
    prompt version or temperature is not comparable (a retrieval-only side is)."""
    new = {"invariants": {"judge": judge_identity(judge_desc)}}
    violations = check_invariants({"invariants": baseline.get("invariants")}, new)
    if violations:
        raise BadConfig(
            [Problem(f"cannot gate against {baseline_id}: {v}", field="--baseline") for v in violations]
            + [Problem("pass --ignore-invariants to compare anyway", field="--baseline")]
        )


async def _check_baseline_corpus(baseline: Mapping[str, Any], target: Any, baseline_id: str | None) -> None:
    """--same-corpus before the first case: the target's index stats now against the
    baseline's (`gate.check_invariants`); a changed index or a target without stats stops
    the run (exit 2), as the other invariants do."""
    from evalkit.metrics.aggregate import summarize_indexing_coverage

    now = {"aggregate_metrics": {"indexing_coverage": summarize_indexing_coverage(await target.index_stats())}}
    violations = check_invariants({"aggregate_metrics": baseline.get("aggregate_metrics")}, now, same_corpus=True)
    if violations:
        raise BadConfig(
            [Problem(f"cannot gate against {baseline_id}: {v}", field="--same-corpus") for v in violations]
            + [Problem("pass --ignore-invariants to compare anyway", field="--baseline")]
        )


async def _anchor_check(p: Prepared, target: Any, vault_given: bool) -> dict[str, Any] | None:
    """Check the selected cases' gold anchors against the corpus when it is at hand: the
    in-process reference chatbot's vault, `--vault` given with another target, or the file
    list a target's /api/v1/index/stats serves. A stale anchor can only ever score 0, so
    it is reported before the run (a warning: the run still measures the rest).

    Returns the metrics.json warning, or None when every anchor checked out or no corpus
    is at hand.
    """
    from evalkit.evalset.anchorcheck import (
        check_support,
        corpus_from_index_stats,
        corpus_from_vault,
    )

    s = p.settings
    if s.in_process or vault_given:
        if not Path(s.vault).is_dir():
            return None
        corpus = corpus_from_vault(s.vault)
    else:
        corpus = corpus_from_index_stats(await target.index_stats())
    if corpus is None:
        return None
    located: list[Problem] = []
    n_supports = 0
    for index, _ in p.selected:
        case = p.eval_set.cases[index]
        path, line = p.eval_set.location(index)
        for i, support in enumerate(case.gold_supports):
            n_supports += 1
            for issue in check_support(support, corpus):
                located.append(Problem(issue.message, path=path, line=line, field=f"gold_supports[{i}].{issue.field}"))
    if not located:
        return None
    return {
        "kind": "stale_anchors",
        "severity": "warning",
        "n": len(located),
        "of": n_supports,
        "problems": [str(x) for x in located[:20]],
        "message": f"{len(located)} gold anchor{'s do' if len(located) != 1 else ' does'} not exist in "
        f"{corpus.source}; {'they' if len(located) != 1 else 'it'} can only score 0 "
        "(evalkit validate --eval-set ... --vault ... lists every one)",
    }


def _unchecked_rules(p: Prepared) -> dict[str, Any] | None:
    """The selected cases' rules that this run cannot check as written, as metrics.json's
    `unchecked_rules` warning: a cite_newer case without dates (`case_warnings`, found
    when the eval set was read), and an acknowledge_both case in a run without the conflict
    judge (--retrieval-only, or --evaluators without conflict). None when there are none."""
    found: list[tuple[int, Any]] = []
    if p.eval_set.warnings:
        selected = {index for index, _ in p.selected}
        found = [(i, w) for i, w in p.eval_set.warnings if i in selected]
    if "conflict" not in p.settings.judge_evaluators and _holds_conflict_case(p, p.selected):
        why = "--retrieval-only" if p.settings.retrieval_only else "--evaluators without conflict"
        for index, _ in p.selected:
            if p.eval_set.recency_rules.get(index) == "acknowledge_both":
                path, line = p.eval_set.location(index)
                found.append((index, Problem(
                    f"warning: case {p.eval_set.ids[index]!r}: recency_conflict_rule acknowledge_both needs the conflict "
                    f"judge, which this run does not run ({why}), so recency.pass stays null; judge the run with "
                    "judge_answers.py to check it", path=path, line=line, field="recency_conflict_rule",
                )))
    if not found:
        return None
    ids = list(dict.fromkeys(p.eval_set.ids[i] for i, _ in found))
    return {
        "kind": "unchecked_rules",
        "severity": "warning",
        "n": len(ids),
        "of": len(p.selected),
        "ids": ids[:20],
        "problems": [str(w) for _, w in found[:20]],
        "message": f"{len(ids)} case{'s ask' if len(ids) != 1 else ' asks'} for a rule that scoring cannot check as "
        f"written ({', '.join(ids[:5])}{', …' if len(ids) > 5 else ''}): its recency.pass stays null or says less "
        "than the rule (evalkit validate lists each one with what to add)",
    }


def _holds_conflict_case(p: Prepared, selection: Selection) -> bool:
    """Whether a case of `selection` has `recency_conflict_rule: acknowledge_both` (the conflict judge's)."""
    rules = p.eval_set.recency_rules
    if not any(rule == "acknowledge_both" for rule in rules.values()):
        return False
    return any(rules.get(index) == "acknowledge_both" for index, _ in selection)


def _conflict_cases(p: Prepared) -> bool:
    """JudgeSettings.conflict_cases: whether the judge's description (hashed) names the
    conflict judge's prompt, which it does when the run's cases hold an acknowledge_both case.

    The run's cases, not the shard's: the hashed config must be one for every shard of a run,
    or `merge` refuses them (issue 36 item 9). A shard without such a case asks the conflict
    judge nothing either way. A shard stored before then named the prompt only when its own
    cases held one; resumed, it keeps the judge it recorded (merging it with newer shards
    is still refused: re-run it)."""
    if not _holds_conflict_case(p, p.run_cases):
        return False
    stored = ((p.stored_config or {}).get("hashed") or {}).get("judge")
    older_shard = (isinstance(stored, dict) and "conflict" not in (stored.get("prompt_version") or {})
                   and not _holds_conflict_case(p, p.selected))
    return not older_shard


def _build_judge(settings: RunSettings, *, conflict_cases: bool = False) -> Any:
    if not settings.judge_evaluators:
        return None
    from evalkit.judges import JudgeSettings, build_judge_runner

    return build_judge_runner(
        JudgeSettings(
            provider=settings.judge_provider,
            model=settings.judge_model,
            base_url=settings.judge_base_url,
            temperature=settings.judge_temperature,
            allow_unpinned=settings.allow_unpinned,
            use_cache=not settings.no_cache,
            answer_quality=settings.answer_quality,
            evaluators=settings.judge_evaluators,
            conflict_cases=conflict_cases,
            concurrency=settings.concurrency,
            retry_policy=_retry_policy(3, settings.max_retry_wait),
        )
    )


def _retry_policy(retries: int, max_retry_wait: float, progress: Any = None, breaker: Any = None) -> Any:
    """Bounded backoff whose server-requested Retry-After waits are capped at --max-retry-wait;
    each wait is told to the progress sink when it can show one. With a circuit breaker,
    retries stop once it opens."""
    from evalkit.net.retry import RetryPolicy

    on_wait = getattr(progress, "waiting", None)
    return RetryPolicy.from_retries(retries, max_retry_after=max_retry_wait, on_wait=on_wait if callable(on_wait) else None,
                                    breaker=breaker)


def reference_vault_id(settings: RunSettings, cases: Iterable[Any]) -> str | None:
    """The vault id the in-process reference chatbot serves: --vault-id; else, when the
    request carries a case's vaults (--send-scope vaults/both), the one vault the selected
    cases name, so an eval set written for a vault called "tasks" runs against --vault
    ./obsidian-tasks; else None (the folder's name)."""
    if settings.vault_id is not None or not settings.in_process:
        return settings.vault_id
    if "vaults" not in settings.scope_sent:
        return None
    named = {v for c in cases for v in (getattr(c, "vaults", None) or [])}
    return named.pop() if len(named) == 1 else None


def _build_target(settings: RunSettings, progress: Any = None, vault_id: str | None = None, breaker: Any = None) -> Any:
    from evalkit.targets import build_target

    return build_target(
        target=settings.target,
        api_url=settings.api_url or None,
        vault=Path(settings.vault),
        vault_id=vault_id,
        timeout=settings.timeout,
        retries=settings.retries,
        rps=settings.rps,
        params=dict(settings.params),
        retry_policy=_retry_policy(settings.retries, settings.max_retry_wait, progress, breaker),
        max_response_bytes=settings.max_response_bytes,
        processes=settings.target_processes,
    )


def _count_probe(breaker: Any, probe: Mapping[str, Any] | None) -> None:
    """The probe's 5xx (or broken exchange) is the target's first failed request."""
    error = (probe or {}).get("error") or {}
    if probe and probe.get("ok") is False and error.get("kind") == "http_error":
        status = error.get("status")
        breaker.failure(f"HTTP {status}" if status else "connection error")


def _stopped(breaker: Any, target: Any, n_not_asked: int, n_pending: int, run_id: str) -> dict[str, Any] | None:
    """What config.json, metrics.json's warnings and the CLI say when the circuit breaker
    stopped the run (the target failed every request and answered none); None when it did not."""
    if not breaker.open:
        return None
    desc = target.describe()
    where = f"the target at {desc['api_url']}" if desc.get("api_url") else f"the target {desc.get('target') or desc.get('kind')}"
    last = breaker.last or "an error"
    if last.startswith("HTTP"):
        check = f"check the server's log for the error behind {last}"
    elif last == "timeout":
        check = f"check that it answers within --timeout {desc.get('timeout_s') or 0:g}s (load, warm-up)"
    else:
        check = "check that it is running at that address"
    left = f"{n_not_asked} of {n_pending} cases were not asked" if n_not_asked else "its retries were cut short"
    message = (
        f"stopped asking {where}: it failed every request ({breaker.failures} in a row, the last {last}) and "
        f"answered none; {left}. {check[0].upper() + check[1:]}, then finish the run with: "
        f"--resume {shlex.quote(run_id)} --retry-errors"
    )
    return {"after_failures": breaker.failures, "last": last, "n_not_asked": n_not_asked, "message": message}


def _stopped_warning(stopped: Mapping[str, Any] | None, n_pending: int) -> dict[str, Any] | None:
    """metrics.json's `stopped_early` warning (cases not asked, of those the session had to ask)."""
    if stopped is None:
        return None
    return {"kind": "stopped_early", "severity": "error", "n": stopped["n_not_asked"], "of": n_pending, "ids": [],
            "message": stopped["message"]}


def _create_run_dir(results_dir: Path, run_id: str | None, chash: str, suffix: str = "") -> RunDir:
    """The run folder: the given --run-id, else `<UTC second>-<hash><suffix>` (a shard's suffix
    is `-shard-<i>-of-<n>`). Two runs of one config in the same second get the next free
    second, so ids stay unique and time-sorted."""
    if run_id:
        return RunDir.create(results_dir, run_id)
    now = datetime.now(timezone.utc)
    for step in range(1000):
        candidate = new_run_id(chash, now + timedelta(seconds=step)) + suffix
        if not run_folder_taken(results_dir / candidate):
            return RunDir.create(results_dir, candidate)
    raise BadConfig(Problem(f"no free run id under {results_dir} for config {chash[:6]}"))


def record_key(record: Mapping[str, Any]) -> tuple[str, int]:
    """A record's identity in its run: (test_case_id, trial); trial 1 when the run has no trials."""
    trial = record.get("trial")
    return record.get("test_case_id"), trial if type(trial) is int else 1


def run_order(record: Mapping[str, Any]) -> tuple[int, int]:
    """Where a record belongs in results.jsonl: trial, then eval-set position (see `WorkList`)."""
    return record_key(record)[1], record.get("case_index", 0)


def _finished_keys(run: RunDir, *, retry_errors: bool) -> set[tuple[str, int]]:
    """(case, trial) pairs a resume skips: every recorded one, or with --retry-errors only
    those the target did not fail (an empty answer is the system's answer, not a transient failure)."""
    return {
        record_key(r)
        for r in run.iter_results()
        if not retry_errors or not r.get("error") or r["error"].get("kind") == "empty_answer"
    }


def _finalize_order(run: RunDir, selected: Sequence[tuple[int, str]], trials: int = 1) -> int:
    """Rewrite results.jsonl in run order (trial, then eval-set order), one record per
    selected (case, trial). Returns the count."""
    wanted = {case_id for _, case_id in selected}
    seen: set[tuple[str, int]] = set()
    in_order = True
    last = (0, -1)
    n = 0
    for rec in run.iter_results():
        key, pos = record_key(rec), run_order(rec)
        if key in seen or key[0] not in wanted or key[1] > trials or pos < last:
            in_order = False
        seen.add(key)
        last = max(last, pos)
        n += 1
    if in_order:
        return n
    records: dict[tuple[str, int], dict] = {}
    for rec in run.iter_results():
        key = record_key(rec)
        if key[0] in wanted and key[1] <= trials:
            # The last record of a case wins: a case redone by --retry-errors replaces its error.
            records[key] = rec
    ordered = sorted(records.values(), key=run_order)
    run.rewrite_results(ordered)
    return len(ordered)


def _data(metrics: Mapping[str, Any], k: int) -> dict[str, Any]:
    """`RunResult.data`: seed 001's result dict, its names with its meanings, at the primary K
    (issue 30: it held aggregate_metrics too, so `recall_at_k` (B.O.B's recall) sat beside
    `recall_at_k_avg` (the hit rate), two meanings of one name). Each value is the metrics.json
    `aggregate_metrics.at_k[K]` entry named in the comment; the whole metrics.json is `.metrics`.
    """
    agg = metrics.get("aggregate_metrics") or {}
    cell = (agg.get("at_k") or {}).get(str(k)) or {}

    def value(name: str, headline: str) -> Any:
        v = cell.get(name) if name in cell else agg.get(headline)
        return v.get("value", v.get("mean")) if isinstance(v, Mapping) else v

    recall = value("recall_frac", "recall_frac_avg")
    return {
        "recall_at_k": recall,  # seed 001's Recall@k, |relevant ∩ retrieved@k| / |relevant|: recall_frac (recall_frac_avg)
        "precision_at_k": value("precision", "precision_at_k_avg"),  # |relevant ∩ retrieved@k| / k: precision_at_k_avg
        "mrr": value("mrr", "mrr_avg"),  # mrr_avg
        "k": k,  # aggregate_metrics.k, the primary K
        "recall_frac": recall,  # the same value under evalkit's name
        "recall_any": value("recall_any", "recall_at_k_avg"),  # evalkit's Recall@K (any), the hit rate: recall_at_k_avg
    }


def _note(progress: Any, message: str, details: Sequence[str] = ()) -> None:
    """A warning before the run: through the progress sink when it can print one (the CLI's
    does, on stderr), else the `evalkit` logger."""
    note = getattr(progress, "note", None)
    if callable(note):
        note(message, list(details))
        return
    import logging

    log = logging.getLogger("evalkit")
    log.warning(message)
    for line in details:
        log.warning("  %s", line)


def _lock_baselined(p: Prepared, result: RunResult, progress: Any) -> None:
    """Lock, in the `eval_sets.lock` beside them, the eval set files this run baselined:
    every file with the --baseline run's id when the run gated against a baseline of the
    same dataset_version; the versioned files (`*.v<N>.jsonl`) with this run's id unless
    the run is incomplete. Files already locked are left alone. Only a note is said; a lock
    that cannot be written is a warning, never a failed run."""
    from evalkit.evalset.lock import LOCK_NAME, lock_baselined

    plan: list[tuple[str, bool]] = []  # (run id to record, versioned files only)
    if p.baseline is not None and p.settings.baseline and p.baseline.get("dataset_version") == p.eval_set.version:
        plan.append((p.settings.baseline, False))
    if not result.incomplete:
        plan.append((result.run_id, True))
    for run_id, versioned_only in plan:
        try:
            added = lock_baselined(p.eval_set, run_id, versioned_only=versioned_only)
        except (EvalkitError, OSError) as e:
            _note(progress, f"could not lock the eval set in {LOCK_NAME}: {e}")
            return
        for path in added:
            _note(progress, f"locked {path.name} in {path.parent / LOCK_NAME} (baselined by run {run_id})")


async def arun(values: Mapping[str, Any], progress: ProgressSink | None = None, _state: dict | None = None) -> RunResult:
    """Run (or resume) an evaluation. See `run()`; this is its coroutine."""
    state = _state if _state is not None else {}
    # A new run's `git rev-parse` and `git status` (5-10 ms) run in a thread while the
    # eval set loads.
    loop = asyncio.get_running_loop()
    git = None if values.get("resume") else loop.run_in_executor(None, _git_revision, Path.cwd())
    p = _prepare_inputs(values)
    s = p.settings
    judge = _build_judge(s, conflict_cases=_conflict_cases(p))
    target = None
    try:
        # Shared by the target's retries and the session: a target failing every request stops the run.
        breaker = CircuitBreaker()
        # The run's cases, not the shard's: the vault id goes into every chunk id.
        target = _build_target(s, progress, reference_vault_id(s, (p.eval_set.cases[i] for i, _ in p.run_cases)), breaker)
        judge_desc = judge.describe() if judge is not None else {"provider": None}
        resumed = p.run is not None and p.stored_config is not None
        probe = None
        if p.run is not None and p.stored_config is not None:
            run = p.run
            stored_judge = (p.stored_config.get("hashed") or {}).get("judge")
            if stored_judge != judge_identity(judge_desc):
                raise BadConfig(
                    Problem(
                        f"cannot resume {run.run_id}: the judge differs: the run used {stored_judge!r}, "
                        f"now {judge_identity(judge_desc)!r}"
                    )
                )
            p.config = p.stored_config
        else:
            if p.baseline is not None and not s.ignore_invariants:
                _check_baseline_judge(p.baseline, judge_desc, s.baseline)
                if s.same_corpus:
                    await _check_baseline_corpus(p.baseline, target, s.baseline)
            # Before anything is written: a dead or foreign target stops here with one line.
            # An empty shard asks nothing, so it probes nothing.
            probe = await probe_target(s, target, p.eval_set.cases[p.selected[0][0]]) if p.selected else None
            git_info = await git if git is not None else _git_revision(Path.cwd())
            p.config = _build_config(s, p.eval_set, p.selected, target.describe(), judge_desc, git_info)
            shard_info = p.shard_info
            if shard_info is not None:  # recorded, never hashed: the shards of a run share one config_hash
                p.config["shard"] = shard_info
            suffix = f"-shard-{shard_info['number']}-of-{shard_info['count']}" if shard_info else ""

            run = _create_run_dir(Path(s.results_dir), s.run_id, p.config["config_hash"], suffix)
            p.config["run_id"] = run.run_id
            p.run = run
        state.update(run_id=run.run_id, run_dir=run.path, results_dir=s.results_dir)
        if p.suite is not None:  # it weighs the metrics, never changes them: kept beside the settings
            p.config["suite"] = p.suite.to_json()

        repaired = run.repair_tail() if resumed else False
        done = _finished_keys(run, retry_errors=s.retry_errors) if resumed else set()
        n_work = len(p.selected) * s.trials
        pending = WorkList(p.selected, s.trials, done)
        if resumed and pending:
            # A resume probes with a case it is about to ask anyway: finished cases are not re-asked.
            probe = await probe_target(s, target, p.eval_set.cases[pending[0][0]])
        _count_probe(breaker, probe)
        ignored = list(probe.get("ignored_options") or []) if probe else []
        if "collection" in ignored and "collection" in s.scope_sent and "collection" not in s.params:
            ignored.remove("collection")
            _note(progress, "the target ignores the case's collection (options.collection, --send-scope collection): it "
                  "says it does not know it (debug.ignored_options), so this run searches everything")
        if ignored:
            _note(progress, f"the target ignores --param {', '.join(ignored)}: it says it does not "
                  "know them (debug.ignored_options), so this run measures its defaults for them")
        if probe and probe.get("contract"):
            from evalkit.targets.contract import probe_notes

            _note(progress, "the target's first answer breaks the contract (docs/api-contract.md); "
                  "retrieval numbers will be wrong until it is fixed:", probe_notes(probe["contract"]))
        stale = await _anchor_check(p, target, vault_given=values.get("vault") is not None)
        if stale is not None:
            _note(progress, stale["message"], stale["problems"])
        unchecked = _unchecked_rules(p)
        if unchecked is not None:
            _note(progress, unchecked["message"], unchecked["problems"])
        p.config.setdefault("sessions", []).append(
            {
                "started_at": now_utc(),
                "resumed": resumed,
                "pending": len(pending),
                "repaired_tail": repaired,
                "settings": {k: getattr(s, k) for k in ("concurrency", "timeout", "retries", "rps")},
                "probe": probe,
            }
        )
        run.write_config(p.config)  # written before the first case is asked

        # A fresh run's metrics are taken from its records as they are written: results.jsonl
        # (1.2 GB at 100,000 cases and K = 20) is then not read back when it is in run order.
        derived = RecordPass(s, rows=True) if not resumed else None
        session = Session(p, target, judge, judge_desc, progress, derived=derived, breaker=breaker)
        if progress is not None:
            progress.start(
                run_id=run.run_id, run_dir=run.path, total=n_work, done=n_work - len(pending),
                resumed=resumed,
            )
        t0 = time.perf_counter()
        try:
            if pending:
                await session.execute(pending)
        finally:
            if progress is not None:
                progress.close()
        wall = time.perf_counter() - t0
        # The suite's wall time is the sum of its sessions' (a killed session's is lost).
        p.config["sessions"][-1]["wall_s"] = round(wall, 3)
        stopped = _stopped(breaker, target, len(pending) - session.n_asked, len(pending), run.run_id)
        if stopped is not None:
            p.config["sessions"][-1]["stopped"] = stopped
        run.write_config(p.config)

        if not resumed and session.in_order and session.n_written == n_work:
            n = session.n_written  # written in run order, one per (case, trial): nothing to fix
        else:
            n = _finalize_order(run, p.selected, s.trials)
            if derived is not None:
                derived.close()
            derived = None  # the file is not what was written, in that order: derive reads it
        metrics, gate = derive_run(run, RunFacts(
            settings=s, config=p.config, eval_set_commit_hash=p.eval_set.commit_hash,
            dataset_version=p.eval_set.version, judge_stats=judge.stats() if judge is not None else None,
            baseline=p.baseline, session_wall_s=wall,
            pre_run_warnings=[w for w in (stale, unchecked, _stopped_warning(stopped, len(pending))) if w],
        ), derived)
        point_latest(Path(s.results_dir), run.run_id)  # the run finished last, resumed ones too
        kinds = metrics["aggregate_metrics"]["operational_metrics"].get("error_kinds") or {}
        n_errors = sum(v for kind, v in kinds.items() if kind != "empty_answer")
        failed_gate = bool(gate and gate_exit_code(gate) != 0 and not s.allow_regressions)
        result = RunResult(
            run_id=run.run_id,
            run_dir=run.path,
            metrics=metrics,
            data=_data(metrics, s.primary_k),
            gate=gate,
            success=not failed_gate,
            thresholds=metrics.get("thresholds") if s.thresholds else None,
            trials=metrics.get("trials"),
            n_cases=n,
            n_errors=n_errors,
            resumed=resumed,
            repaired_tail=repaired,
            skipped=n_work - len(pending),
            judge=judge_desc,
            max_error_rate=s.max_error_rate,
            warnings=list(metrics.get("warnings") or []),
            allow_format_mismatch=s.allow_format_mismatch,
            stopped=stopped,
        )
        # One rule for the CLI and the API: a run whose target failed too often is not a success.
        result.success = result.success and not result.incomplete
        result.success = result.success and not result.thresholds_failed
        result.success = result.success and not result.unmeasurable
        _lock_baselined(p, result, progress)  # issue 14 item 6: a baselined eval set is immutable
        return result
    finally:
        if target is not None:
            await target.aclose()
        if judge is not None:
            await judge.aclose()


def run(values: Mapping[str, Any], progress: ProgressSink | None = None) -> RunResult:
    """Run (or resume, with `resume=RUN_ID`) an evaluation and write `results/<run_id>/`.

    Args:
        values: the settings the user gave (RunSettings field names); everything else
            takes its default, or on resume the stored value.
        progress: optional sink for progress events (the CLI's rich bar).

    Returns:
        RunResult with the metrics, the gate and the run folder.

    Raises:
        InputError: bad eval set (BadEvalSet), bad flags or a resume that does not match
            (BadConfig), unknown run (RunNotFound), judge misconfiguration (JudgeConfigError).
            Nothing is written in these cases, except that a resume may repair a torn tail.
            A judge the provider refuses mid-run (a rejected key) stops the run like Ctrl-C:
            what was written is kept and the error's `resume_command` finishes the run.
        RunInterrupted: Ctrl-C after the run folder was created; resume with its id.
    """
    state: dict[str, Any] = {}
    try:
        return asyncio.run(arun(values, progress, state))
    except KeyboardInterrupt:
        if "run_id" in state:
            raise RunInterrupted(state["run_id"], state["run_dir"], str(state["results_dir"])) from None
        raise
    except EvalkitError as e:
        # Stopped once config.json was written (a rejected judge key): resumable, as after Ctrl-C.
        if "run_id" in state and (Path(state["run_dir"]) / "config.json").exists():
            e.resume_command = RunInterrupted(state["run_id"], state["run_dir"], str(state["results_dir"])).resume_command
        raise
