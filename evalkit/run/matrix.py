"""Config matrix: the same cases under several settings, side by side (issue 13, item 1).

    from evalkit.run.matrix import parse_matrix_axes, parse_order_spec, run_matrix

    presets = parse_matrix_axes(["thoroughness=fast,balanced,thorough"])
    result = run_matrix({"eval_set": ["eval_set.jsonl"]}, presets,
                        expect_order=parse_order_spec("fast<=balanced<=thorough:ndcg@10"))
    result.ok, result.rows, result.order

Each preset is one ordinary run (`evalkit.run.api.run_eval`) named `<matrix_id>-<preset>`; its
`params` go into the request's `options` over the caller's `params`, and its `flags` (a
few run_eval settings: folder_mode, send_scope, rerank weights, latency_budget_ms) over
the caller's. Neighbours are compared with `evalkit.compare.compare_runs` (paired tests,
Holm over the comparison's family), and `results/<matrix_id>.matrix.json` records it all.

Expect-order "a<=b<=c:metric": metric(a) <= metric(b) <= metric(c). A pair is *violated*
only when the inversion is significant after correction; a non-significant inversion is
"not distinguishable" and passes (seed 002: "thorough >= balanced >= fast").
"""

from __future__ import annotations

import hashlib
import itertools
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import orjson

from evalkit.errors import BadConfig, Problem
from evalkit.metrics.keys import (
    HEADLINE_AT_K,
    PLAIN_METRIC_ORDER,
    canonical_key,
    parse_metric_key,
)
from evalkit.metrics.registry import shown_in
from evalkit.metrics.retrieval import AT_K_METRICS
from evalkit.project import TomlError, parse_toml
from evalkit.store.runlog import Met

# run_eval settings a preset may set besides request options (they change what the target
# does, not what is measured: K, the eval set or the judge would break compare's invariants).
RUN_FLAGS = ("folder_mode", "send_scope", "rerank_vector_weight", "rerank_lexical_weight", "latency_budget_ms")
DEFAULT_ORDER_METRIC = "ndcg_at_k_avg"
# metrics.json headline keys -> compare_runs' (metric, primary K) rows
_HEADLINE = HEADLINE_AT_K
_PLAIN = PLAIN_METRIC_ORDER  # compare_runs' rows: the matrix accepts what compare reports
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_ORDER_OP = re.compile(r"(<=|>=)")


@dataclass(frozen=True)
class Preset:
    """One setting of the matrix: request options and run flags merged over the user's."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    flags: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class OrderSpec:
    """`a<=b<=c:metric`: presets in order, the operator between each pair, the metric."""

    presets: list[str]
    ops: list[Literal["<=", ">="]]
    metric: str = DEFAULT_ORDER_METRIC
    text: str = ""


@dataclass
class OrderPair:
    a: str
    b: str
    op: str
    value_a: float | None
    value_b: float | None
    delta: float | None
    ci95: list[float | None] | None
    p_adjusted: float | None
    significant: bool
    verdict: Literal["holds", "not distinguishable", "violated", "not measured"]


@dataclass
class MatrixRow:
    preset: str
    run_id: str
    params: dict[str, Any]
    flags: dict[str, Any]
    n: int
    # The registry's `compact` means at the primary K, by their names: {"recall_any", "mrr", "ndcg"}.
    values: dict[str, float | None]
    metric_value: float | None
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    cost_usd: float | None
    gate_failed: bool
    thresholds_failed: bool
    incomplete: bool
    vs_previous: dict[str, Any] | None = None


@dataclass
class MatrixResult:
    matrix_id: str
    path: Path
    k: int
    metric: str
    rows: list[MatrixRow]
    order: dict[str, Any] | None
    warnings: list[str] = field(default_factory=list)

    @property
    def order_violated(self) -> bool:
        return bool(self.order) and not self.order["passed"]

    @property
    def gate_failed(self) -> bool:
        return any(r.gate_failed or r.thresholds_failed for r in self.rows)

    @property
    def incomplete(self) -> bool:
        return any(r.incomplete for r in self.rows)

    @property
    def ok(self) -> bool:
        return not (self.order_violated or self.gate_failed or self.incomplete)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["path"] = str(self.path)
        out["ok"] = self.ok
        return out


# ---------------------------------------------------------------- parsing


def _value(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def _split(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    params, flags = {}, {}
    for key, value in options.items():
        flag = key.replace("-", "_")
        (flags if flag in RUN_FLAGS else params)[flag if flag in RUN_FLAGS else key] = value
    return params, flags


def _preset_name(text: str) -> str:
    return _NAME_UNSAFE.sub("-", text).strip("-.") or "x"


def parse_matrix_axes(items: Sequence[str]) -> list[Preset]:
    """`--matrix KEY=V1,V2,...` (repeatable) as presets: the cross product, first axis slowest.

    A key naming a run setting in RUN_FLAGS (`folder_mode`, `folder-mode`, ...) sets that
    setting; any other key is a request option, as `--param`. Values are JSON when they
    parse. A preset is named by its values joined with `_` (`fast`, `fast_0.3`).

    Raises:
        BadConfig: an item without `=`, an empty key or value, a key given twice, or two
            presets with the same name (every problem at once).
    """
    problems: list[Problem] = []
    axes: list[tuple[str, list[str]]] = []
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        raw = [v.strip() for v in values.split(",")]
        if not sep or not key or not values.strip() or any(not v for v in raw):
            problems.append(Problem(f"expected KEY=V1,V2,..., got {item!r}", field="--matrix"))
        elif key in [k for k, _ in axes]:
            problems.append(Problem(f"key {key!r} given twice", field="--matrix"))
        elif len(set(raw)) != len(raw):
            problems.append(Problem(f"{key}: a value is given twice in {values!r}", field="--matrix"))
        else:
            axes.append((key, raw))
    if problems:
        raise BadConfig(problems)
    presets = []
    for combo in itertools.product(*[[(key, v) for v in values] for key, values in axes]):
        params, flags = _split({key: _value(v) for key, v in combo})
        presets.append(Preset(_preset_name("_".join(v for _, v in combo)), params, flags))
    _check_names(presets, "--matrix")
    return presets


def _check_names(presets: list[Preset], where: str) -> None:
    seen: dict[str, int] = {}
    for p in presets:
        seen[p.name] = seen.get(p.name, 0) + 1
    dup = [name for name, n in seen.items() if n > 1]
    if dup:
        raise BadConfig(Problem(f"two presets are both named {', '.join(map(repr, dup))}", field=where))
    if len(presets) < 2:
        raise BadConfig(Problem(f"a matrix needs at least two presets, got {len(presets)}", field=where))


def load_matrix_file(path: str | Path) -> list[Preset]:
    """A TOML file of named presets, in the order written:

        [presets.fast]
        params = {bm25_k1 = 0.9}
        latency_budget_ms = 1000

    A preset table may hold `params` (request options) and the run settings of RUN_FLAGS.

    Raises:
        BadConfig: unreadable or invalid TOML, no presets, an unknown key, a bad name.
    """
    p = Path(path)
    try:
        data = parse_toml(p.read_text(encoding="utf-8"))  # bounded: never a RecursionError
    except OSError as e:
        raise BadConfig(Problem(f"cannot read: {e.strerror or e}", path=str(p), field="--matrix-file")) from None
    except (TomlError, UnicodeDecodeError) as e:
        raise BadConfig(Problem(f"not valid TOML: {e}", path=str(p), field="--matrix-file")) from None
    problems: list[Problem] = []
    extra = sorted(set(data) - {"presets"})
    if extra:
        problems.append(Problem(f"unknown top-level key(s) {', '.join(extra)}; expected [presets.NAME] tables", path=str(p)))
    tables = data.get("presets")
    if not isinstance(tables, dict) or not tables:
        problems.append(Problem("no presets: expected [presets.NAME] tables", path=str(p)))
        raise BadConfig(problems)
    presets: list[Preset] = []
    for name, table in tables.items():
        where = f"presets.{name}"
        if _preset_name(name) != name:
            problems.append(Problem(f"preset name {name!r}: use A-Z a-z 0-9 . _ -", path=str(p), field=where))
            continue
        if not isinstance(table, dict):
            problems.append(Problem("expected a table", path=str(p), field=where))
            continue
        unknown = sorted(set(table) - {"params", *RUN_FLAGS})
        if unknown:
            problems.append(Problem(f"unknown key(s) {', '.join(unknown)}; expected params or {', '.join(RUN_FLAGS)}",
                                    path=str(p), field=where))
            continue
        params = table.get("params", {})
        if not isinstance(params, dict):
            problems.append(Problem("params must be a table, e.g. params = {bm25_k1 = 0.9}", path=str(p), field=where))
            continue
        presets.append(Preset(name, dict(params), {k: v for k, v in table.items() if k != "params"}))
    if problems:
        raise BadConfig(problems)
    _check_names(presets, "--matrix-file")
    return presets


def parse_order_spec(text: str) -> OrderSpec:
    """`fast<=balanced<=thorough[:metric]` (or `>=`); metric default ndcg_at_k_avg.

    Raises:
        BadConfig: fewer than two presets, an empty name, or no operator.
    """
    chain, _, metric = text.partition(":")
    parts = _ORDER_OP.split(chain)
    names = [s.strip() for s in parts[0::2]]
    ops = parts[1::2]
    if len(names) < 2 or any(not n for n in names) or (_ and not metric.strip()):
        raise BadConfig(Problem(f"expected PRESET<=PRESET[<=...][:METRIC] (or >=), got {text!r}", field="--expect-order"))
    return OrderSpec(names, ops, metric.strip() or DEFAULT_ORDER_METRIC, text)


def resolve_metric(metric: str, ks: Sequence[int]) -> tuple[str, int | None]:
    """A metrics.json key or `name@K` as compare_runs' (metric, K) row key.

    Raises:
        BadConfig: not a metric the runs measure (an unknown name or a K not asked for).
    """
    known = ", ".join([*_HEADLINE, *(f"{m}@K" for m in AT_K_METRICS), *_PLAIN])
    try:
        name, k = parse_metric_key(canonical_key(metric))  # "nDCG@10" as "ndcg@10"
    except ValueError:
        name, k = "", None
    if k is not None and name in AT_K_METRICS:
        if k not in ks:
            raise BadConfig(Problem(f"{metric}: the runs measure K = {', '.join(map(str, ks))} (add --k {k})", field="--expect-order"))
        return name, k
    if k is None and name in _HEADLINE:
        return _HEADLINE[name], ks[0]
    if k is None and name in _PLAIN:
        return name, None
    raise BadConfig(Problem(f"unknown metric {metric!r}; expected one of {known}", field="--expect-order"))


# ---------------------------------------------------------------- running


def _matrix_id(values: Mapping[str, Any], presets: list[Preset]) -> str:
    from evalkit.store.runs import new_run_id

    body = orjson.dumps({"values": values, "presets": [asdict(p) for p in presets]}, option=orjson.OPT_SORT_KEYS, default=str)
    return new_run_id(hashlib.sha256(body).hexdigest(), datetime.now(timezone.utc))


class MatrixInterrupted(KeyboardInterrupt):
    """Ctrl-C during a matrix. Its runs so far are kept; the same command with
    `--resume <matrix_id>` finishes the preset that was stopped and runs the rest."""

    def __init__(self, matrix_id: str, stopped: BaseException):
        self.matrix_id = matrix_id
        self.stopped = stopped
        super().__init__(f"interrupted matrix {matrix_id}")

    @property
    def resume_hint(self) -> str:
        return f"the same command with --resume {shlex.quote(self.matrix_id)}"


def _check_before_running(values: Mapping[str, Any], presets: list[Preset], order: OrderSpec | None,
                          matrix_id: str, results_dir: Path, *, resume: bool) -> set[str]:
    """Refuse (BadConfig) what cannot run; returns the presets whose run has started (its
    config.json written), which `resume` finishes instead of refusing."""
    from evalkit.store.runs import CONFIG_FILE, run_folder_taken, run_id_problem

    problems: list[Problem] = []
    names = [p.name for p in presets]
    if order is not None:
        unknown = [n for n in order.presets if n not in names]
        if unknown:
            problems.append(Problem(f"unknown preset(s) {', '.join(map(repr, unknown))}; the presets are {', '.join(names)}",
                                    field="--expect-order"))
    started: set[str] = set()
    for p in presets:
        run_id = f"{matrix_id}-{p.name}"
        why = run_id_problem(run_id, new=True)
        if why is not None:
            problems.append(Problem(why, field="--resume" if resume else "--run-id"))
        elif resume and (results_dir / run_id / CONFIG_FILE).is_file():
            started.add(p.name)
        elif run_folder_taken(results_dir / run_id):
            fix = (f"it has no {CONFIG_FILE} (stopped before it began): remove it and resume the matrix again" if resume
                   else f"finish the matrix with --resume {matrix_id}, or choose another --run-id")
            problems.append(Problem(f"run {run_id!r} exists already; {fix}", field="--run-id"))
    if not resume and (results_dir / f"{matrix_id}.matrix.json").exists():
        problems.append(Problem(f"matrix {matrix_id!r} exists already ({results_dir / f'{matrix_id}.matrix.json'})", field="--run-id"))
    if resume and not started and not (results_dir / f"{matrix_id}.matrix.json").exists():
        problems.append(Problem(f"no run of matrix {matrix_id!r} in {results_dir}: nothing to resume "
                                f"(the runs are named {matrix_id}-<preset>)", field="--resume"))
    if problems:
        raise BadConfig(problems)
    return started


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _row(preset: Preset, result: Any, metric: str) -> MatrixRow:
    from evalkit.metrics.aggregate import flatten_cell

    agg = result.metrics.get(Met.AGGREGATE) or {}
    flat = flatten_cell(agg)
    latency = agg.get("latency") or {}
    cost = agg.get("cost") or {}
    return MatrixRow(
        preset=preset.name, run_id=result.run_id, params=preset.params, flags=preset.flags,
        n=int(result.metrics.get(Met.TOTAL_TESTS) or agg.get("n_cases") or 0),
        values={m.name: _num(agg.get(m.key)) for m in shown_in("compact")},
        metric_value=_num((flat.get(metric) or (None, 0))[0]),
        latency_p50_ms=_num(latency.get("p50_ms")), latency_p95_ms=_num(latency.get("p95_ms")),
        cost_usd=_num(cost.get("judge_total_usd")),
        gate_failed=bool(result.gate_failed), thresholds_failed=bool(result.thresholds_failed),
        incomplete=bool(result.incomplete),
    )


def _pair(comparison: Any, key: tuple[str, int | None]) -> dict[str, Any]:
    for row in comparison.deltas:
        if row.scope == "overall" and (row.metric, row.k) == key:
            return {"delta": row.reported_delta, "ci95": row.ci95, "p_adjusted": row.p_adjusted, "significant": bool(row.significant),
                    "a": row.a, "b": row.b, "note": row.note}
    return {"delta": None, "ci95": None, "p_adjusted": None, "significant": False, "a": None, "b": None, "note": "not measured"}


def run_matrix(
    values: Mapping[str, Any],
    presets: Sequence[Preset],
    *,
    expect_order: OrderSpec | None = None,
    metric: str | None = None,
    compare_seed: int = 0,
    compare_resamples: int | None = None,
    progress: Callable[[Preset], Any] | None = None,
    on_run: Callable[[Preset, Any], None] | None = None,
) -> MatrixResult:
    """Run every preset as its own run, compare neighbours, check the expected order.

    Args:
        values: run_eval keyword arguments shared by every preset (`params` included);
            `run_id` names the matrix (default: `<UTC time>-<hash>`, like a run id).
        presets: in table order (parse_matrix_axes / load_matrix_file).
        expect_order: the quality ordering to check (parse_order_spec), or None.
        metric: the ordering metric of the table's significance column when there is no
            expect_order (default ndcg_at_k_avg).
        compare_seed, compare_resamples: compare_runs' seed and resamples.
        progress: builds one run's progress sink (or None) from its preset.
        on_run: called after each run with its preset and RunResult.

    Returns:
        MatrixResult; `results/<matrix_id>.matrix.json` holds the same.

    Raises:
        BadConfig: bad presets, an unknown preset or metric in expect_order, or a run id
            already taken; raised before anything runs. With `resume` (the matrix id):
            each preset's run that has started is resumed (refused by run_eval if its
            settings changed; `retry_errors` redoes its failed cases), the others run,
            and the comparisons and matrix.json are made again.
    """
    from evalkit.compare import compare_runs
    from evalkit.compare.compute import DEFAULT_RESAMPLES
    from evalkit.run.api import run_eval
    from evalkit.run.result import RunInterrupted
    from evalkit.store.runs import write_json_atomic

    presets = list(presets)
    _check_names(presets, "--matrix")
    base = dict(values)
    ks = [int(k) for k in (base.get("k") or [5])]
    metric_name = expect_order.metric if expect_order is not None else (metric or DEFAULT_ORDER_METRIC)
    key = resolve_metric(metric_name, ks)
    results_dir = Path(base.get("results_dir") or "results")
    resume, given = base.pop("resume", None), base.pop("run_id", None)
    retry_errors = bool(base.pop("retry_errors", False))
    if resume and given and given != resume:
        raise BadConfig(Problem(f"--run-id {given} and --resume {resume} name different matrices", field="--resume"))
    matrix_id = resume or given or _matrix_id(base, presets)
    started = _check_before_running(base, presets, expect_order, matrix_id, results_dir, resume=bool(resume))

    user_params = dict(base.pop("params", None) or {})
    rows: list[MatrixRow] = []
    for preset in presets:
        kwargs = {**base, **preset.flags, "params": {**user_params, **preset.params}, "run_id": f"{matrix_id}-{preset.name}"}
        if not kwargs["params"]:
            kwargs.pop("params")
        if preset.name in started:
            # Its own settings given again: run_eval refuses the resume if they changed.
            kwargs.update(resume=kwargs["run_id"], retry_errors=retry_errors)
        try:
            result = run_eval(progress=progress(preset) if progress else None, **kwargs)
        except RunInterrupted as e:
            raise MatrixInterrupted(matrix_id, e) from None
        rows.append(_row(preset, result, metric_name))
        if on_run is not None:
            on_run(preset, result)

    cache: dict[tuple[str, str], dict[str, Any]] = {}
    warnings: list[str] = []

    def compare(a: str, b: str) -> dict[str, Any]:
        if (a, b) not in cache:
            c = compare_runs(f"{matrix_id}-{a}", f"{matrix_id}-{b}", results_dir=results_dir, seed=compare_seed,
                             resamples=compare_resamples or DEFAULT_RESAMPLES, ignore_invariants=True, show_drift=0)
            warnings.extend(f"{a} vs {b}: {v}" for v in c.invariants.violations)
            cache[(a, b)] = _pair(c, key)
        return cache[(a, b)]

    for prev, row in itertools.pairwise(rows):
        row.vs_previous = {"preset": prev.preset, **compare(prev.preset, row.preset)}

    order = None
    if expect_order is not None:
        pairs: list[OrderPair] = []
        for (a, b), op in zip(itertools.pairwise(expect_order.presets), expect_order.ops, strict=True):
            c = compare(a, b)
            delta = c["delta"]
            if delta is None:
                verdict = "not measured"
            elif (delta >= 0) == (op == "<=") or delta == 0:
                verdict = "holds"
            else:
                verdict = "violated" if c["significant"] else "not distinguishable"
            pairs.append(OrderPair(a, b, op, c["a"], c["b"], delta, c["ci95"], c["p_adjusted"], c["significant"], verdict))
        order = {"spec": expect_order.text, "metric": metric_name,
                 "passed": all(p.verdict in ("holds", "not distinguishable") for p in pairs),
                 "pairs": [asdict(p) for p in pairs]}

    result = MatrixResult(matrix_id, results_dir / f"{matrix_id}.matrix.json", ks[0], metric_name, rows, order, warnings)
    write_json_atomic(result.path, {"presets": [asdict(p) for p in presets], **result.to_json()})
    return result
