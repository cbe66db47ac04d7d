"""Re-scoring a stored run: retrieval and abstention metrics from results.jsonl, merged into metrics.json.

The library side of `score_retrieval.py` and `score_abstention.py` (the way `inspect score
LOG` re-scores a log): the target is never called again. Each record is read once from
results.jsonl, re-scored with the labels of the eval set config.json names (or one given
explicitly), and streamed into `aggregate_records`, so every number has run_eval's
definition and memory does not grow with the run (`aggregate_records` keeps one float per
case and metric for its exact sums; nothing else is kept per case).

The gold labels come from the eval set *file*: re-scoring after labels were fixed is the
point. The file must still hash to the run's `dataset_version`, unless it is named
explicitly (`eval_set=`), so a changed file is never used by accident. When it does hash
the same, the cases the records carry are that file's cases (byte-identical input,
identical validation), so the file is hashed but not parsed again.

What each function recomputes replaces the same keys in metrics.json; everything else
(the judges' numbers, latency, the gate, run metadata) stays, except that the top-level
`dataset_version` (with `cases_version` and `invariants.gold_forms`) names the labels the
per-case values are now scored with (`_label_identity`): labels are part of a run's identity. If the eval set moved cases
to other groups (answerable, tags, category, difficulty, domain), the slices and every
aggregate that depends on those fields change too: then the whole aggregate is rewritten
from the re-scored records, and the result says so.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from evalkit.collector import fewer_collections
from evalkit.derive import (
    RecordPass,
    RunFacts,
    derive_run,
    rederive,
    stored_grades,
    stored_settings,
)
from evalkit.errors import BadConfig, InputError, Problem
from evalkit.gate.fields import scored_forms
from evalkit.gate.invariants import scorer_identity
from evalkit.metrics.aggregate import (
    MEAN_METRICS,
)
from evalkit.metrics.keys import ir_measures_values
from evalkit.metrics.registry import METRICS
from evalkit.metrics.retrieval import (
    recorded_acknowledgement,
    score_case_retrieval,
    validate_ks,
)
from evalkit.store.runlog import Cell, Met, Rec
from evalkit.store.runs import RunDir

__all__ = [
    "ABSTENTION_KEYS",
    "RETRIEVAL_KEYS",
    "AbstentionScoring",
    "EvalSetSource",
    "RetrievalScoring",
    "eval_set_version",
    "score_abstention",
    "score_retrieval",
]

# The cell keys each script owns (EVAL.md "Aggregation"); with their `n` entries.
# Named, not "every mean but a few": a metric added later (a judge's, run_eval's) must not be
# overwritten with null by a re-scoring that never computes it.
RETRIEVAL_KEYS = tuple(m.key for m in METRICS if m.stage == "retrieval")  # the registry's retrieval stage
assert set(RETRIEVAL_KEYS) <= set(MEAN_METRICS)
_RETRIEVAL_EXTRA = ("k", Cell.AT_K, "n_unlabeled")
ABSTENTION_KEYS = tuple(m.key for m in METRICS if m.stage == "abstention")  # the registry's abstention stage
_ABSTENTION_EXTRA = ("abstention_confusion", "n_abstention_unknown")
# Case fields aggregate_records groups or filters by, besides the gold labels.
_GROUP_FIELDS = ("tags", "category", "difficulty", "domain", "language", "doc_language", "scenario")
_CLASSIFIERS = ("heuristic", "llm")


# --------------------------------------------------------------------------- the eval set


@dataclass
class EvalSetSource:
    """Where the gold labels came from.

    Attributes:
        paths: the eval set files/folders read.
        version: their dataset_version now (sha256, DESIGN.md §6).
        run_version: the run's dataset_version (config.json), None when not recorded.
        origin: "config.json" (the paths the run used, unchanged) or "--eval-set" (given).
    """

    paths: list[str]
    version: str
    run_version: str | None
    origin: str

    @property
    def changed(self) -> bool:
        return self.version != self.run_version

    def to_json(self) -> dict[str, Any]:
        return {
            "paths": list(self.paths),
            "version": self.version,
            "run_version": self.run_version,
            "origin": self.origin,
            "changed": self.changed,
        }


def eval_set_version(paths: Sequence[str | Path]) -> str:
    """dataset_version of eval set files without parsing them: sha256 of the file's bytes,
    or for several files (a folder) sha256 of their sha256s, one per line, in load order.
    The same value `evalkit.evalset.load.load_eval_set(paths).version` gives.

    Raises:
        BadEvalSet: a path that does not exist or a folder without .jsonl files.
    """
    shas = []
    for path in _eval_set_files(paths):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        shas.append(h.hexdigest())
    if len(shas) == 1:
        return shas[0]
    return hashlib.sha256("\n".join(shas).encode()).hexdigest()


def _eval_set_files(paths: Sequence[str | Path]) -> list[Path]:
    """The files `evalkit.evalset.load.resolve_eval_set_paths` reads, in its order (a folder: its
    *.jsonl, sorted), without importing the loader and its models (a fifth of a second)."""
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        found = sorted(p.glob("*.jsonl")) if p.is_dir() else [p] if p.is_file() else []
        if not found:
            from evalkit.evalset.load import resolve_eval_set_paths

            resolve_eval_set_paths([raw])  # raises BadEvalSet with its own message
        files.extend(found)
    return files


def _short(version: str | None) -> str:
    return "none recorded" if not version else version


def _config_damaged(cfg: Mapping[str, Any], version: str) -> bool:
    """Whether config.json's dataset_version, not the eval set, is what changed: the eval set
    still hashes to the version config.json's eval_set block records (run_eval writes the
    two alike; bytes damaged in one leave the other as it was)."""
    return version == (cfg.get("eval_set") or {}).get("version")


def _labels(
    run: RunDir,
    cfg: Mapping[str, Any],
    eval_set: str | Path | Sequence[str | Path] | None,
    records_version: str | None = None,
) -> tuple[EvalSetSource, _GivenCases | None]:
    """The label source, and id -> case (JSON) when the records' own cases cannot serve.

    `records_version`: the dataset_version of the cases the records hold now (a re-scoring
    with other labels rewrote them); when it is not the eval set's, its cases are read.

    Raises:
        InputError: the eval set config.json names is missing or changed (both hashes shown),
            or the one given does not validate.
    """
    run_version = cfg.get("dataset_version")
    if eval_set is not None:
        paths = [str(eval_set)] if isinstance(eval_set, str | Path) else [str(p) for p in eval_set]
        eval_version, cases = _read_cases(paths)
        return EvalSetSource(paths, eval_version, run_version, "--eval-set"), cases

    paths = [str(p) for p in ((cfg.get("eval_set") or {}).get("paths") or (cfg.get("settings") or {}).get("eval_set") or [])]
    if not paths:
        raise BadConfig(
            Problem("config.json names no eval set (eval_set.paths); pass --eval-set PATH", path=str(run.config_path))
        )
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise BadConfig(
            [
                Problem(
                    f"the eval set run {run.run_id} used is not there (paths are relative to where run_eval ran); "
                    "pass --eval-set PATH",
                    path=p,
                    field="eval_set.paths",
                )
                for p in missing
            ]
        )
    version = eval_set_version(paths)
    if version != run_version and _config_damaged(cfg, version):
        raise BadConfig(
            Problem(
                f"{_short(run_version)} is not the version its eval_set block records, which "
                f"{', '.join(paths)} still hashes to: config.json looks damaged; restore it, or pass "
                f"{' '.join(f'--eval-set {p}' for p in paths)} to re-score with the eval set as it is",
                path=str(run.config_path),
                field="dataset_version",
            )
        )
    if version != run_version:
        raise BadConfig(
            Problem(
                f"the eval set changed since run {run.run_id}: the run used dataset_version {_short(run_version)}, "
                f"{', '.join(paths)} now hashes to {version}; pass {' '.join(f'--eval-set {p}' for p in paths)} to re-score "
                "with it as it is now",
                field="--eval-set",
            )
        )
    source = EvalSetSource(paths, version, run_version, "config.json")
    if records_version is not None and records_version != version:
        return source, _read_cases(paths)[1]
    return source, None


def _read_cases(paths: list[str]) -> tuple[str, _GivenCases]:
    """(dataset_version, the cases by id) of an eval set."""
    from evalkit.evalset.load import load_eval_set

    loaded = load_eval_set(paths)
    return loaded.version, _GivenCases(loaded.cases, loaded.ids, loaded.cases_version, loaded.gold_forms)


class _GivenCases:
    """An eval set's cases by id, each as JSON made when a record asks for it, and the set's
    label identity (`EvalSet.cases_version`, `EvalSet.gold_forms`).

    The loaded set keeps its cases as the lines they were read from, compressed (100,000
    cases: 5 MB, where JSON strings of every case took 66 MB and the models 470 MB); a case
    is rebuilt and dumped once, for the record that carries it.
    """

    def __init__(
        self, cases: Sequence[Any], ids: Sequence[str], cases_version: str | None = None, gold_forms: Sequence[str] = ()
    ) -> None:
        self.cases = cases
        self.index = {case_id: i for i, case_id in enumerate(ids)}
        self.cases_version = cases_version
        self.gold_forms = list(gold_forms)

    def get(self, case_id: str) -> str | None:
        i = self.index.get(case_id)
        return None if i is None else self.cases[i].model_dump_json()


class _Cases:
    """The case to score each record with: the record's own, or the given eval set's."""

    def __init__(self, cases: _GivenCases | None) -> None:
        self.cases = cases
        self.missing: list[str] = []
        self.regrouped = 0

    def of(self, rec: dict[str, Any], line: int, results_path: Path) -> dict[str, Any] | None:
        if self.cases is None:
            case = rec.get("case")
            if not isinstance(case, dict):
                raise InputError(
                    Problem("record holds no case; pass --eval-set PATH to score it", path=str(results_path), line=line)
                )
            return case
        case_id = rec.get(Rec.CASE_ID)
        raw = self.cases.get(case_id) if isinstance(case_id, str) else None
        if raw is None:
            self.missing.append(str(case_id))
            return None
        case = orjson.loads(raw)
        old = rec.get("case") or {}
        if _grouping(old) != _grouping(case):
            self.regrouped += 1
        return case


def _label_identity(
    source: EvalSetSource, given_cases: _GivenCases | None, cfg: Mapping[str, Any], require_snippets: bool
) -> dict[str, Any]:
    """The metrics.json keys that name the labels the per-case values are scored with: the
    top-level `dataset_version` (issue 36: re-scoring with other labels changes it wherever
    it is shown) and `cases_version`, and `invariants.gold_forms` (`fields.scored_forms`).
    config.json keeps the run's own: the eval set its questions were asked from."""
    if given_cases is not None:
        cases_version, forms = given_cases.cases_version, given_cases.gold_forms
    else:  # the records' own labels: the eval set config.json names, unchanged
        es = cfg.get("eval_set") or {}
        cases_version, forms = es.get("cases_version"), es.get("gold_forms")
    out: dict[str, Any] = {"dataset_version": source.version}
    if cases_version:
        out["cases_version"] = cases_version
    if isinstance(forms, list):
        out[Met.INVARIANTS] = {"gold_forms": scored_forms(forms, require_snippets)}
    return out


def _grouping(case: Mapping[str, Any]) -> tuple:
    return (
        case.get("answerable", True) is not False,
        tuple(sorted({str(t) for t in (case.get("tags") or [])})),
        *(case.get(f) for f in _GROUP_FIELDS[1:]),
    )


def _missing_problem(missing: list[str], source: EvalSetSource) -> BadConfig:
    shown = ", ".join(repr(m) for m in missing[:10]) + (f" … and {len(missing) - 10} more" if len(missing) > 10 else "")
    return BadConfig(
        Problem(
            f"{len(missing)} case{'s' if len(missing) != 1 else ''} of the run {'are' if len(missing) != 1 else 'is'} "
            f"not in the eval set ({shown}): score against an eval set that still has them",
            path=", ".join(source.paths),
            field="--eval-set",
        )
    )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


# --------------------------------------------------------------------------- retrieval


@dataclass
class RetrievalScoring:
    """What `score_retrieval` did.

    Attributes:
        run_id / run_dir: the run.
        ks: the cut-offs scored (ks[0] is the primary K).
        previous_primary_k: metrics.json's primary K before this scoring.
        primary_k_chosen: ks[0] is a `primary_k` asked for (now or by an earlier scoring),
            not the run's own.
        require_snippets: whether snippets were enforced.
        eval_set: where the gold labels came from.
        n_records: records scored.
        n_regrouped: cases whose answerable/tags/category/difficulty/domain/language differ in the
            eval set from the run's (then the whole aggregate was recomputed).
        snippets_on_cut_text: snippets were checked on texts cut to 200 characters
            (allow_truncated_text): snippet-based numbers are upper bounds.
        n_cut_chunks: retrieved chunks whose stored text was cut (counted with snippets on).
        n_references_dropped: records whose references beyond the stored ones were dropped
            at run time (attribution and recency are scored on the stored ones).
        processes: how many processes scored results.jsonl (see `workers`).
        warnings: one line each.
        metrics: metrics.json after the update.
    """

    run_id: str
    run_dir: Path
    ks: list[int]
    require_snippets: bool
    eval_set: EvalSetSource
    n_records: int
    previous_primary_k: int | None = None
    primary_k_chosen: bool = False
    n_regrouped: int = 0
    snippets_on_cut_text: bool = False
    n_cut_chunks: int = 0
    n_references_dropped: int = 0
    processes: int = 1
    case_sensitive: bool = True
    results_rewritten: bool = False
    warnings: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)

    def per_case(self) -> dict[str, Any]:
        """What the per-case `retrieval_metrics` in results.jsonl are now computed with."""
        return per_case_identity(self.ks, self.require_snippets, self.case_sensitive, self.eval_set.version,
                                 self.snippets_on_cut_text, scorer_identity())

    def provenance(self) -> dict[str, Any]:
        """metrics.json's `retrieval_scoring`: what the retrieval numbers were computed with."""
        return {
            "scored_at": _now(),
            "ks": list(self.ks),
            "primary_k_from": "--primary-k" if self.primary_k_chosen else "config.json",
            "require_snippets": self.require_snippets,
            "case_sensitive": self.case_sensitive,
            "snippets_on_cut_text": self.snippets_on_cut_text,
            "eval_set": self.eval_set.to_json(),
            "n_records": self.n_records,
            "n_regrouped": self.n_regrouped,
            "per_case": self.per_case(),
            "results_rewritten": self.results_rewritten,
        }

    def to_json(self) -> dict[str, Any]:
        """The object `score_retrieval.py --json` prints."""
        agg = self.metrics.get(Met.AGGREGATE) or {}
        return {
            **_scoring_json(self, Met.RETRIEVAL_SCORING, (*RETRIEVAL_KEYS, *_RETRIEVAL_EXTRA)),
            "ir_measures": ir_measures_values(agg.get(Cell.AT_K)),  # the @K values by ir_measures name
        }


def per_case_identity(
    ks: Sequence[int], require_snippets: bool, case_sensitive: bool, dataset_version: str | None, cut_text: bool,
    scorer: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything a record's `retrieval_metrics` depends on besides the record itself: the
    scoring settings and the scorer (`gate.scorer_identity()`; None: a run made before evalkit
    recorded it, so a re-score rewrites its per-case values)."""
    return {
        "ks": [int(k) for k in ks],
        "require_snippets": bool(require_snippets),
        "case_sensitive": bool(case_sensitive),
        "dataset_version": dataset_version,
        "snippets_on_cut_text": bool(cut_text),
        "scorer": dict(scorer) if isinstance(scorer, Mapping) else None,
    }


def _stored_per_case(old: Mapping[str, Any] | None, cfg: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """What the per-case values in results.jsonl were computed with: the last re-scoring's
    record of it, else run_eval's own settings (it scores case-sensitively, on full text)."""
    last = ((old or {}).get(Met.RETRIEVAL_SCORING) or {}).get("per_case")
    if isinstance(last, Mapping):
        return dict(last)
    return per_case_identity(settings["k"], bool(settings.get("require_snippets")), True, cfg.get("dataset_version"), False,
                             cfg.get("scorer"))


def _scoring_json(result: Any, provenance: str, keys: Sequence[str]) -> dict[str, Any]:
    """The `--json` object of a re-scoring: the run, its provenance block in metrics.json,
    the aggregate keys it owns (and their n), by_category and the warnings."""
    agg = result.metrics.get(Met.AGGREGATE) or {}
    return {
        "run_id": result.run_id,
        "run_dir": str(result.run_dir),
        provenance: result.metrics.get(provenance),
        Met.AGGREGATE: {k: agg.get(k) for k in (*keys, "n")},
        Met.BY_CATEGORY: result.metrics.get(Met.BY_CATEGORY),
        "warnings": list(result.warnings),
    }


def check_ks(ks: Sequence[int] | None, run_ks: Sequence[int], flag: str = "--k") -> list[int]:
    asked = max(run_ks)
    ks = validate_ks(list(ks) if ks else list(run_ks))
    too_large = [k for k in ks if k > asked]
    if too_large:
        raise BadConfig(
            Problem(
                f"K={too_large[0]} is larger than the K={asked} the run asked its target for (config.json settings.k = "
                f"{list(run_ks)}): positions past {asked} were never retrieved; use {flag} {asked} or less, or run again "
                f"with --k {too_large[0]}",
                field=flag,
            )
        )
    return ks


def current_primary_k(metrics: Mapping[str, Any] | None, run_ks: Sequence[int]) -> int:
    """The run's primary K: the first K run_eval was given (config.json settings.k), unless a
    re-scoring was asked for another (`primary_k`, recorded in metrics.json's
    retrieval_scoring.primary_k_from), which then stays. A primary K that an earlier
    evalkit changed silently (the first --k of score_retrieval) is not kept."""
    ks = (metrics or {}).get("ks")
    first = ks[0] if isinstance(ks, list) and ks else None
    chosen = ((metrics or {}).get(Met.RETRIEVAL_SCORING) or {}).get("primary_k_from") == "--primary-k"
    if chosen and isinstance(first, int) and not isinstance(first, bool) and 1 <= first <= max(run_ks):
        return first
    return int(run_ks[0])


def _stored_primary_k(metrics: Mapping[str, Any] | None) -> int | None:
    """metrics.json's primary K before a re-scoring (`ks[0]`), None without one."""
    ks = (metrics or {}).get("ks")
    first = ks[0] if isinstance(ks, list) and ks else None
    return first if isinstance(first, int) and not isinstance(first, bool) else None


def plan_ks(
    ks: Sequence[int] | None, primary_k: int | None, run_ks: Sequence[int], metrics: Mapping[str, Any] | None
) -> list[int]:
    """The cut-offs a re-scoring computes, primary K first.

    The primary K (the one behind the headline names, the slices, the gate and compare_runs'
    pairing) is `primary_k` when given, else the run's current one: `ks` only adds
    cut-offs, so `--k 1 --k 10` never moves a run's comparisons off its K.

    Raises:
        InputError: a K (or `primary_k`) below 1 or larger than the run asked its target for.
    """
    if primary_k is not None:
        check_ks([primary_k], run_ks, flag="--primary-k")
    primary = current_primary_k(metrics, run_ks) if primary_k is None else primary_k
    return check_ks([primary, *(ks or run_ks)], run_ks)


@dataclass
class _RescoreJob:
    """What a re-scoring pass needs; a forked worker inherits it (nothing is pickled)."""

    run: RunDir
    given_cases: _GivenCases | None
    ks: list[int]
    snippets: bool
    folder_mode: str | None
    case_sensitive: bool
    # False: the records' per-case values are already what this scoring computes (same
    # labels, K, snippets, case rule, scorer); they pass through unchanged to the derive.
    rescore: bool = True


@dataclass
class _Tally:
    """What a pass over the records counted, for the result's numbers and warnings."""

    records: int = 0
    cut_chunks: int = 0
    refs_dropped: int = 0
    missing: list[str] = field(default_factory=list)
    regrouped: int = 0
    processes: int = 1

    def merge(self, other: _Tally) -> None:
        self.records += other.records
        self.cut_chunks += other.cut_chunks
        self.refs_dropped += other.refs_dropped
        self.missing += other.missing
        self.regrouped += other.regrouped


def _rescored(job: _RescoreJob, tally: _Tally, start: int = 0, end: int | None = None) -> Iterator[dict[str, Any]]:
    """results.jsonl[start:end]'s records in file order; with `job.rescore` each gets its
    case (the labels scored) and its `retrieval_metrics` computed anew (EVAL.md "Retrieval
    metrics"). A record whose case the given eval set lacks is counted in `tally.missing`
    and left out (the caller refuses the scoring)."""
    cases = _Cases(job.given_cases if job.rescore else None)
    results_path, snippets = job.run.results_path, job.snippets
    for line, rec in enumerate(job.run.iter_results(start, end), start=1):
        case = cases.of(rec, line, results_path)
        if case is None:
            continue
        chunks = rec.get("retrieved_chunks") or []
        if snippets:
            tally.cut_chunks += sum(1 for c in chunks if isinstance(c, Mapping) and c.get("text_truncated"))
        if rec.get(Rec.REFERENCES_DROPPED):
            tally.refs_dropped += 1
        tally.records += 1
        if job.rescore:
            rec["case"] = case
            rec[Rec.RETRIEVAL_METRICS] = score_case_retrieval(
                case, chunks, rec.get("references") or [], rec.get("folder_selection"), job.folder_mode, job.ks,
                require_snippets=snippets, case_sensitive=job.case_sensitive, acknowledged=recorded_acknowledgement(rec),
            )
        yield rec
    tally.missing += cases.missing
    tally.regrouped += cases.regrouped


_PARALLEL_MIN_BYTES = 32 << 20
_JOB: _RescoreJob | None = None  # the job a forked worker scores a part of


def _score_part(span: tuple[int, int | None, str]) -> _Tally:
    """A forked worker: the records of one byte range re-scored into a file of their own."""
    assert _JOB is not None
    start, end, path = span
    tally = _Tally()
    with fewer_collections(), open(path, "wb", buffering=1 << 20) as f:
        for rec in _rescored(_JOB, tally, start, end):
            f.write(orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
    return tally


def _rescored_stream(job: _RescoreJob, tally: _Tally, workers: int | None) -> Iterator[dict[str, Any]]:
    """Every record of results.jsonl re-scored, in file order: in forked worker processes
    when the file is large (each writes its part to a temporary file, read back here in
    order), else in this process. Scoring (about two thirds of the work) runs side by side;
    the derive that takes the records runs here, as it does for run_eval.

    One process when it is the better choice (a small file, one CPU, a platform without
    fork, other threads running: forking them is unsafe) or when a worker failed: this
    process then scores everything and raises the error with its true line number."""
    global _JOB
    spans = _parallel_spans(job, workers)
    if spans is None:
        yield from _rescored(job, tally)
        return
    import multiprocessing
    import tempfile
    from concurrent.futures import ProcessPoolExecutor

    with tempfile.TemporaryDirectory(prefix="evalkit-rescore-") as tmp:
        parts = [(start, end, str(Path(tmp) / f"part-{i}.jsonl")) for i, (start, end) in enumerate(spans)]
        _JOB = job
        try:
            with ProcessPoolExecutor(len(parts), mp_context=multiprocessing.get_context("fork")) as pool:
                tallies = list(pool.map(_score_part, parts))
        except Exception:  # noqa: BLE001 - any worker failure: redo in this process, which reports it properly
            tallies = None
        finally:
            _JOB = None
        if tallies is None:
            yield from _rescored(job, tally)
            return
        for part in tallies:
            tally.merge(part)
        tally.processes = len(parts)
        for _, _, path in parts:
            with open(path, "rb", buffering=1 << 20) as f:
                for line in f:
                    yield orjson.loads(line)


def _parallel_spans(job: _RescoreJob, workers: int | None) -> list[tuple[int, int | None]] | None:
    """The byte ranges of results.jsonl forked workers score, or None for one process."""
    if workers is None:
        try:
            size = job.run.results_path.stat().st_size
        except OSError:
            return None
        if size < _PARALLEL_MIN_BYTES:
            return None
        workers = min(os.cpu_count() or 1, 8)
    if workers <= 1 or sys.platform != "linux" or threading.active_count() > 1:
        return None
    spans = job.run.split_results(workers)
    return spans if len(spans) >= 2 else None


def score_retrieval(
    run_id: str | RunDir,
    *,
    ks: Sequence[int] | None = None,
    primary_k: int | None = None,
    require_snippets: bool | None = None,
    eval_set: str | Path | Sequence[str | Path] | None = None,
    results_dir: str | Path = "results",
    allow_truncated_text: bool = False,
    case_sensitive: bool = True,
    workers: int | None = None,
) -> RetrievalScoring:
    """Recompute every retrieval metric of a stored run, then derive its metrics.json.

    Each record's stored chunks and references are matched against the gold labels
    (EVAL.md "Anchors") and scored at every K (EVAL.md "Retrieval metrics"). When anything
    the per-case values depend on changed (K, snippets, case sensitivity, the labels'
    dataset_version, the scorer), results.jsonl is rewritten with them (each record gets
    the labels scored, `case`, and its new `retrieval_metrics`) and metrics.json is derived
    from the same pass, in one update (`derive.rederive`); otherwise the stored per-case
    values are already these, and metrics.json is derived from them as they are
    (`derive.derive_run`). Either way every number of metrics.json is the derive's, as
    after run_eval, and `retrieval_scoring` records what the retrieval numbers were
    computed with. Re-scoring an unchanged run leaves every file as it was, timestamps
    aside.

    Args:
        run_id: the run (a folder name under `results_dir`), or an open RunDir.
        ks: cut-offs to score besides the primary K (default: the run's, config.json
            settings.k). None may exceed the K the run asked its target for.
        primary_k: make this K the primary one (the headline names, slices, gate and
            compare_runs' shared K). Default: the run's current primary K (metrics.json
            `ks[0]`, else the first settings.k), which `ks` never changes.
        require_snippets: enforce gold snippets (default: the run's setting).
        eval_set: label source given explicitly (files or folders); used even when it
            differs from the run's. Default: the paths in config.json, which must still
            hash to the run's dataset_version.
        results_dir: where run folders live.
        allow_truncated_text: with snippets required on a run stored without
            --store-full-text, check snippets on the 200-character prefixes anyway (a
            snippet missing from a cut text then does not fail the match: upper bounds).
        case_sensitive: compare paths and headings case-sensitively (EVAL.md "Anchors").
        workers: processes that re-score parts of results.jsonl side by side (1: this
            process only). Default: one per CPU (at most 8) when results.jsonl is larger
            than 32 MB, else 1. Workers are forked, so only on Linux and only while no
            other thread runs (forking a threaded process can deadlock). The numbers are
            the same either way: the parts are taken back in file order.

    Returns:
        RetrievalScoring, with the updated metrics.json in `.metrics`.

    Raises:
        InputError: unknown run (RunNotFound); a K (or primary_k) < 1 or larger than the run's; the eval
            set changed (both hashes) or is missing; a run case missing from the eval set
            given; snippets required on cut text without allow_truncated_text.
    """
    run = run_id if isinstance(run_id, RunDir) else RunDir.open(Path(results_dir), run_id)
    # One writer per run, from the first read to the last write: a judge_answers at work on
    # the run would otherwise lose this re-scoring's numbers, or this one lose its verdicts.
    with run.writer("score_retrieval"):
        return _score_retrieval(run, ks=ks, primary_k=primary_k, require_snippets=require_snippets, eval_set=eval_set,
                                allow_truncated_text=allow_truncated_text, case_sensitive=case_sensitive, workers=workers)


def _score_retrieval(
    run: RunDir, *, ks: Sequence[int] | None, primary_k: int | None, require_snippets: bool | None,
    eval_set: str | Path | Sequence[str | Path] | None, allow_truncated_text: bool, case_sensitive: bool,
    workers: int | None,
) -> RetrievalScoring:
    """score_retrieval's work, under the run's writer lock."""
    cfg = run.read_config()
    settings = stored_settings(run, cfg)
    old = run.read_metrics()
    ks = plan_ks(ks, primary_k, settings["k"], old)
    snippets = bool(settings.get("require_snippets")) if require_snippets is None else bool(require_snippets)
    cut_text = snippets and not settings.get("store_full_text")
    if cut_text and not allow_truncated_text:
        raise BadConfig(
            Problem(
                f"snippets are required, but run {run.run_id} stored chunk text cut to 200 characters (no "
                "--store-full-text): a snippet past the cut cannot be checked; pass --allow-truncated-text to score "
                "anyway (a snippet missing from a cut text then does not fail the match, so snippet-based numbers "
                "are upper bounds), or re-run with --store-full-text",
                field="--require-snippets",
            )
        )
    stored = _stored_per_case(old, cfg, settings)
    source, given_cases = _labels(run, cfg, eval_set, stored.get("dataset_version"))
    result = RetrievalScoring(
        run_id=run.run_id, run_dir=run.path, ks=ks, require_snippets=snippets, eval_set=source, n_records=0,
        previous_primary_k=_stored_primary_k(old), primary_k_chosen=ks[0] != settings["k"][0],
        snippets_on_cut_text=cut_text, case_sensitive=case_sensitive,
    )
    # The per-case values must say what metrics.json says (compare_runs pairs them; results.json
    # shows them; a later judge_answers aggregates them): when anything they depend on changed,
    # results.jsonl is rewritten with them, and metrics.json derived from the same pass.
    result.results_rewritten = result.per_case() != stored
    job = _RescoreJob(run=run, given_cases=given_cases, ks=ks, snippets=snippets,
                      folder_mode=settings.get("folder_mode"), case_sensitive=case_sensitive,
                      rescore=result.results_rewritten)
    facts = RunFacts.stored(run, cfg, old or {})
    facts.ks, facts.scorer = ks, scorer_identity()
    _label_facts(facts, _label_identity(source, given_cases, cfg, snippets))
    tally = _Tally()

    def finish(f: RunFacts) -> None:
        if tally.missing:
            raise _missing_problem(tally.missing, source)
        _retrieval_warnings(result, tally)
        f.owned = {**f.owned, Met.RETRIEVAL_SCORING: {**result.provenance(), "warnings": list(result.warnings)}}

    with fewer_collections():
        if result.results_rewritten:
            metrics, _ = rederive(run, facts, _rescored_stream(job, tally, workers), before_derive=finish)
        else:
            records = RecordPass(facts.settings, rows=True, ks=facts.cutoffs, grades=stored_grades(run))
            for rec in _rescored(job, tally):
                records.add(rec)
            finish(facts)
            metrics, _ = derive_run(run, facts, records)
    result.metrics = metrics
    return result


def _label_facts(facts: RunFacts, identity: Mapping[str, Any]) -> None:
    """The labels the per-case values are scored with (`_label_identity`), into the facts
    the derive writes metrics.json's dataset_version, cases_version and gold forms from."""
    facts.dataset_version = identity["dataset_version"]
    if identity.get("cases_version"):
        facts.cases_version = identity["cases_version"]
    forms = (identity.get(Met.INVARIANTS) or {}).get("gold_forms")
    if forms is not None:
        facts.gold_forms = forms


def _retrieval_warnings(result: RetrievalScoring, tally: _Tally) -> None:
    """The result's counts and warnings, once every record went through."""
    result.n_records, result.n_regrouped, result.processes = tally.records, tally.regrouped, tally.processes
    result.n_cut_chunks, result.n_references_dropped = tally.cut_chunks, tally.refs_dropped
    if tally.regrouped:
        result.warnings.append(
            f"{tally.regrouped} case(s) changed answerable, tags, category, difficulty, domain or language in the eval "
            "set: every aggregate of metrics.json (judges and abstention too) was recomputed with the new labels"
        )
    if result.snippets_on_cut_text and tally.cut_chunks:
        result.warnings.append(
            f"snippets were checked on {tally.cut_chunks} chunk text(s) cut to 200 characters: a snippet missing "
            "from a cut text did not fail the match, so snippet-based numbers are upper bounds"
        )
    if tally.refs_dropped:
        result.warnings.append(
            f"{tally.refs_dropped} record(s) stored only the first references of their answer: attribution and "
            "recency were scored on the stored ones (run_eval scored all of them)"
        )


# --------------------------------------------------------------------------- abstention


@dataclass
class AbstentionScoring:
    """What `score_abstention` did.

    Attributes:
        run_id / run_dir: the run.
        eval_set: where the answerable labels came from.
        classifier: "heuristic" | "llm" when answers without a target `abstained` were
            re-classified, else None (the records' abstention as stored).
        n_records: records read.
        n_classified: answers (re-)classified; n_classifier_failures: of those, the judge failed
            (left unknown, counted in n_abstention_unknown).
        n_changed: classified answers whose `abstained` differs from the stored one.
        n_regrouped: see RetrievalScoring.
        warnings: one line each.
        metrics: metrics.json after the update.
    """

    run_id: str
    run_dir: Path
    eval_set: EvalSetSource
    classifier: str | None
    n_records: int
    n_classified: int = 0
    n_classifier_failures: int = 0
    n_changed: int = 0
    n_regrouped: int = 0
    judge: dict[str, Any] | None = None
    results_rewritten: bool = False
    warnings: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)

    def provenance(self) -> dict[str, Any]:
        """metrics.json's `abstention_scoring`."""
        return {
            "scored_at": _now(),
            "classifier": self.classifier,
            "judge": self.judge,
            "eval_set": self.eval_set.to_json(),
            "n_records": self.n_records,
            "n_classified": self.n_classified,
            "n_classifier_failures": self.n_classifier_failures,
            "n_changed": self.n_changed,
            "n_regrouped": self.n_regrouped,
            "results_rewritten": self.results_rewritten,
        }

    def to_json(self) -> dict[str, Any]:
        """The object `score_abstention.py --json` prints."""
        return _scoring_json(self, Met.ABSTENTION_SCORING, (*ABSTENTION_KEYS, *_ABSTENTION_EXTRA))


def _needs_classifier(rec: Mapping[str, Any]) -> bool:
    """As the judge runner: no target error, a non-blank answer, and no `abstained` from the
    target (a classifier's earlier decision is made again)."""
    error = rec.get("error")
    if error and (not isinstance(error, Mapping) or error.get("kind") != "empty_answer"):
        return False
    answer = rec.get("answer")
    if not isinstance(answer, str) or not answer.strip():
        return False
    abst = rec.get("abstention") or {}
    return abst.get("abstained") is None or abst.get("method") in ("judge", "heuristic")


async def _classify(judge: Any, batch: list[dict[str, Any]], heuristic: bool, tally: dict[str, int]) -> None:
    """Re-classify the batch's answers in place (the record's `abstention`), concurrently."""
    import asyncio

    from evalkit.judges.base import JudgeFailure, JudgeItem
    from evalkit.metrics.abstention import score_case_abstention

    async def one(rec: dict[str, Any]) -> None:
        case = rec.get("case") or {}
        answerable = case.get("answerable", True) is not False
        item = JudgeItem(question=rec.get("question") or case.get("question") or "", answer=rec["answer"], answerable=answerable)
        out = await judge.judge("abstention", item)
        tally["classified"] += 1
        old = (rec.get("abstention") or {}).get("abstained")
        abst = dict(rec.get("abstention") or {})
        abst.update(abstained=None, hallucinated=None, false_abstention=None, method=None, reason=None, confidence=None)
        if isinstance(out, JudgeFailure):
            tally["failed"] += 1
        else:
            abst.update(score_case_abstention(answerable, bool(out.verdict["abstained"])))
            abst["method"] = "heuristic" if heuristic else "judge"
            abst["confidence"] = out.verdict.get("confidence")
            if out.verdict.get("phrase"):
                abst["reason"] = f"refusal phrase: {out.verdict['phrase']!r}"
        tally["changed"] += abst.get("abstained") != old
        rec["abstention"] = abst

    await asyncio.gather(*(one(r) for r in batch))


def score_abstention(
    run_id: str | RunDir,
    *,
    eval_set: str | Path | Sequence[str | Path] | None = None,
    results_dir: str | Path = "results",
    classifier: str | None = None,
    judge_settings: Any = None,
    batch_size: int = 64,
) -> AbstentionScoring:
    """Recompute the abstention metrics of a stored run and merge them into its metrics.json.

    Reads each record's `abstention.abstained` (EVAL.md "Abstention metrics") with the
    `answerable` label of the eval set (same rules as `score_retrieval`), and replaces
    `abstention_accuracy`, `hallucination_rate_unanswerable`, `false_abstention_rate`,
    precision / recall / F1 / decision accuracy, `abstention_confusion` and
    `n_abstention_unknown` (and their n) in every cell, plus `abstention_scoring`.

    With `classifier`, answers the target gave no `abstained` for are classified again
    first (the judge's fallback, EVAL.md "Abstention classifier"): "heuristic" (refusal
    phrases, offline) or "llm" (the judge `judge_settings` describe).

    What it re-scores per case goes back into results.jsonl in the same update as
    metrics.json (`RunDir.write_together`): the new decisions with a classifier; with labels
    other than those the per-case values were scored with, each record's case, its
    retrieval_metrics (re-scored as the last scoring did) and abstention, and then the whole
    aggregate is recomputed. Otherwise results.jsonl stays as it is.

    Args:
        run_id: the run, or an open RunDir.
        eval_set: label source given explicitly (see score_retrieval).
        results_dir: where run folders live.
        classifier: None, "heuristic" or "llm".
        judge_settings: evalkit.judges.JudgeSettings for "llm" (provider, model, cache ...).
        batch_size: answers classified concurrently (the judge's own limit still applies).

    Returns:
        AbstentionScoring, with the updated metrics.json in `.metrics`.

    Raises:
        InputError: unknown run; changed or missing eval set; unknown classifier; a judge
            that cannot be built (JudgeConfigError).
    """
    if classifier is not None and classifier not in _CLASSIFIERS:
        raise BadConfig(Problem(f"unknown classifier {classifier!r}; expected heuristic or llm", field="--classifier"))
    run = run_id if isinstance(run_id, RunDir) else RunDir.open(Path(results_dir), run_id)
    with run.writer("score_abstention"):  # one writer per run (see score_retrieval)
        return _score_abstention(run, eval_set=eval_set, classifier=classifier, judge_settings=judge_settings,
                                 batch_size=batch_size)


def _score_abstention(
    run: RunDir, *, eval_set: str | Path | Sequence[str | Path] | None, classifier: str | None, judge_settings: Any,
    batch_size: int,
) -> AbstentionScoring:
    """score_abstention's work, under the run's writer lock."""
    cfg = run.read_config()
    settings = stored_settings(run, cfg)
    old = run.read_metrics()
    per_case = _stored_per_case(old, cfg, settings)
    source, given_cases = _labels(run, cfg, eval_set, per_case.get("dataset_version"))
    judge = _build_classifier(classifier, judge_settings)
    cases = _Cases(given_cases)
    tally = {"records": 0, "classified": 0, "failed": 0, "changed": 0, "differs": 0}
    # Labels other than those the per-case values were scored with: retrieval is re-scored
    # per case too, as the last scoring did it (K, snippets, case rule), the whole aggregate
    # recomputed, and results.jsonl rewritten with both, so every reader sees the new labels.
    relabelled = given_cases is not None and source.version != per_case.get("dataset_version")
    ks = list((old or {}).get("ks") or per_case["ks"])
    snippets = bool(per_case.get("require_snippets"))
    case_sensitive = bool(per_case.get("case_sensitive", True))

    def labelled() -> Iterator[dict[str, Any]]:
        results_path = run.results_path
        for line, rec in enumerate(run.iter_results(), start=1):
            case = cases.of(rec, line, results_path)
            if case is None:
                continue
            rec["case"] = case
            if relabelled:
                rec[Rec.RETRIEVAL_METRICS] = score_case_retrieval(
                    case, rec.get("retrieved_chunks") or [], rec.get("references") or [], rec.get("folder_selection"),
                    settings.get("folder_mode"), ks, require_snippets=snippets, case_sensitive=case_sensitive,
                    acknowledged=recorded_acknowledgement(rec),
                )
            answerable = case.get("answerable", True) is not False
            abst = rec.get("abstention")
            if isinstance(abst, Mapping) and abst.get("abstained") is not None:
                # hallucinated / false_abstention follow the (possibly relabelled) case.
                from evalkit.metrics.abstention import score_case_abstention

                new = {**abst, **score_case_abstention(answerable, bool(abst["abstained"]))}
                if new != abst:
                    tally["differs"] += 1
                rec["abstention"] = new
            tally["records"] += 1
            yield rec

    def classified() -> Iterator[dict[str, Any]]:
        import asyncio

        batch: list[dict[str, Any]] = []
        loop = asyncio.new_event_loop()
        try:
            for rec in labelled():
                batch.append(rec)
                if len(batch) >= batch_size:
                    yield from _flush(loop, batch)
                    batch = []
            yield from _flush(loop, batch)
            if judge is not None:
                loop.run_until_complete(judge.aclose())
        finally:
            loop.close()

    def _flush(loop: Any, batch: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        todo = [r for r in batch if _needs_classifier(r)]
        if todo:
            loop.run_until_complete(_classify(judge, todo, classifier == "heuristic" or bool(getattr(judge, "heuristic", False)), tally))
        yield from batch

    # The per-case values this re-scores go back into results.jsonl, and metrics.json is
    # derived from the same pass: new labels (case, retrieval_metrics, abstention) or new
    # decisions. Otherwise the records stay, and metrics.json is derived from them.
    rewrite = relabelled or classifier is not None
    result = AbstentionScoring(run_id=run.run_id, run_dir=run.path, eval_set=source, classifier=classifier,
                               n_records=0, results_rewritten=rewrite,
                               judge=judge.describe() if judge is not None else None)
    facts = RunFacts.stored(run, cfg, old or {})
    facts.ks = ks
    if relabelled:
        _label_facts(facts, _label_identity(source, given_cases, cfg, snippets))
        # What the per-case retrieval values are now scored with (score_retrieval reads it).
        last = dict(facts.owned.get(Met.RETRIEVAL_SCORING) or {})
        facts.owned = {**facts.owned,
                       Met.RETRIEVAL_SCORING: {**last, "per_case": {**per_case, "dataset_version": source.version}}}

    def finish(f: RunFacts) -> None:
        if cases.missing:
            raise _missing_problem(cases.missing, source)
        _abstention_warnings(result, tally, cases.regrouped)
        f.owned = {**f.owned, Met.ABSTENTION_SCORING: {**result.provenance(), "warnings": list(result.warnings)}}

    with fewer_collections():
        if not rewrite:
            records = RecordPass(facts.settings, rows=True, ks=facts.cutoffs, grades=stored_grades(run))
            for rec in labelled():
                records.add(rec)
            if not tally["differs"]:
                finish(facts)
                result.metrics, _ = derive_run(run, facts, records)
                return result
            # Stored decisions scored by an older rule than the labels say: the records follow.
            records.close()
            result.results_rewritten = True
            tally.update(dict.fromkeys(tally, 0))
            cases.missing.clear()
            cases.regrouped = 0
        stream = classified() if judge is not None else labelled()
        result.metrics, _ = rederive(run, facts, stream, before_derive=finish)
    return result


def _abstention_warnings(result: AbstentionScoring, tally: Mapping[str, int], regrouped: int) -> None:
    """score_abstention's counts and warnings, once every record went through."""
    result.n_records = tally["records"]
    result.n_classified = tally["classified"]
    result.n_classifier_failures = tally["failed"]
    result.n_changed = tally["changed"]
    result.n_regrouped = regrouped
    if regrouped:
        result.warnings.append(
            f"{regrouped} case(s) changed answerable, tags, category, difficulty, domain or language in the eval set: "
            "every aggregate of metrics.json (retrieval and judges too) was recomputed with the new labels"
        )
    if tally["failed"]:
        result.warnings.append(
            f"the classifier failed on {tally['failed']} answer(s): left unknown, counted in n_abstention_unknown"
        )
    if result.classifier is not None and tally["changed"]:
        result.warnings.append(
            f"{tally['changed']} answer(s) were classified differently from before; results.jsonl and metrics.json "
            "now hold the new decisions"
        )


def _build_classifier(classifier: str | None, judge_settings: Any) -> Any:
    """The Judge that classifies answers, or None without a classifier.

    Raises:
        JudgeConfigError: "llm" without a configured LLM judge, or a judge that cannot be built.
    """
    if classifier is None:
        return None
    from evalkit.judges import JudgeSettings, build_judge, resolve_judge
    from evalkit.judges.heuristic import HeuristicJudge

    if classifier == "heuristic":
        return HeuristicJudge()
    settings = judge_settings or JudgeSettings()
    if resolve_judge(settings).provider == "heuristic":
        from evalkit.errors import JudgeConfigError

        raise JudgeConfigError(
            Problem(
                "--classifier llm needs an LLM judge: pass --judge-model MODEL (and --judge-provider, or "
                "EVALKIT_JUDGE_MODEL / EVALKIT_JUDGE_PROVIDER); --classifier heuristic works offline",
                field="--classifier",
            )
        )
    return build_judge(settings)
