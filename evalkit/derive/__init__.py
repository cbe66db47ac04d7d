"""The derive step: a run's records -> metrics.json, summary.md and results.json.

`derive_run` is what run_eval does after its last case and what `evalkit merge` does for
the merged shards: one read of results.jsonl feeds the aggregate (`aggregate_records`), the
run warnings (`health`), the invariants the gate compares, the worst cases and the trials;
then the gate and the thresholds; then `summary.write_derived` writes summary.md and
results.json from the committed metrics.json. `RunFacts` is what metrics.json says about a
run beyond its records (settings, config, eval-set version, judge stats, the baseline).
The re-scorings (score_retrieval, score_abstention, judge_answers) patch their own keys of
metrics.json, pass it through `recheck_verdicts` (the gate and the `--threshold` floors,
judged again on the numbers they now hold, by the code derive_run judges with), and call
`write_derived`. A command killed before that leaves a mark the next `open_run` sees, and
then derives them (summary.py).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import IO, Any

from evalkit.compare.fields import scored_forms
from evalkit.compare.gate import BUILTIN_THRESHOLDS, Thresholds, gate_result, threshold_check
from evalkit.config import RunSettings, judge_identity
from evalkit.derive.summary import open_run, write_derived
from evalkit.schema import SCHEMA_VERSION
from evalkit.store.runs import RunDir

__all__ = [
    "RecordPass", "RunFacts", "derive_run", "now_utc", "open_run", "recheck_verdicts", "run_invariants", "thresholds_from",
    "gate_of", "verdicts",
]


@dataclass
class RunFacts:
    """What metrics.json records about a run beside what its records say."""

    settings: RunSettings
    config: Mapping[str, Any]  # config.json: sessions (wall times), config_hash, judge
    eval_set_commit_hash: str | None
    dataset_version: str
    judge_stats: Mapping[str, Any] | None = None  # JudgeRunner.stats(): calls, cache, tokens, cost
    baseline: Mapping[str, Any] | None = None  # the --baseline run's metrics.json, for the gate
    pre_run_warnings: Sequence[dict] = field(default_factory=list)
    session_wall_s: float = 0.0
    # evalkit merge: replaces `run_timing`; the suite's wall time is then unknown
    # (`latency.total_ms` null): shards ran side by side, so no one clock measured the run.
    timing: Mapping[str, Any] | None = None


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def thresholds_from(s: RunSettings) -> Thresholds:
    """The gate's thresholds from the --regression-threshold-* settings (one setting per
    built-in threshold, named after it, so a new gated metric needs no edit here), then
    `--regression-threshold NAME=VALUE` (which wins for a gated metric it names), `--gate-by`
    and `--gate-min-n`."""
    builtin = Thresholds(**{name: getattr(s, f"regression_threshold_{name}") for name in BUILTIN_THRESHOLDS})
    return replace(builtin.with_named(s.regression_threshold), by=tuple(s.gate_by), min_slice_n=s.gate_min_n)


def run_invariants(
    missing_fields: Iterable[str], judge: Mapping[str, Any] | None, asked_k: int | None = None,
    scorer: Mapping[str, Any] | None = None, gold_forms: Iterable[str] | None = None,
) -> dict[str, Any]:
    """metrics.json's `invariants`: what seed 000 §10.1 compares beyond the dataset version.

    `debug_fields_missing` is every contract field some record's response left out (the
    union of records' `missing_fields`), over the cases the target answered. `asked_k` is
    how many chunks the target was asked for (the largest K): what its answers saw
    (`gate.asked_k_of`; a later re-score to smaller K does not change it). `scorer` is
    config.json's (`gate.scorer_identity()` of the run_eval that scored the records); a
    run made before evalkit recorded one has none. `gold_forms` (`fields.scored_forms`):
    the gold support forms the labels use, so a field one target leaves out blinds only
    the metrics that read it (compare.fields); none for a run made before.
    """
    out = {"judge": dict(judge) if judge else None, "debug_fields_missing": sorted(set(missing_fields))}
    if asked_k is not None:
        out["asked_k"] = int(asked_k)
    if isinstance(scorer, Mapping):
        out["scorer"] = dict(scorer)
    if gold_forms is not None:
        out["gold_forms"] = list(gold_forms)
    return out


class RecordPass:
    """Everything derive_run takes from a run's records, fed one record at a time in file
    order: the aggregate's rows, the run warnings, the contract fields responses left out,
    summary.md's worst cases and the trials. Memory grows by one row of floats per record
    (`RecordTable`) and the run's distinct labels and chunk locations (`RunHealth`), never
    by the records themselves.

    derive_run feeds it from results.jsonl; run_eval feeds it each record as written
    (`Session`), so a fresh run written in order is never read back.

    With `rows`, it also keeps results.json's case rows, encoded, in an anonymous
    temporary file (gone with the process, even a killed one; never in memory: 20,000
    rows at K = 20 are about 40 MB), so results.json needs no second pass either. Past
    MAX_CASES records results.json has no rows, and none are kept.
    """

    def __init__(self, s: RunSettings, *, rows: bool = False) -> None:
        from evalkit.compare.trials import TrialStats
        from evalkit.derive.health import RunHealth
        from evalkit.metrics.aggregate import RecordTable
        from evalkit.report.summary_md import WorstCases

        self.table = RecordTable(s.k)
        self.health = RunHealth()
        self.missing: set[str] = set()
        self.worst = WorstCases(s.k[0])
        self.trials = TrialStats(s.k) if s.trials > 1 else None
        self.n = 0
        self._rows: IO[bytes] | None = None
        if rows:
            from evalkit.report.results_json import MAX_CASES, encode_row

            # Looked up once, not per record: add() runs on the run's event loop.
            self._rows, self._encode, self._max_rows = tempfile.TemporaryFile(), encode_row, MAX_CASES

    def add(self, rec: dict[str, Any]) -> None:
        if self._rows is not None:
            if self.n < self._max_rows:
                self._rows.write(self._encode(rec) + b"\n")
            else:  # results.json leaves the rows of a bigger run out
                self._rows.close()
                self._rows = None
        self.table.add_record(rec)
        self.health.add(rec)
        self.missing.update(rec.get("missing_fields") or [])
        self.worst.add(rec)
        if self.trials is not None:
            self.trials.add(rec)
        self.n += 1

    def rows(self) -> Iterator[bytes] | None:
        """results.json's case rows of the records added, in order; None if not kept."""
        if self._rows is None:
            return None
        return self._read_rows(self._rows)

    @staticmethod
    def _read_rows(f: IO[bytes]) -> Iterator[bytes]:
        f.flush()
        f.seek(0)
        for line in f:
            yield line.rstrip(b"\n")

    def close(self) -> None:
        if self._rows is not None:
            self._rows.close()


def derive_run(run: RunDir, facts: RunFacts, records: RecordPass | None = None) -> tuple[dict, dict | None]:
    """A run's derived files from its results.jsonl as written (the file is the truth):
    metrics.json (aggregates, run warnings, invariants, the gate, thresholds), then
    summary.md and results.json. Returns (metrics.json, the gate or None).

    `records`: the pass over the records when the caller already made it over exactly
    the records results.jsonl holds, in its order (run_eval as it wrote them); else
    results.jsonl is read here, once."""
    s = facts.settings
    walls = [x.get("wall_s") for x in facts.config.get("sessions") or []]
    suite_s = math.fsum(w for w in walls if isinstance(w, int | float))
    if records is None:
        # One pass over results.jsonl for everything, results.json's rows included.
        records = RecordPass(s, rows=True)
        for rec in run.iter_results():
            records.add(rec)
    try:
        return _derive(run, facts, records, suite_s)
    finally:
        records.close()


def _derive(run: RunDir, facts: RunFacts, records: RecordPass, suite_s: float) -> tuple[dict, dict | None]:
    s, timing = facts.settings, facts.timing
    eval_set = facts.config.get("eval_set") or {}
    body = records.table.result(suite_ms=None if timing is not None else suite_s * 1000)
    health, missing, worst, trials = records.health, records.missing, records.worst, records.trials
    metrics: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run.run_id,
        "timestamp": now_utc(),
        "config_hash": facts.config["config_hash"],
        "eval_set_commit_hash": facts.eval_set_commit_hash,
        "dataset_version": facts.dataset_version,
        "cases_version": eval_set.get("cases_version"),
        "ks": list(s.k),
        "seed": s.seed,
        **body,
        "run_timing": dict(timing) if timing is not None else {
            "session_wall_s": round(facts.session_wall_s, 3),
            "sessions": len(facts.config.get("sessions") or []),
        },
    }
    if trials is not None:
        metrics["trials"] = trials.result()
    # JudgeRunner.stats(): cache hits/misses, calls, tokens, cost (this session's calls).
    metrics["aggregate_metrics"]["judge"] = dict(facts.judge_stats) if facts.judge_stats is not None else None
    forms = eval_set.get("gold_forms")
    metrics["invariants"] = run_invariants(missing, judge_identity(facts.config.get("judge")), s.request_k,
                                           facts.config.get("scorer"),
                                           scored_forms(forms, s.require_snippets) if isinstance(forms, list) else None)
    metrics["warnings"] = [*facts.pre_run_warnings, *health.warnings()]
    gate = verdicts(metrics, s, facts.baseline, run, facts.config)
    committed = run.update_metrics(metrics)
    committed = dict(write_derived(run, committed, worst, records.rows()) or committed)
    return committed, gate


def verdicts(
    metrics: dict[str, Any], s: RunSettings, baseline: Mapping[str, Any] | None, run: RunDir | None = None,
    config: Mapping[str, Any] | None = None,
) -> dict | None:
    """Judge `metrics` in place: `gate` against the --baseline run (when given) and
    `thresholds` for the --threshold floors (when set). Returns the gate or None.
    derive_run and `recheck_verdicts` both judge here, so a verdict has one source.

    The gate is the merge decision (`evalkit.compare.run_gate`: compare_runs' verdict on the
    run and its baseline run beside it) unless `--gate threshold`, a threshold flag, or a
    baseline without per-case records asks for the threshold gate (`gate_result`)."""
    gate = None
    if baseline is not None:
        if run is not None and s.baseline and gate_of(s) == "verdict":
            from evalkit.compare.compute import IncomparableRuns
            from evalkit.compare.run_gate import verdict_gate

            base = RunDir(run.path.parent / s.baseline)
            if base.path.is_dir():
                try:
                    gate = verdict_gate(
                        run, metrics, config, base, thresholds=thresholds_from(s), on_inconclusive=s.on_inconclusive,
                        allow_regressions=s.allow_regressions, ignore_invariants=s.ignore_invariants,
                        allow_missing_metrics=s.allow_missing_metrics, same_corpus=s.same_corpus,
                        allow_label_change=s.allow_label_change,
                    )
                except IncomparableRuns:
                    # The pair breaks an invariant now (a re-scoring with other labels): gate_result
                    # fails the gate naming it, where the verdict would refuse to judge at all.
                    gate = None
        if gate is None:
            gate = gate_result(
                baseline,
                metrics,
                thresholds_from(s),
                baseline_run_id=s.baseline,
                allow_regressions=s.allow_regressions,
                ignore_invariants=s.ignore_invariants,
                allow_missing_metrics=s.allow_missing_metrics,
                same_corpus=s.same_corpus,
                allow_label_change=s.allow_label_change,
            )
            gate["mode"] = "threshold"
        metrics["gate"] = gate
    if s.thresholds:  # issue 13: absolute floors, beside the baseline gate
        metrics["thresholds"] = threshold_check(metrics, s.thresholds)
    return gate


def gate_of(s: RunSettings) -> str:
    """What decides run_eval's --baseline gate: --gate as given, else compare_runs' own rule
    (`regressions.default_gate`: thresholds other than the defaults ask for the threshold
    gate)."""
    from evalkit.compare.regressions import default_gate

    return s.gate if s.gate is not None else default_gate(thresholds_from(s))


def recheck_verdicts(run: RunDir, metrics: dict[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """After a re-scoring changed a run's numbers, its stored verdicts judged again on them
    (issue 25: metrics.json must never say "gate passed" about a recall it no longer holds).

    The gate is re-run against the baseline named in config.json's settings, read again
    from beside the run; when that run is gone or has no metrics.json, the old gate is
    removed and a `gate_not_rechecked` warning says so (compare_runs can judge the pair).
    The `--threshold` floors need nothing but the run. `settings` is config.json's.
    """
    if metrics.get("gate") is None and metrics.get("thresholds") is None:
        return metrics
    s = RunSettings.model_validate({k: v for k, v in settings.items() if k in RunSettings.model_fields})
    baseline = None
    if metrics.get("gate") is not None:
        base_id = s.baseline or metrics["gate"].get("baseline_run_id")
        base_dir = run.path.parent / str(base_id) if base_id else None
        baseline = RunDir(base_dir).read_metrics() if base_dir is not None and base_dir.is_dir() else None
        if baseline is None:
            del metrics["gate"]
            metrics["warnings"] = [
                *(w for w in metrics.get("warnings") or [] if w.get("kind") != "gate_not_rechecked"),
                {
                    "kind": "gate_not_rechecked",
                    "severity": "warning",
                    "message": f"re-scoring changed this run's numbers and its baseline run {base_id} is not "
                    f"beside it to judge them again: the run-time gate was removed; use compare_runs",
                },
            ]
    verdicts(metrics, s, baseline, run)
    return metrics
