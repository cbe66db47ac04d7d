"""The derive step: a run's records -> metrics.json, summary.md and results.json.

One derive for every command that changes a run. run_eval, `evalkit merge`,
score_retrieval, score_abstention and judge_answers write (or rewrite) the per-case records
they changed and then derive: one pass over the records feeds the aggregate
(`aggregate_records`), the run warnings (`health`), the invariants the gate compares, the
worst cases and the trials; then the gate and the `--threshold` floors (`verdicts`); then
metrics.json is written whole and `summary.write_derived` writes summary.md and results.json
from it. No command assembles or patches metrics.json itself, so a number in metrics.json
is what the records say by construction, not because tests hold two computations equal.

`RunFacts` is what metrics.json says about a run beyond its records (settings, config,
eval-set version, judge stats, the baseline, and the provenance blocks a re-scoring owns).
run_eval and merge build it from what they just did; a re-scoring starts from
`RunFacts.stored` (what the run's files say) and changes what it re-scored.

- `derive_run`: the records are on disk (or were fed to a `RecordPass` as written).
- `rederive`: the records are rewritten and metrics.json computed from the same pass,
  committed as one update (`RunDir.write_together`).

A command killed before the derived files are written leaves a mark the next `open_run`
sees, and then derives them (summary.py).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import IO, Any

import orjson

from evalkit.config import RunSettings, judge_identity
from evalkit.derive.health import is_health_warning
from evalkit.derive.summary import open_run, write_derived
from evalkit.gate.fields import scored_forms
from evalkit.gate.floors import threshold_check
from evalkit.gate.regressions import gate_result
from evalkit.gate.thresholds import BUILTIN_THRESHOLDS, Thresholds
from evalkit.judges.reliability import DISAGREEMENT_WARNING, disagreement_warning
from evalkit.metrics.custom import CUSTOM_METRICS, CustomTally
from evalkit.schema import SCHEMA_VERSION
from evalkit.store.runlog import Cell, Cfg, Met, Rec
from evalkit.store.runs import RunDir, dumps_metrics

__all__ = [
    "RecordPass", "RunFacts", "derive_metrics", "derive_run", "gate_of", "now_utc", "open_run", "rederive",
    "run_invariants", "stored_grades", "stored_settings", "thresholds_from", "verdicts",
]


# The top-level metrics.json blocks a command owns rather than derives from records: each
# re-scoring's record of what it computed the numbers with. A derive keeps them as RunFacts
# carries them (`RunFacts.stored` reads them back).
OWNED_BLOCKS = (Met.RETRIEVAL_SCORING, Met.ABSTENTION_SCORING)
# Inside `aggregate_metrics`: judge_answers' spot check (a second judge's verdicts are not in
# the records).
OWNED_AGGREGATE = (Cell.JUDGE_RELIABILITY, Cell.JUDGE_BIAS)


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
    # What the per-case values are scored with when a re-scoring changed it: the cut-offs
    # (primary first; default settings.k), the labels' `cases_version` and scored gold forms
    # (default: config.json's eval set), the scorer (default: config.json's).
    ks: Sequence[int] | None = None
    cases_version: str | None = None
    gold_forms: Sequence[str] | None = None
    scorer: Mapping[str, Any] | None = None
    # The judge identity the gate compares (a list of them when judge_answers --ids left
    # verdicts from several judges); default: config.json's (`_judge_of`).
    judge: Any = None
    # metrics.json's `timestamp`: when the run's numbers were made (run_eval, merge: now). A
    # re-scoring keeps the run's (its own time is its provenance block's `scored_at`).
    timestamp: str | None = None
    # OWNED_BLOCKS and OWNED_AGGREGATE entries, as the commands that own them last wrote them.
    owned: Mapping[str, Any] = field(default_factory=dict)
    owned_aggregate: Mapping[str, Any] = field(default_factory=dict)

    @property
    def cutoffs(self) -> list[int]:
        return [int(k) for k in (self.ks or self.settings.k)]

    @classmethod
    def stored(cls, run: RunDir, config: Mapping[str, Any] | None = None,
               metrics: Mapping[str, Any] | None = None) -> RunFacts:
        """The facts the run's last derive had, read back from config.json and metrics.json:
        what a re-scoring starts from before it changes what it re-scored. The run's own
        warnings (`health`) are left out (the derive makes them again from the records);
        the gate's baseline is read again from beside the run (gone: a `gate_not_rechecked`
        warning, and no gate)."""
        config = run.read_config() if config is None else config
        metrics = (run.read_metrics() or {}) if metrics is None else metrics
        if config.get(Cfg.CONFIG_HASH) is None and metrics.get(Met.CONFIG_HASH) is not None:
            config = {**config, Cfg.CONFIG_HASH: metrics[Met.CONFIG_HASH]}  # a run folder written by hand
        settings = stored_settings(run, config)
        s = RunSettings.model_validate({k: v for k, v in settings.items() if k in RunSettings.model_fields})
        agg = metrics.get(Met.AGGREGATE) or {}
        invariants = metrics.get(Met.INVARIANTS) or {}
        timing = metrics.get(Met.RUN_TIMING) or {}
        merged = isinstance(timing, Mapping) and "merged_shards" in timing
        ks = metrics.get(Met.KS)
        facts = cls(
            settings=s, config=config,
            eval_set_commit_hash=metrics.get(Met.EVAL_SET_COMMIT_HASH, config.get(Met.EVAL_SET_COMMIT_HASH)),
            dataset_version=metrics.get(Met.DATASET_VERSION) or config.get(Cfg.DATASET_VERSION),
            judge_stats=agg.get(Cell.JUDGE),
            pre_run_warnings=[w for w in metrics.get(Met.WARNINGS) or []
                              if isinstance(w, Mapping) and not is_health_warning(w)
                              and w.get("kind") not in ("gate_not_rechecked", DISAGREEMENT_WARNING)],
            session_wall_s=float(timing.get("session_wall_s") or 0.0) if not merged else 0.0,
            timing=dict(timing) if merged else None,
            ks=[int(k) for k in ks] if isinstance(ks, list) and ks else None,
            cases_version=metrics.get(Met.CASES_VERSION),
            gold_forms=invariants.get("gold_forms") if isinstance(invariants.get("gold_forms"), list) else None,
            scorer=invariants.get("scorer") if isinstance(invariants.get("scorer"), Mapping) else None,
            judge=invariants.get("judge"),
            timestamp=metrics.get(Met.TIMESTAMP) if isinstance(metrics.get(Met.TIMESTAMP), str) else None,
            owned={k: metrics[k] for k in OWNED_BLOCKS if metrics.get(k) is not None},
            owned_aggregate={k: agg[k] for k in OWNED_AGGREGATE if k in agg},
        )
        facts.baseline, missing = _stored_baseline(run, s, metrics)
        if missing is not None:
            facts.pre_run_warnings = [*facts.pre_run_warnings, missing]
        return facts


def stored_settings(run: RunDir, config: Mapping[str, Any]) -> dict[str, Any]:
    """config.json's `settings` as run_eval stored them (a re-scoring and the TREC export read
    the run's K, snippets and folder mode there).

    Raises:
        BadConfig: config.json holds no settings.k (not a run_eval run)."""
    from evalkit.errors import BadConfig, Problem

    settings = config.get(Cfg.SETTINGS)
    if not isinstance(settings, Mapping) or not settings.get("k"):
        raise BadConfig(Problem("config.json has no settings.k (not written by run_eval?)", path=str(run.config_path)))
    return dict(settings)


def _stored_baseline(run: RunDir, s: RunSettings, metrics: Mapping[str, Any]) -> tuple[dict | None, dict | None]:
    """(the baseline run's metrics.json, None) for a run whose metrics.json holds a gate;
    (None, a `gate_not_rechecked` warning) when that run is gone from beside it (issue 25:
    metrics.json must never say "gate passed" about numbers it no longer holds)."""
    gate = metrics.get(Met.GATE)
    if not isinstance(gate, Mapping):
        return None, None
    base_id = s.baseline or gate.get("baseline_run_id")
    base_dir = run.path.parent / str(base_id) if base_id else None
    baseline = RunDir(base_dir).read_metrics() if base_dir is not None and base_dir.is_dir() else None
    if baseline is not None:
        return baseline, None
    return None, {
        "kind": "gate_not_rechecked",
        "severity": "warning",
        "message": f"re-scoring changed this run's numbers and its baseline run {base_id} is not "
        f"beside it to judge them again: the run-time gate was removed; use compare_runs",
    }


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
    missing_fields: Iterable[str], judge: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
    asked_k: int | None = None,
    scorer: Mapping[str, Any] | None = None, gold_forms: Iterable[str] | None = None,
    history: str | None = None,
) -> dict[str, Any]:
    """metrics.json's `invariants`: what seed 000 §10.1 compares beyond the dataset version.

    `debug_fields_missing` is every contract field some record's response left out (the
    union of records' `missing_fields`), over the cases the target answered. `asked_k` is
    how many chunks the target was asked for (the largest K): what its answers saw
    (`gate.asked_k_of`; a later re-score to smaller K does not change it). `scorer` is
    config.json's (`gate.scorer_identity()` of the run_eval that scored the records); a
    run made before evalkit recorded one has none. `gold_forms` (`fields.scored_forms`):
    the gold support forms the labels use, so a field one target leaves out blinds only
    the metrics that read it (gate.fields); none for a run made before. `history`: what a
    run of conversations sent its later turns (--history), absent for single questions.
    """
    if isinstance(judge, Mapping):
        judge = dict(judge) or None
    elif isinstance(judge, Sequence) and not isinstance(judge, str):  # several judges (judge_answers --ids)
        judge = [dict(j) for j in judge] or None
    out = {"judge": judge or None, "debug_fields_missing": sorted(set(missing_fields))}
    if asked_k is not None:
        out["asked_k"] = int(asked_k)
    if isinstance(scorer, Mapping):
        out["scorer"] = dict(scorer)
    if gold_forms is not None:
        out["gold_forms"] = list(gold_forms)
    if history is not None:
        out["history"] = history
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

    def __init__(self, s: RunSettings, *, rows: bool = False, ks: Sequence[int] | None = None,
                 grades: Mapping[str, Any] | None = None) -> None:
        from evalkit.compare.trials import TrialStats
        from evalkit.derive.health import RunHealth
        from evalkit.metrics.aggregate import RecordTable
        from evalkit.metrics.conversations import ConversationStats
        from evalkit.report.summary_md import WorstCases

        ks = list(ks or s.k)  # the cut-offs the per-case values hold (RunFacts.cutoffs)
        self.table = RecordTable(ks)
        self.conversations = ConversationStats(ks[0])
        self.health = RunHealth()
        self.missing: set[str] = set()
        self.worst = WorstCases(ks[0])
        self.trials = TrialStats(ks) if s.trials > 1 else None
        # A project's own metrics' per-case values (rubric judges, Python scorers), for
        # metrics.json's custom_metrics when config.json defines them.
        self.custom = CustomTally()
        self.n = 0
        # The run's human grades (`stored_grades`) and the graded records, for judge_agreement;
        # None: not known when the pass began (derive_metrics reads them from the run).
        self.grades = dict(grades) if grades is not None else None
        self.graded: list[dict[str, Any]] = []
        self.scores: list[tuple] = []  # judges.grades.score_row of every record, for judge_ppi
        self._score_row = None
        if self.grades:
            from evalkit.judges.grades import score_row

            self._score_row = score_row  # looked up once: add() runs per record
        self._rows: IO[bytes] | None = None
        if rows:
            from evalkit.report.results_json import MAX_CASES, encode_row

            # Looked up once, not per record: add() runs on the run's event loop.
            # A megabyte's buffer: a row is about a kilobyte, and the default 8 KB buffer made
            # a write call every few records.
            self._rows, self._encode, self._max_rows = tempfile.TemporaryFile(buffering=1 << 20), encode_row, MAX_CASES

    def add(self, rec: dict[str, Any]) -> None:
        if self._rows is not None:
            if self.n < self._max_rows:
                self._rows.write(self._encode(rec) + b"\n")
            else:  # results.json leaves the rows of a bigger run out
                self._rows.close()
                self._rows = None
        if self._score_row is not None:
            self.scores.append(self._score_row(rec))
            if rec.get(Rec.CASE_ID) in self.grades:
                self.graded.append(rec)
        x = self.table.add_record(rec)
        if Rec.HISTORY in rec or (rec.get(Rec.CASE) or {}).get("conversation") is not None:
            self.conversations.add(rec, x)
        self.health.add(rec)
        self.custom.add(rec)
        self.missing.update(rec.get(Rec.MISSING_FIELDS) or [])
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
    if records is None:
        # One pass over results.jsonl for everything, results.json's rows included.
        records = RecordPass(facts.settings, rows=True, ks=facts.cutoffs, grades=stored_grades(run))
        for rec in run.iter_results():
            records.add(rec)
    try:
        metrics, gate = derive_metrics(run, facts, records)
        run.write_metrics(metrics)
        metrics = as_written(metrics)
        committed = dict(write_derived(run, metrics, records.worst, records.rows()) or metrics)
        return committed, gate
    finally:
        records.close()


def rederive(
    run: RunDir, facts: RunFacts, records: Iterable[dict[str, Any]], config: Mapping[str, Any] | None = None,
    *, before_derive: Callable[[RunFacts], None] | None = None,
) -> tuple[dict, dict | None]:
    """Rewrite results.jsonl with `records` (every record of the run, in file order) and
    derive metrics.json from the same pass, committed as one update with config.json (when
    given): a kill leaves the old files or the new ones (`RunDir.write_together`); then the
    derived files. `before_derive` is called with `facts` once every record went through (a
    re-scoring's provenance counts them). Returns (metrics.json, the gate or None)."""
    passed = RecordPass(facts.settings, rows=True, ks=facts.cutoffs, grades=stored_grades(run))
    out: dict[str, Any] = {}

    def fed() -> Iterator[dict[str, Any]]:
        for rec in records:
            passed.add(rec)
            yield rec

    def metrics() -> dict[str, Any]:
        if before_derive is not None:
            before_derive(facts)
        out["metrics"], out["gate"] = derive_metrics(run, facts, passed)
        return out["metrics"]

    try:
        run.write_together(results=fed(), metrics=metrics, config=config)
        written = as_written(out["metrics"])
        committed = dict(write_derived(run, written, passed.worst, passed.rows()) or written)
        return committed, out["gate"]
    finally:
        passed.close()


def _judge_of(config: Mapping[str, Any]) -> Any:
    """The judge identity the gate compares: the one config.json hashes (a list of them when
    judge_answers left the run's verdicts from several judges), else its judge's."""
    hashed = config.get("hashed")
    if isinstance(hashed, Mapping) and "judge" in hashed:
        return hashed["judge"]
    return judge_identity(config.get("judge"))


def as_written(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """metrics.json as it reads back from the file (`dumps_metrics`: keys sorted, numbers as
    JSON has them): what the derived files are rendered from, so a block built in another
    key order renders the same bytes."""
    return orjson.loads(dumps_metrics(metrics))


def stored_grades(run: RunDir) -> dict[str, dict[str, Any]] | None:
    """The run's human grades (label_eval.py --grade-answers), None without any."""
    from evalkit.judges.grades import grades_path, read_grades

    return read_grades(run) if grades_path(run).exists() else None


def derive_metrics(run: RunDir, facts: RunFacts, records: RecordPass) -> tuple[dict, dict | None]:
    """metrics.json, whole, from a pass over the run's records and the run's facts; the gate
    and the `--threshold` floors judged on it (`verdicts`). Nothing is written."""
    s, timing = facts.settings, facts.timing
    config = facts.config
    walls = [x.get("wall_s") for x in config.get("sessions") or []]
    suite_s = math.fsum(w for w in walls if isinstance(w, int | float))
    eval_set = config.get("eval_set") or {}
    body = records.table.result(suite_ms=None if timing is not None else suite_s * 1000)
    health, missing, trials = records.health, records.missing, records.trials
    metrics: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run.run_id,
        "timestamp": facts.timestamp or now_utc(),
        "config_hash": config.get("config_hash"),
        Met.EVAL_SET_COMMIT_HASH: facts.eval_set_commit_hash,
        "dataset_version": facts.dataset_version,
        "cases_version": facts.cases_version if facts.cases_version is not None else eval_set.get("cases_version"),
        "ks": facts.cutoffs,
        "seed": s.seed,
        **body,
        Met.RUN_TIMING: dict(timing) if timing is not None else {
            "session_wall_s": round(facts.session_wall_s, 3),
            "sessions": len(config.get("sessions") or []),
        },
    }
    if trials is not None:
        metrics["trials"] = trials.result()
    conversations = records.conversations.result()
    if conversations is not None:
        metrics[Met.CONVERSATIONS] = conversations
    agg = metrics[Met.AGGREGATE]
    # JudgeRunner.stats(): cache hits/misses, calls, tokens, cost (this session's calls).
    agg["judge"] = dict(facts.judge_stats) if facts.judge_stats is not None else None
    agg.update(facts.owned_aggregate)
    if records.grades is None:
        records.grades = stored_grades(run)
        records.graded = list(run.iter_results()) if records.grades else []
        if records.grades:
            from evalkit.judges.grades import score_row

            records.scores = [score_row(r) for r in records.graded]
    if records.grades:  # human grades against the verdicts in the records
        from evalkit.judges.grades import agreement_of, corrected_means

        agg[Cell.JUDGE_AGREEMENT] = agreement_of(records.grades, records.graded)
        agg[Cell.JUDGE_PPI] = corrected_means(records.grades, records.scores)
    custom = config.get(CUSTOM_METRICS)
    if isinstance(custom, Mapping) and custom:  # the rubrics and scorers `evalkit score` ran on this run
        agg[CUSTOM_METRICS] = records.custom.result(custom)
    forms = facts.gold_forms
    if forms is None and isinstance(eval_set.get("gold_forms"), list):
        forms = scored_forms(eval_set["gold_forms"], s.require_snippets)
    scorer = facts.scorer if facts.scorer is not None else config.get("scorer")
    judge = facts.judge if facts.judge is not None else _judge_of(config)
    metrics[Met.INVARIANTS] = run_invariants(missing, judge, s.request_k, scorer,
                                           list(forms) if forms is not None else None,
                                           history=s.history if conversations is not None else None)
    metrics["warnings"] = [*facts.pre_run_warnings, *health.warnings()]
    # made again from the reliability block on every derive, as the health warnings are
    if (unstable := disagreement_warning(agg.get(Cell.JUDGE_RELIABILITY))) is not None:
        metrics["warnings"].append(unstable)
    metrics.update(facts.owned)
    gate = verdicts(metrics, s, facts.baseline, run, config)
    return metrics, gate


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
    (`gate.decision.default_gate`: thresholds other than the defaults ask for the threshold
    gate)."""
    from evalkit.gate.decision import default_gate

    return s.gate if s.gate is not None else default_gate(thresholds_from(s))
