"""Reproducibility check: the same config run twice must give the same records (issue 14).

`compare_repro(run_a, run_b)` pairs the records of two runs by (test_case_id, trial) and
lists every difference that a deterministic chatbot and harness cannot have:

- a record only one run holds (`missing`);
- a different target error kind, None meaning no error (`error`); the rest of such a
  pair is not compared, since an error blanks it;
- the retrieved chunk list (`ranking`): the ids in rank order (a chunk's id is its
  `chunk_id`, else `rel_path#heading_path`), and each rank's `score_final`, which may
  differ by at most max(tolerance, 1e-10) (float noise, not a changed ranking);
- the per-case metrics (`metric`): every numeric leaf (bools as 0/1) under `METRIC_BLOCKS`,
  plus the leaves of `METRIC_LEAVES`, flattened to dotted keys such as
  `retrieval_metrics.at_k.5.recall_any`; |b - a| > tolerance is a difference, and so is
  a value one run has and the other has not (None).

Latency, cost, timestamps and `latency_budget` are never compared: they are not
reproducible. Each results.jsonl is read once, streamed: run A's records are reduced to
compact per-case values in memory, then run B is streamed against them.

`repro_run(values)` runs a config twice (`run_eval --repro`) and `repro_stored(run_id)`
re-runs a stored run's config (`evalkit reproduce`); both return a ReproOutcome holding the
runs and the ReproReport.
"""

from __future__ import annotations

import math
import os
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from evalkit.errors import BadConfig, Problem
from evalkit.store.runlog import Rec
from evalkit.store.runs import (
    RunDir,
    clear_latest,
    latest_run_id,
    point_latest,
    run_folder_taken,
    run_id_problem,
)

if TYPE_CHECKING:
    from evalkit.run.result import RunResult
    from evalkit.run.session import ProgressSink

__all__ = [
    "METRIC_BLOCKS",
    "METRIC_LEAVES",
    "SCORE_EPSILON",
    "Difference",
    "ReproOutcome",
    "ReproReport",
    "compare_repro",
    "repro_run",
    "repro_stored",
]

# Blocks of a record whose every numeric leaf is a metric (`expectations`: seed 004's
# must_include / must_exclude / ordered_hints scores, absent on older runs).
METRIC_BLOCKS: tuple[str, ...] = (Rec.RETRIEVAL_METRICS, "expectations")
# Single metric leaves of other blocks. Not `latency_budget`: latency is not reproducible.
METRIC_LEAVES: tuple[tuple[str, ...], ...] = (
    (Rec.GROUNDEDNESS, "score"),
    (Rec.CORRECTNESS, "score"),
    ("answer_quality", "relevance"),
    ("answer_quality", Rec.GROUNDEDNESS),
    ("answer_quality", "completeness"),
    ("abstention", "abstained"),
    ("abstention", "hallucinated"),
    ("abstention", "false_abstention"),
    ("response_validity", "valid"),
)
# Scores of the same chunk may differ by float noise this small whatever the tolerance.
SCORE_EPSILON = 1e-10

Kind = Literal["missing", "error", "ranking", "metric"]
_RANKING_KEY = "retrieved_chunks"
_NAN = float("nan")


@dataclass(frozen=True)
class Difference:
    """One way two runs differ on one record.

    Attributes:
        case_id: the record's test_case_id.
        trial: its trial (1 without --trials).
        kind: "missing" (only one run has the record), "error" (target error kinds differ),
            "ranking" (chunk ids, or a rank's score_final) or "metric".
        key: what differs: "record", "error.kind", "retrieved_chunks" (the id list),
            "retrieved_chunks.<rank>.score_final", or a dotted metric key.
        a, b: the value in run A and run B (None: absent; a list of ids for a ranking).
        delta: b - a for numbers, else None.
    """

    case_id: str
    trial: int
    kind: Kind
    key: str
    a: Any
    b: Any
    delta: float | None = None


@dataclass
class ReproReport:
    """What `compare_repro` found. `n_cases` counts (case, trial) records in either run."""

    run_a: str
    run_b: str
    tolerance: float
    n_cases: int
    differences: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def reproducible(self) -> bool:
        return not self.differences

    @property
    def differing_cases(self) -> list[tuple[str, int]]:
        """(case, trial) of every record with a difference, in report order."""
        return list(dict.fromkeys((d.case_id, d.trial) for d in self.differences))

    def to_json(self) -> dict[str, Any]:
        """The object `evalkit reproduce --json` prints."""
        return {
            "run_a": self.run_a,
            "run_b": self.run_b,
            "tolerance": self.tolerance,
            "n_cases": self.n_cases,
            "n_differing_cases": len(self.differing_cases),
            "reproducible": self.reproducible,
            "differences": [asdict(d) for d in self.differences],
            "notes": list(self.notes),
        }

    def verdict(self) -> str:
        """One line: `repro: PASS — 60 cases, 0 differences (tolerance 0)` or FAIL naming cases."""
        tol = f"tolerance {self.tolerance:g}"
        if self.reproducible:
            return f"repro: PASS — {self.n_cases} cases, 0 differences ({tol})"
        cases = self.differing_cases
        named = ", ".join(_case_label(c, t, show_trial=t != 1) for c, t in cases[:5])
        more = f" and {len(cases) - 5} more" if len(cases) > 5 else ""
        return f"repro: FAIL — {len(cases)} of {self.n_cases} cases differ ({tol}): {named}{more}"

    def render_text(self, limit: int = 50) -> str:
        """A plain-text table of the first `limit` differences (case, what, run A, run B,
        delta), the notes, then the verdict line."""
        lines = [f"repro: run A {self.run_a}, run B {self.run_b}"]
        shown = self.differences[:limit]
        if shown:
            trials = any(d.trial != 1 for d in self.differences)
            rows = [("case", "what", "run A", "run B", "delta")]
            rows += [
                (_case_label(d.case_id, d.trial, show_trial=trials), f"{d.kind} {d.key}", *_shown_values(d))
                for d in shown
            ]
            widths = [min(max(len(r[i]) for r in rows), 60) for i in range(4)]
            for r in rows:
                lines.append("  ".join(_cell(v, w) for v, w in zip(r[:4], widths, strict=True)) + "  " + r[4])
            if len(self.differences) > limit:
                lines.append(f"… and {len(self.differences) - limit} more differences (--json lists them all)")
        lines += [f"note: {n}" for n in self.notes]
        lines.append(self.verdict())
        return "\n".join(lines)


def _case_label(case_id: str, trial: int, *, show_trial: bool) -> str:
    return f"{case_id} (trial {trial})" if show_trial else str(case_id)


def _cell(text: str, width: int) -> str:
    return (text if len(text) <= width else text[: width - 1] + "…").ljust(width)


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.10g}"
    return str(v)


def _shown_values(d: Difference) -> tuple[str, str, str]:
    """Run A, run B and delta cells; an id list is shown from its first differing rank."""
    if d.kind == "ranking" and isinstance(d.a, list) and isinstance(d.b, list):
        first = next((i for i, (x, y) in enumerate(zip(d.a, d.b)) if x != y), min(len(d.a), len(d.b)))

        def ids(chunks: list[str]) -> str:
            tail = [c[:12] for c in chunks[first : first + 3]]
            more = ", …" if len(chunks) > first + 3 else ""
            return f"rank {first + 1}: " + (", ".join(tail) + more if tail else "(none)")

        return ids(d.a), ids(d.b), f"{len(d.a)} vs {len(d.b)} chunks"
    delta = "" if d.delta is None else f"{d.delta:+.3g}"
    return _fmt(d.a), _fmt(d.b), delta


# --------------------------------------------------------------------------- comparison


@dataclass(frozen=True, slots=True)
class _Case:
    """One record reduced to what is compared; None values are stored as NaN."""

    error: str | None
    chunks: tuple[str, ...]
    scores: array
    keys: tuple[str, ...]  # shared between records of the same layout
    values: array


def _record_key(record: Mapping[str, Any]) -> tuple[str, int]:
    trial = record.get("trial", 1)
    return str(record.get(Rec.CASE_ID)), trial if type(trial) is int else 1


def _leaves(value: Any, prefix: str) -> Iterator[tuple[str, float | None]]:
    """(dotted key, number or None) for every numeric, bool or null leaf under `value`."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _leaves(v, f"{prefix}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{prefix}.{i}")
    elif isinstance(value, bool):
        yield prefix, float(value)
    elif isinstance(value, int | float):
        yield prefix, float(value)
    elif value is None:
        yield prefix, None


class _Reducer:
    """Turns records into _Case values, sharing key layouts and chunk id strings."""

    def __init__(self) -> None:
        self._layouts: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._strings: dict[str, str] = {}

    def _intern(self, s: str) -> str:
        return self._strings.setdefault(s, s)

    def reduce(self, record: Mapping[str, Any]) -> _Case:
        error = record.get("error")
        kind = str(error.get("kind")) if isinstance(error, Mapping) else None
        ids: list[str] = []
        scores = array("d")
        for c in record.get("retrieved_chunks") or []:
            if not isinstance(c, Mapping):
                continue
            cid = c.get("chunk_id") or f"{c.get('rel_path') or ''}#{c.get('heading_path') or ''}"
            ids.append(self._intern(str(cid)))
            s = c.get("score_final")
            scores.append(float(s) if isinstance(s, int | float) and not isinstance(s, bool) else _NAN)
        keys: list[str] = []
        values = array("d")
        for block in METRIC_BLOCKS:
            for k, v in _leaves(record.get(block), block):
                keys.append(k)
                values.append(_NAN if v is None else v)
        for path in METRIC_LEAVES:
            node: Any = record
            for part in path:
                node = node.get(part) if isinstance(node, Mapping) else None
            if node is None or isinstance(node, bool | int | float):
                keys.append(".".join(path))
                values.append(_NAN if node is None else float(node))
        layout = tuple(keys)
        layout = self._layouts.setdefault(layout, layout)
        return _Case(kind, tuple(ids), scores, layout, values)


def _none(x: float) -> float | None:
    return None if math.isnan(x) else x


def _differ(a: float, b: float, tol: float) -> bool:
    na, nb = math.isnan(a), math.isnan(b)
    if na or nb:
        return na != nb
    return abs(a - b) > tol


def _compare_case(case_id: str, trial: int, a: _Case, b: _Case, tolerance: float) -> list[Difference]:
    if a.error != b.error:
        return [Difference(case_id, trial, "error", "error.kind", a.error, b.error)]
    out: list[Difference] = []
    if a.chunks != b.chunks:
        out.append(Difference(case_id, trial, "ranking", _RANKING_KEY, list(a.chunks), list(b.chunks)))
    else:
        score_tol = max(tolerance, SCORE_EPSILON)
        for rank, (sa, sb) in enumerate(zip(a.scores, b.scores), 1):
            if _differ(sa, sb, score_tol):
                va, vb = _none(sa), _none(sb)
                delta = vb - va if va is not None and vb is not None else None
                out.append(Difference(case_id, trial, "ranking", f"{_RANKING_KEY}.{rank}.score_final", va, vb, delta))
    if a.keys is b.keys:
        pairs: Iterator[tuple[str, float, float]] = zip(a.keys, a.values, b.values)  # type: ignore[assignment]
    else:
        ma, mb = dict(zip(a.keys, a.values)), dict(zip(b.keys, b.values))
        pairs = ((k, ma.get(k, _NAN), mb.get(k, _NAN)) for k in dict.fromkeys([*a.keys, *b.keys]))
    for key, va, vb in pairs:
        if _differ(va, vb, tolerance):
            x, y = _none(va), _none(vb)
            out.append(Difference(case_id, trial, "metric", key, x, y, y - x if x is not None and y is not None else None))
    return out


def _check_tolerance(tolerance: float) -> float:
    if not (isinstance(tolerance, int | float) and math.isfinite(tolerance) and tolerance >= 0):
        raise BadConfig(Problem(f"expected a number >= 0, got {tolerance!r}", field="--tolerance"))
    return float(tolerance)


def compare_repro(run_a: RunDir, run_b: RunDir, *, tolerance: float = 0.0) -> ReproReport:
    """Compare two runs of one config record by record (see the module docstring).

    Each results.jsonl is streamed once. Records pair on (test_case_id, trial); when a run
    repeats a pair, run A's last record counts and each of run B's is compared.

    Args:
        run_a, run_b: the two run folders (A is the reference: deltas are B - A).
        tolerance: largest |b - a| of a metric (and of a score_final, at least 1e-10)
            that is not a difference.

    Returns:
        ReproReport; `reproducible` is True when nothing differs.

    Raises:
        BadConfig: a negative or non-finite tolerance.
        InputError: a corrupt results.jsonl line (names the file and line).
    """
    tolerance = _check_tolerance(tolerance)
    reducer = _Reducer()
    index: dict[tuple[str, int], _Case] = {}
    for record in run_a.iter_results():
        index[_record_key(record)] = reducer.reduce(record)
    differences: list[Difference] = []
    matched: set[tuple[str, int]] = set()
    only_b = 0
    for record in run_b.iter_results():
        key = _record_key(record)
        a = index.get(key)
        if a is None:
            only_b += key not in matched
            matched.add(key)
            differences.append(Difference(key[0], key[1], "missing", "record", None, "present"))
            continue
        matched.add(key)
        differences += _compare_case(key[0], key[1], a, reducer.reduce(record), tolerance)
    for key in index:
        if key not in matched:
            differences.append(Difference(key[0], key[1], "missing", "record", "present", None))
    return ReproReport(
        run_a=run_a.run_id, run_b=run_b.run_id, tolerance=tolerance, n_cases=len(index) + only_b,
        differences=differences,
    )


# --------------------------------------------------------------------------- orchestration


@dataclass
class ReproOutcome:
    """What `repro_run` / `repro_stored` return.

    Attributes:
        report: the comparison, or None when the first run was incomplete (then there is
            no second run: a run that failed too often says nothing about reproducibility).
        first: run A's RunResult (None for `repro_stored`, where run A is the stored run).
        second: run B's RunResult, None when it was not run.
    """

    report: ReproReport | None
    first: RunResult | None
    second: RunResult | None

    @property
    def reproducible(self) -> bool:
        return self.report is not None and self.report.reproducible


ProgressFactory = Callable[[str], "ProgressSink | None"]

# run_eval modes a reproducibility check cannot be combined with (a setting -> its flag):
# resuming finishes one run, a gate or a threshold would give exit 1 a second meaning.
_EXCLUSIVE = {
    "resume": "--resume",
    "retry_errors": "--retry-errors",
    "baseline": "--baseline",
    "thresholds": "--threshold",
}
# Per-run keys of a stored run's settings that a re-run does not take over (and the
# --suite file, which only weighs metrics.json: records are what is compared).
_PER_RUN = (
    "run_id", "resume", "retry_errors", "baseline", "allow_regressions", "ignore_invariants", "thresholds",
    "quiet", "json_output", "results_dir", "suite",
)


def _free_run_id(results_dir: Path, base: str, *, numbered: bool) -> str:
    """`base` (or `base-1`, `base-2`, ... when taken, or always with `numbered`) as a new run id.

    Raises:
        BadConfig: the id would break store.RUN_ID_RULE (too long).
    """
    for n in range(0 if not numbered else 1, 1000):
        candidate = f"{base}-{n}" if n else base
        problem = run_id_problem(candidate, new=True)
        if problem is not None:
            raise BadConfig(Problem(f"cannot name the re-run: {problem}", field="--run-id"))
        if not run_folder_taken(Path(results_dir) / candidate):
            return candidate
    raise BadConfig(Problem(f"no free run id {base}-N under {results_dir}", field="--run-id"))


def repro_run(
    values: Mapping[str, Any], *, tolerance: float = 0.0, progress: ProgressFactory | None = None
) -> ReproOutcome:
    """Run one config twice and compare the runs (`run_eval --repro`).

    The first run is an ordinary run (its id is `run_id` or generated); the second takes the
    same values under the id `<first>-repro` (`-repro-N` when that is taken). Judge verdicts
    of the second run come from the judge cache unless `no_cache`, so with a cache the check
    covers the target and the scoring, not the judge model's sampling.

    Args:
        values: run settings as for `evalkit.run.runner`.
        tolerance: see `compare_repro`.
        progress: makes the progress sink of each run, called with "run A" then "run B".

    Returns:
        ReproOutcome; without a second run (and a report) when the first run was incomplete.

    Raises:
        BadConfig: a mode that cannot be checked (--resume, --retry-errors, --baseline,
            --threshold), a bad tolerance, or a --run-id that leaves no room for `-repro`.
        InputError, RunInterrupted: as `evalkit.run.runner`.
    """
    from evalkit.run.runner import run

    tolerance = _check_tolerance(tolerance)
    given = [flag for key, flag in _EXCLUSIVE.items() if values.get(key)]
    if given:
        raise BadConfig([Problem("cannot be combined with --repro (it checks two fresh runs)", field=f) for f in given])
    results_dir = Path(values.get("results_dir") or "results")
    if values.get("run_id") and run_id_problem(str(values["run_id"]), new=True) is None:
        _free_run_id(results_dir, f"{values['run_id']}-repro", numbered=False)  # room for the suffix
    first = run(values, progress("run A") if progress else None)
    if first.incomplete:
        return ReproOutcome(None, first, None)
    second_id = _free_run_id(first.run_dir.parent, f"{first.run_id}-repro", numbered=False)
    second = run({**values, "run_id": second_id}, progress("run B") if progress else None)
    # `latest` stays the run that was checked: the re-run is the check's by-product.
    point_latest(first.run_dir.parent, first.run_id)
    report = compare_repro(RunDir(first.run_dir), RunDir(second.run_dir), tolerance=tolerance)
    return ReproOutcome(report, first, second)


def repro_stored(
    run_id: str,
    *,
    results_dir: str | Path = "results",
    tolerance: float = 0.0,
    api_url: str | None = None,
    progress: ProgressFactory | None = None,
) -> ReproOutcome:
    """Re-run a stored run's config into `<run_id>-repro-<n>` and compare (`evalkit reproduce`).

    The settings come from its config.json without the per-run ones (run id, resume,
    baseline, thresholds, output flags). The eval set must still be the one the run used.

    Args:
        run_id: the stored run (`latest`: the newest).
        results_dir: where it lives; the re-run goes beside it.
        tolerance: see `compare_repro`.
        api_url: where an HTTP target is now (a server may move ports between runs; the
            stored URL has no credentials). Ignored for other targets.
        progress: makes the re-run's progress sink (called with "run B").

    Returns:
        ReproOutcome with `first` None (run A is the stored run). A config_hash that
        differs from the stored one is noted in the report.

    Raises:
        RunNotFound: no such run. BadConfig: the run did not finish (no metrics.json), the
        eval set changed (both dataset versions named), or a stored setting is unknown.
        InputError, RunInterrupted: as `evalkit.run.runner`.
    """
    from evalkit.config import build_settings, diff_hashed
    from evalkit.evalset.load import configured_categories, load_eval_set
    from evalkit.evalset.shard import stored_shard
    from evalkit.run.runner import run

    tolerance = _check_tolerance(tolerance)
    stored_run = RunDir.open(Path(results_dir), run_id)
    config = stored_run.read_config()
    if stored_run.read_metrics() is None:
        raise BadConfig(Problem(f"run {stored_run.run_id} has no metrics.json (did it finish? finish it with "
                                f"--resume {stored_run.run_id})", field="--run-id"))
    stored = dict(config.get("settings") or {})
    values = {k: v for k, v in stored.items() if k not in _PER_RUN}
    ran = stored_shard(config)  # settings.shard is 0-based in runs stored before issue 28; this is not
    if ran is not None:
        values["shard"] = str(ran)
    if stored.get("api_url"):
        values["api_url"] = api_url or stored["api_url"]
    elif not stored.get("target") and os.environ.get("EVAL_API_URL"):
        # run_eval would ask that API instead of the in-process chatbot the run used.
        raise BadConfig(Problem(f"EVAL_API_URL is set, but run {stored_run.run_id} ran the in-process reference "
                                "chatbot; unset it to re-run that", field="--run-id"))
    settings = build_settings(values)
    eval_set = load_eval_set(settings.eval_set, [*configured_categories(), *settings.categories] if settings.categories else None)
    recorded = config.get("dataset_version")
    if recorded != eval_set.version:
        raise BadConfig(
            Problem(
                f"cannot re-run {stored_run.run_id}: the eval set changed: dataset_version {recorded} in the run, "
                f"{eval_set.version} now in {', '.join(settings.eval_set)}",
                field="--run-id",
            )
        )
    new_id = _free_run_id(stored_run.path.parent, f"{stored_run.run_id}-repro", numbered=True)
    values.update(run_id=new_id, results_dir=str(stored_run.path.parent))
    before = latest_run_id(stored_run.path.parent)
    second = run(values, progress("run B") if progress else None)
    # `latest` is the run a run_eval finished last: checking an old run neither moves it back to
    # that run (a later `--run-id latest` would act on it) nor on to the check's by-product.
    if before is not None:
        point_latest(stored_run.path.parent, before)
    else:
        clear_latest(stored_run.path.parent)
    report = compare_repro(stored_run, RunDir(second.run_dir), tolerance=tolerance)
    new_hash = second.metrics.get("config_hash")
    if config.get("config_hash") and new_hash != config.get("config_hash"):
        changed = diff_hashed(config.get("hashed") or {}, RunDir(second.run_dir).read_config().get("hashed") or {})
        report.notes.append(
            f"config_hash differs ({str(config.get('config_hash'))[:12]}… vs {str(new_hash)[:12]}…): "
            + ("; ".join(changed) if changed else "the result-affecting config is not the stored one")
        )
    return ReproOutcome(report, None, second)
