"""Does the default merge gate (the verdict) pass noise and fail real drops? (issue 36)

A simulation of decisions, not a timing: each trial makes two runs' per-case values, judges
them with `evalkit.gate.verdict.build_verdict` exactly as compare_runs' default gate
(`--gate verdict`) does, and counts the outcome: fail (exit 1) when a metric is `worse`, not
enough evidence (exit 4) when a gated metric is `inconclusive`, else pass (exit 0). Beside it,
the same trials judged by the old threshold gate (a watched metric's aggregate drops by more
than its threshold, the registry margin, plus MRR's 10% relative drop; no statistics): what
the default used to do.

The cases are the bundled run's. The bench runs `scripts/run_eval.py --eval-set eval_set.jsonl`
once (offline, seconds; `--run DIR` reuses a run folder) and reads each case's real outcome:
its ranking against its gold supports (the retrieval metrics at K = 5 come from evalkit's own
kernels on that ranking, and reproduce the record's values), citation hit, groundedness and
correctness grades, abstention decision. `n = 59` is the bundled set itself; `n = 300`
resamples its cases with replacement, afresh in each trial.

Flakiness (one system, run twice): a share f of the cases is flaky (f = 0, 5, 15, 35%; each
scenario runs at each level). In each run a flaky case
redraws each part of its outcome: with probability 1/2 it moves one step from the case's own
value, else it stays: the ranking (the first gold chunk one rank up or down, a gold chunk
lost from the top K, an unfound gold support gained at the lowest non-gold rank), the citation
hit (flipped), each judge grade (±1 on the 0-5 scale), the abstention decision (flipped; an
abstention has no groundedness grade, scores correctness 0 and cites nothing), the citation
flag, the recency check; and it times out with probability 0.05 (a target error: every
quality metric of that case is left out, error_rate and timeout_rate count it). A case that
abstained in the bundled run answers with the median grades of the cases that answered.

Scenarios:
    A/A        both runs draw from one distribution per case, and a fair coin assigns each
               case's two outcomes to a and b: the null holds exactly
    drop       (n = 300) run b is a worse system: each case is broken with probability π (per
               case and trial), on top of the same flakiness. π is set so that the expected paired
               change of the metric is twice its margin (the expected change of an unbroken
               case is exactly 0; that of a broken one is measured once, over 200,000 draws).
               hit rate: the case loses every gold chunk from the top K; recall_frac: its
               last-found gold support falls out of the top K; MRR: every chunk falls two
               ranks (two non-gold chunks on top); attribution: the answer no longer cites a
               gold chunk; groundedness, correctness: the grade falls to 0; error_rate: the
               case errors (a timeout), a rise
    halved     60 cases, two gold supports each at ranks 1 and 2; run b retrieves only the
               first: recall_frac 1 -> 0.5, nDCG 1 -> 0.613, precision 0.4 -> 0.2, hit rate and
               MRR unchanged. The ranking does not wobble; every other part of the outcome
               (taken from 60 of the bundled answerable cases) is flaky as above

scope_miss_rate is not in the simulation: the bundled run does not select folders, so it is
not measured (compare_runs lists it as not compared).

Usage:
    python bench/verdict_gate.py                      # 1,000 trials per A/A cell, 500 per drop cell (~1 min of CPU)
    python bench/verdict_gate.py --trials 200         # 200 A/A, 100 per drop cell
    python bench/verdict_gate.py --trials 2000 --power-trials 1000 --seed 7
    python bench/verdict_gate.py --run /tmp/bench-verdict/latest --json /tmp/verdict_gate.json

Targets (issue 36): A/A fail rate ≤ 5% on the bundled set and at n = 300; a drop of twice the
margin on a gated metric fails ≥ 80% at n = 300; the halved-recall case fails in every trial.
Results: bench/README.md, "The merge decision (issue 36)".
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evalkit.compare.cases import CaseTable  # noqa: E402 - after the path
from evalkit.evalset.anchors import GoldIndex, MatchTable  # noqa: E402
from evalkit.gate.verdict import Member, build_verdict, resolve_margins  # noqa: E402
from evalkit.metrics.keys import metric_key  # noqa: E402
from evalkit.metrics.registry import METRICS  # noqa: E402
from evalkit.metrics.retrieval import (  # noqa: E402
    AT_K_METRICS,
    average_precision,
    mrr,
    ndcg,
    precision,
    r_precision,
    recall_all,
    recall_any,
    recall_frac,
)

K = 5
ALPHA = 0.05
FLAKY = (0.0, 0.05, 0.15, 0.35)
WOBBLE = 0.5  # a flaky case's chance, per run and per part of its outcome, of moving one step
ERROR_P = 0.05  # a flaky case's chance, per run, of timing out
HALVED_N = 60
LARGE_N = 300
CALIBRATION_DRAWS = 200_000
# The columns a run's per-case values are kept in (CaseTable's names); the @K ones at K.
AT_K_COLUMNS = tuple(metric_key(m, K) for m in AT_K_METRICS)
COLUMNS = (*AT_K_COLUMNS, "recency_pass_rate", "attribution_hit_rate", "groundedness_avg", "correctness_avg",
           "abstention_accuracy", "false_abstention_rate", "abstention_decision_accuracy", "has_citations_rate",
           "error_rate", "timeout_rate", "empty_response_rate")
# compare_runs pairs hallucination as 1 − abstention accuracy: one test (family), differences negated.
MIRRORED = {"hallucination_rate_unanswerable": "abstention_accuracy"}
_ENTRY = {(m.at_k or m.key): m for m in METRICS}
# Retrieval versions of a case's ranking: its own, and the three ways a drop breaks it.
VERSIONS = ("base", "lose_hits", "lose_last", "fall2")
# The old threshold gate: the gate's nine built-in thresholds (scope_miss is not measured here),
# each the registry margin, on each run's aggregate, and MRR's relative drop.
THRESHOLD_WATCHED = ("recall_any", "mrr", "attribution_hit_rate", "groundedness_avg", "correctness_avg",
                     "abstention_accuracy", "hallucination_rate_unanswerable", "false_abstention_rate")
MRR_RELATIVE = 0.10
_EPS = 1e-9
OUTCOMES = ("fail", "inconclusive", "pass")
EXIT_CODE = {"fail": 1, "inconclusive": 4, "pass": 0}


def outcome_of(merge_label: str | None) -> str:
    """The default gate's outcome from the merge label, as compare_runs maps it (gate/decision.py
    `_verdict_gate`): a metric shown worse fails; a gated metric not settled is not enough
    evidence; anything else passes."""
    if merge_label == "worse":
        return "fail"
    if merge_label == "inconclusive":
        return "inconclusive"
    return "pass"


# ---------------------------------------------------------------- the bundled cases


def _table(matches: Sequence[frozenset[int]], like: MatchTable) -> MatchTable:
    return MatchTable(matches=list(matches), relevance=like.relevance, n_supports=like.n_supports,
                      graded_only=like.graded_only)


def _padded(table: MatchTable) -> list[frozenset[int]]:
    m = list(table.matches[:K])
    return m + [frozenset()] * (K - len(m))


def wobbles(table: MatchTable) -> list[MatchTable]:
    """A ranking one step away: the first gold chunk one rank down (out of the top K from rank
    K) or up, the lowest gold chunk lost, an unfound gold support gained at the lowest non-gold
    rank. Only the ones that differ from the ranking, each once."""
    m = _padded(table)
    hits = [p for p, s in enumerate(m) if s]
    out: list[list[frozenset[int]]] = []
    if hits:
        p = hits[0]
        down = list(m)
        if p + 1 < K:
            down[p], down[p + 1] = down[p + 1], down[p]
        else:
            down[p] = frozenset()
        out.append(down)
        if p > 0:
            up = list(m)
            up[p - 1], up[p] = up[p], up[p - 1]
            out.append(up)
        lose = list(m)
        lose[hits[-1]] = frozenset()
        out.append(lose)
    found = set().union(*m)
    unfound = [i for i in range(table.n_supports) if i not in found and i not in table.graded_only]
    empty = [p for p, s in enumerate(m) if not s]
    if unfound and empty:
        gain = list(m)
        gain[empty[-1]] = frozenset({unfound[0]})
        out.append(gain)
    seen = {tuple(m)}
    kept = []
    for variant in out:
        if tuple(variant) not in seen:
            seen.add(tuple(variant))
            kept.append(_table(variant, table))
    return kept


def broken(table: MatchTable, version: str) -> MatchTable:
    """The ranking as a drop leaves it (VERSIONS)."""
    m = _padded(table)
    if version == "base":
        return _table(m, table)
    if version == "lose_hits":
        return _table([frozenset()] * K, table)
    if version == "lose_last":
        first = {}
        for p, s in enumerate(m):
            for i in s:
                first.setdefault(i, p)
        if not first:
            return _table(m, table)
        last = max(first, key=lambda i: (first[i], i))
        return _table([s - {last} for s in m], table)
    if version == "fall2":
        return _table([frozenset(), frozenset(), *m[: K - 2]], table)
    raise ValueError(version)


def retrieval_row(table: MatchTable, groups: Sequence[Sequence[int]] | None) -> list[float]:
    """The case's values in AT_K_METRICS order (NaN where a metric does not apply)."""
    vals = {"recall_any": recall_any(table, K), "recall_all": recall_all(table, K, groups),
            "recall_frac": recall_frac(table, K), "precision": precision(table, K), "mrr": mrr(table, K),
            "ndcg": ndcg(table, K), "map": average_precision(table, K), "rprec": r_precision(table, K)}
    return [np.nan if vals[m] is None else float(vals[m]) for m in AT_K_METRICS]


@dataclass
class Population:
    """Per-case outcomes to draw runs from, one row per case (numpy arrays)."""

    ids: list[str]
    answerable: np.ndarray  # bool
    ret: np.ndarray  # (cases, versions, slots, metrics): slot 0 the version's ranking, then its wobbles
    n_wobbles: np.ndarray  # (cases, versions)
    recency: np.ndarray  # 0/1 or NaN
    attribution: np.ndarray  # 0/1 or NaN (answerable only)
    grounded: np.ndarray  # the grade when the case answers (NaN: never graded)
    correct: np.ndarray
    abstained: np.ndarray  # bool
    cites: np.ndarray  # 1/0 when the case answers (NaN: not counted)

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, idx: np.ndarray) -> Population:
        return Population([self.ids[i] for i in idx], *(getattr(self, f)[idx] for f in _ARRAY_FIELDS))


_ARRAY_FIELDS = ("answerable", "ret", "n_wobbles", "recency", "attribution", "grounded", "correct", "abstained", "cites")


def _pack(tables: list[dict[str, MatchTable] | None], groups: list[Sequence[Sequence[int]] | None]) -> tuple[np.ndarray, np.ndarray]:
    rows = []
    for versions, g in zip(tables, groups, strict=True):
        if versions is None:
            rows.append(None)
            continue
        rows.append({v: [retrieval_row(t, g) for t in [versions[v], *wobbles(versions[v])]] for v in VERSIONS})
    slots = max((len(r[v]) for r in rows if r is not None for v in VERSIONS), default=1)
    ret = np.full((len(rows), len(VERSIONS), slots, len(AT_K_METRICS)), np.nan)
    n_wob = np.zeros((len(rows), len(VERSIONS)), dtype=np.int64)
    for c, r in enumerate(rows):
        if r is None:
            continue
        for v, name in enumerate(VERSIONS):
            ret[c, v, : len(r[name])] = r[name]
            n_wob[c, v] = len(r[name]) - 1
    return ret, n_wob


def load_population(run_dir: Path) -> tuple[Population, dict]:
    """The bundled run's cases, each with its ranking's versions and wobbles, and the checks
    that the kernels reproduce the record's values."""
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text(encoding="utf-8").splitlines() if line]
    table = CaseTable([K], [K])
    for r in records:
        table.add(r)
    cols = {key: table.column(key) for key in table.keys}
    tables: list[dict[str, MatchTable] | None] = []
    groups: list[Sequence[Sequence[int]] | None] = []
    mismatches = 0
    for i, r in enumerate(records):
        case = r["case"]
        supports = case.get("gold_supports") or []
        if case.get("answerable", True) is False or not supports:
            tables.append(None)
            groups.append(None)
            continue
        t = GoldIndex(supports).ranking(r.get("retrieved_chunks") or [])
        g = case.get("required_support_groups")
        row = retrieval_row(broken(t, "base"), g)
        want = [cols[c][i] for c in AT_K_COLUMNS]
        if not np.allclose(row, want, equal_nan=True, atol=1e-12):
            mismatches += 1
        tables.append({v: broken(t, v) for v in VERSIONS})
        groups.append(g)
    ret, n_wob = _pack(tables, groups)
    answerable = np.array([r["case"].get("answerable", True) is not False for r in records])
    abstained = np.array([bool((r.get("abstention") or {}).get("abstained")) for r in records])
    grounded, correct = cols["groundedness_avg"].copy(), cols["correctness_avg"].copy()
    answered = answerable & ~abstained
    fill_g = float(np.nanmedian(grounded[answered]))
    fill_c = float(np.nanmedian(correct[answered]))
    # A case that abstained was not graded: when it answers, it gets the median answered grades.
    grounded[abstained] = fill_g
    correct[abstained & answerable] = fill_c
    correct[~answerable] = 0.0  # answering an unanswerable question is a wrong answer
    cites = cols["has_citations_rate"].copy()
    cites[answerable & abstained] = 1.0
    cites[~answerable] = np.nan  # as the records have it: not counted for unanswerable cases
    attribution = cols["attribution_hit_rate"].copy()
    pop = Population(
        ids=list(table.ids), answerable=answerable, ret=ret, n_wobbles=n_wob, recency=cols["recency_pass_rate"].copy(),
        attribution=attribution, grounded=grounded, correct=correct, abstained=abstained, cites=cites,
    )
    info = {"cases": len(records), "answerable": int(answerable.sum()), "kernel_mismatches": mismatches,
            "fill_grades": [fill_g, fill_c]}
    return pop, info


def halved_population(source: Population, rng: np.random.Generator) -> Population:
    """HALVED_N cases with two gold supports each, found at ranks 1 and 2; version "lose_last"
    keeps only the first (run b). Every other part of each outcome is a bundled answerable
    case's, drawn with replacement."""
    base = MatchTable(matches=[frozenset({0}), frozenset({1}), frozenset(), frozenset(), frozenset()],
                      relevance=[1.0, 1.0], n_supports=2)
    rows = np.array([retrieval_row(broken(base, v), None) for v in VERSIONS])  # (versions, metrics)
    drawn = source.take(rng.choice(np.flatnonzero(source.answerable), HALVED_N, replace=True))
    return replace(
        drawn, ids=[f"halved-{i}" for i in range(HALVED_N)],
        ret=np.broadcast_to(rows[None, :, None, :], (HALVED_N, len(VERSIONS), 1, len(AT_K_METRICS))).copy(),
        n_wobbles=np.zeros((HALVED_N, len(VERSIONS)), dtype=np.int64),  # the ranking does not wobble
        recency=np.full(HALVED_N, np.nan),
    )


# ---------------------------------------------------------------- drawing runs


@dataclass(frozen=True)
class Break:
    """How run b is broken on a case: a ranking version, a part set to 0, or a target error."""

    version: int = 0
    attribution: bool = False
    grounded: bool = False
    correct: bool = False
    error: bool = False


BREAKS: dict[str, tuple[str, Break]] = {
    # scenario -> (the metric it drops, the break)
    "hit rate": ("recall_any", Break(version=VERSIONS.index("lose_hits"))),
    "recall_frac": ("recall_frac", Break(version=VERSIONS.index("lose_last"))),
    "MRR": ("mrr", Break(version=VERSIONS.index("fall2"))),
    "attribution": ("attribution_hit_rate", Break(attribution=True)),
    "groundedness": ("groundedness_avg", Break(grounded=True)),
    "correctness": ("correctness_avg", Break(correct=True)),
    "error_rate": ("error_rate", Break(error=True)),
}


def draw_run(pop: Population, idx: np.ndarray, flaky: np.ndarray, broken_mask: np.ndarray | None, brk: Break,
             rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One run over the cases `idx` of `pop`: per-case values (COLUMNS, NaN = not counted), as
    CaseTable holds them. `flaky` and `broken_mask` are per drawn case."""
    n = idx.size
    hit = np.zeros(n, dtype=bool) if broken_mask is None else broken_mask

    def wob() -> np.ndarray:
        return flaky & (rng.random(n) < WOBBLE)

    def zeroed(base: np.ndarray, on: bool) -> np.ndarray:
        return np.where(hit & on & ~np.isnan(base), 0.0, base)

    version = np.where(hit, brk.version, 0)
    nw = pop.n_wobbles[idx, version]
    pick = 1 + np.minimum((rng.random(n) * np.maximum(nw, 1)).astype(np.int64), np.maximum(nw - 1, 0))
    slot = np.where(wob() & (nw > 0), pick, 0)
    ret = pop.ret[idx, version, slot]
    ans = pop.answerable[idx]
    abstained = pop.abstained[idx] ^ wob()
    attribution = zeroed(pop.attribution[idx], brk.attribution)
    attribution = np.where(wob(), 1.0 - attribution, attribution)
    grades = []
    for base, on in ((pop.grounded[idx], brk.grounded), (pop.correct[idx], brk.correct)):
        g = zeroed(base, on)
        step = np.where(g >= 5.0, -1.0, np.where(g <= 0.0, 1.0, rng.choice((-1.0, 1.0), n)))
        grades.append(np.clip(np.where(wob(), g + step, g), 0.0, 5.0))
    grounded, correct = grades
    cites = pop.cites[idx]
    cites = np.where(wob(), 1.0 - cites, cites)
    recency = pop.recency[idx]
    recency = np.where(wob(), 1.0 - recency, recency)
    error = (flaky & (rng.random(n) < ERROR_P)) | (hit & brk.error)

    out = {c: ret[:, j] for j, c in enumerate(AT_K_COLUMNS)}
    out["recency_pass_rate"] = recency
    out["attribution_hit_rate"] = np.where(ans & abstained, 0.0, attribution)
    out["groundedness_avg"] = np.where(abstained, np.nan, grounded)
    # Abstaining on an answerable case scores correctness 0; answering an unanswerable one too.
    out["correctness_avg"] = np.where(ans, np.where(abstained, 0.0, correct), np.where(abstained, np.nan, 0.0))
    out["has_citations_rate"] = np.where(abstained, np.nan, cites)
    out["abstention_accuracy"] = np.where(ans, np.nan, abstained.astype(float))
    out["false_abstention_rate"] = np.where(ans, abstained.astype(float), np.nan)
    out["abstention_decision_accuracy"] = (abstained != ans).astype(float)
    for c in COLUMNS[:-3]:
        out[c] = np.where(error, np.nan, out[c])  # a target error: left out of every paired quality metric
    out["error_rate"] = error.astype(float)
    out["timeout_rate"] = error.astype(float)
    out["empty_response_rate"] = np.zeros(n)
    return out


# ---------------------------------------------------------------- the two gates


@dataclass(frozen=True)
class Spec:
    metric: str
    k: int | None
    column: str
    sign: float
    direction: str
    margin: float
    gated: bool
    family: str


def verdict_specs() -> list[Spec]:
    """The verdict family compare_runs builds for two runs with these columns: the registry's
    margins at the gate's K (`resolve_margins` with no --margin), each metric's direction,
    whether it is gated, and its test (a mirrored pair once)."""
    testable = {*AT_K_METRICS, *(c for c in COLUMNS if "@" not in c), *MIRRORED}
    margins = resolve_margins({}, ks=[K], gate_k=K, testable=testable, at_k=set(AT_K_METRICS))
    specs = []
    for (metric, k), (margin, _source) in margins.items():
        base = MIRRORED.get(metric, metric)
        column = metric_key(base, k)
        if column not in COLUMNS or margin is None:
            continue  # not measured here (scope_miss_rate, the expectation metrics)
        entry = _ENTRY[metric]
        specs.append(Spec(metric, k, column, -1.0 if metric in MIRRORED else 1.0,
                          "higher_is_better" if entry.direction == "higher" else "lower_is_better",
                          float(margin), entry.verdict_gated, metric_key(base, k)))
    return specs


def members_of(specs: Sequence[Spec], a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> list[Member]:
    """The verdict's members for runs a and b: per metric measured by both, d_i = b_i − a_i
    over the cases both scored (a mirrored metric's differences negated)."""
    out = []
    for s in specs:
        va, vb = a[s.column], b[s.column]
        ok_a, ok_b = ~np.isnan(va), ~np.isnan(vb)
        if not ok_a.any() or not ok_b.any():
            continue  # not measured by both runs: compare_runs has no row for it
        both = ok_a & ok_b
        d = (vb[both] - va[both]) * s.sign + 0.0
        out.append(Member(metric=s.metric, k=s.k, direction=s.direction, margin=s.margin, source="registry", diff=d,
                          test=None, family=s.family, gated=s.gated))
    return out


def _aggregate(run: Mapping[str, np.ndarray], answerable: np.ndarray) -> dict[str, float | None]:
    """A run's metrics.json means of the watched metrics: a target error scores 0 on retrieval
    and attribution (the runner scores it with no chunks and no references), and is left out of
    the judge and abstention means."""
    error = run["error_rate"] > 0

    def mean(x: np.ndarray) -> float | None:
        x = x[~np.isnan(x)]
        return float(x.mean()) if x.size else None

    out: dict[str, float | None] = {}
    for name, column in (("recall_any", metric_key("recall_any", K)), ("mrr", metric_key("mrr", K)),
                         ("attribution_hit_rate", "attribution_hit_rate")):
        x = np.where(error & answerable, 0.0, run[column])
        out[name] = mean(x)
    for name in ("groundedness_avg", "correctness_avg", "abstention_accuracy", "false_abstention_rate"):
        out[name] = mean(run[name])
    acc = out["abstention_accuracy"]
    out["hallucination_rate_unanswerable"] = None if acc is None else 1.0 - acc
    return out


def threshold_fails(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], answerable: np.ndarray) -> bool:
    """The old default, `--gate threshold`: any watched aggregate worse by more than its
    threshold (the registry margin), or MRR down by more than 10% of a's."""
    ma, mb = _aggregate(a, answerable), _aggregate(b, answerable)
    for name in THRESHOLD_WATCHED:
        x, y = ma[name], mb[name]
        if x is None or y is None:
            continue
        entry = _ENTRY[name]
        worse = (x - y) if entry.direction == "higher" else (y - x)
        if worse > float(entry.margin) + _EPS:
            return True
    x, y = ma["mrr"], mb["mrr"]
    return bool(x and y is not None and (x - y) / x > MRR_RELATIVE + _EPS)


# ---------------------------------------------------------------- cells


@dataclass
class Cell:
    """One row of the table: a scenario, its counts and what it aimed for."""

    scenario: str
    kind: str  # "A/A" | "drop" | "halved"
    n: int
    flaky: float
    trials: int
    seed: list[int]
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    threshold_fail: int = 0
    metric: str | None = None  # drop: the metric it drops
    target_worse: int = 0  # drop: trials in which that metric itself was shown worse
    broken_share: float | None = None  # drop: π
    delta: list[float] = field(default_factory=list)  # drop: the metric's observed paired change per trial
    family: list[int] = field(default_factory=list)  # m of each trial
    unsettled: dict[str, int] = field(default_factory=dict)  # gated metric -> trials it was inconclusive
    worse: dict[str, int] = field(default_factory=dict)  # metric -> trials it was shown worse

    def rate(self, outcome: str) -> float:
        return self.counts[outcome] / self.trials if self.trials else float("nan")

    @property
    def target(self) -> str:
        return {"A/A": "fail ≤ 5%", "drop": "fail ≥ 80%", "halved": "fail 100%"}[self.kind]

    @property
    def met(self) -> bool:
        if self.kind == "A/A":
            return self.rate("fail") <= 0.05
        if self.kind == "drop":
            return self.rate("fail") >= 0.80
        return self.counts["fail"] == self.trials


def _sample(pop: Population, n: int, rng: np.random.Generator) -> np.ndarray:
    """The cases of one trial: `pop` as it is when n is its size, else n drawn with replacement."""
    return np.arange(len(pop)) if n == len(pop) else rng.integers(0, len(pop), n)


def run_cell(cell: Cell, pop: Population, specs: Sequence[Spec], rng: np.random.Generator,
             brk: Break | None = None, share: float = 0.0) -> Cell:
    """`cell.trials` trials: a fresh sample of cases (n < len(pop): the bundled set as is),
    flaky cases, two runs, both gates."""
    spec_of = {s.metric: s for s in specs}
    for _ in range(cell.trials):
        idx = _sample(pop, cell.n, rng)
        n = idx.size
        flaky = rng.random(n) < cell.flaky
        if brk is None:  # A/A: two outcomes of one distribution, a fair coin decides which is a's
            one, two = draw_run(pop, idx, flaky, None, Break(), rng), draw_run(pop, idx, flaky, None, Break(), rng)
            coin = rng.random(n) < 0.5
            a = {c: np.where(coin, one[c], two[c]) for c in COLUMNS}
            b = {c: np.where(coin, two[c], one[c]) for c in COLUMNS}
        else:
            a = draw_run(pop, idx, flaky, None, Break(), rng)
            b = draw_run(pop, idx, flaky, rng.random(n) < share, brk, rng)
        verdict = build_verdict(members_of(specs, a, b), [], alpha=ALPHA)
        cell.counts[outcome_of(verdict.verdict)] += 1
        cell.family.append(verdict.family_size)
        for v in verdict.metrics:
            key = metric_key(v.metric, v.k)
            if v.gated and v.verdict == "inconclusive":
                cell.unsettled[key] = cell.unsettled.get(key, 0) + 1
            if v.verdict == "worse":
                cell.worse[key] = cell.worse.get(key, 0) + 1
        cell.threshold_fail += threshold_fails(a, b, pop.answerable[idx])
        if cell.metric is not None:
            mv = next((v for v in verdict.metrics if v.metric == cell.metric), None)
            cell.target_worse += mv is not None and mv.verdict == "worse"
            s = spec_of[cell.metric]
            va, vb = a[s.column], b[s.column]
            both = ~(np.isnan(va) | np.isnan(vb))
            cell.delta.append(float((vb[both] - va[both]).mean()) if both.any() else float("nan"))
    return cell


def broken_share(pop: Population, metric_column: str, brk: Break, margin: float, direction: str, flaky: float,
                 rng: np.random.Generator, draws: int = CALIBRATION_DRAWS) -> float:
    """π such that the expected paired change is twice the margin, the wrong way. An unbroken
    case's expected change is exactly 0 (a and b draw from one distribution), so the expected
    change is π times that of a broken case, measured here over `draws` case draws."""
    idx = rng.integers(0, len(pop), draws)
    fl = rng.random(idx.size) < flaky
    a = draw_run(pop, idx, fl, None, Break(), rng)
    b = draw_run(pop, idx, fl, np.ones(idx.size, dtype=bool), brk, rng)
    va, vb = a[metric_column], b[metric_column]
    both = ~(np.isnan(va) | np.isnan(vb))
    per_broken = float((vb[both] - va[both]).mean())
    wrong_way = -per_broken if direction == "higher_is_better" else per_broken
    if wrong_way <= 0:
        raise ValueError(f"breaking {metric_column} does not make it worse ({per_broken:+.3f} a case)")
    return 2.0 * margin / wrong_way


# ---------------------------------------------------------------- the run


def make_bundled_run(results_dir: Path) -> Path:
    """`scripts/run_eval.py --eval-set eval_set.jsonl --results-dir DIR` (offline): the run folder."""
    subprocess.run([sys.executable, str(REPO / "scripts" / "run_eval.py"), "--eval-set", str(REPO / "eval_set.jsonl"),
                    "--results-dir", str(results_dir)], cwd=REPO, check=True, capture_output=True, text=True)
    return (results_dir / "latest").resolve()


def revision() -> str:
    """The commit evalkit was at, and whether its files had changes not yet committed."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "?"
    return head + (" + uncommitted changes to evalkit/" if git("status", "--porcelain", "--", "evalkit") else "")


def machine() -> str:
    cpu = platform.processor() or "?"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, numpy {np.__version__}"


def simulate(pop: Population, *, trials: int, power_trials: int, seed: int, flaky_levels: Sequence[float] = FLAKY,
             power_flaky: Sequence[float] = FLAKY, large_n: int = LARGE_N, calibration_draws: int = CALIBRATION_DRAWS,
             progress: Callable[[Cell], None] | None = None) -> list[Cell]:
    """Every cell: A/A at n = len(pop) and large_n for each flakiness level, each drop at
    large_n for each level of `power_flaky`, the halved-recall case for each level. Cell i
    draws from np.random.default_rng([seed, i])."""
    specs = verdict_specs()
    cells: list[Cell] = []
    plan: list[tuple[Cell, Callable[[Cell, np.random.Generator], Cell]]] = []
    i = 0
    for f in flaky_levels:
        for n in (len(pop), large_n):
            cell = Cell(f"A/A, {f:.0%} flaky", "A/A", n, f, trials, [seed, i])
            plan.append((cell, lambda c, rng: run_cell(c, pop, specs, rng)))
            i += 1
    spec_of = {s.metric: s for s in specs}
    for f in power_flaky:
        for name, (metric, brk) in BREAKS.items():
            s = spec_of[metric]
            change = f"{'−' if s.direction == 'higher_is_better' else '+'}{2 * s.margin:g}"
            cell = Cell(f"{name} {change}, {f:.0%} flaky", "drop", large_n, f, power_trials, [seed, i], metric=metric)

            def job(c: Cell, rng: np.random.Generator, s: Spec = s, brk: Break = brk) -> Cell:
                c.broken_share = broken_share(pop, s.column, brk, s.margin, s.direction, c.flaky, rng, calibration_draws)
                if c.broken_share > 1.0:
                    raise ValueError(f"{c.scenario}: a drop of {2 * s.margin:g} needs more than every case broken")
                return run_cell(c, pop, specs, rng, brk, c.broken_share)

            plan.append((cell, job))
            i += 1
    for f in flaky_levels:
        cell = Cell(f"halved recall, {f:.0%} flaky", "halved", HALVED_N, f, power_trials, [seed, i])

        def halved(c: Cell, rng: np.random.Generator) -> Cell:
            return run_cell(c, halved_population(pop, rng), specs, rng, Break(version=VERSIONS.index("lose_last")), 1.0)

        plan.append((cell, halved))
        i += 1
    for cell, job in plan:
        job(cell, np.random.default_rng(cell.seed))
        cells.append(cell)
        if progress is not None:
            progress(cell)
    return cells


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def table_rows(cells: Sequence[Cell]) -> list[str]:
    rows = ["| scenario | n | trials | fail (exit 1) | not enough evidence (exit 4) | pass (exit 0) "
            "| old threshold gate: fail | target | met |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | :---: |"]
    for c in cells:
        rows.append(f"| {c.scenario} | {c.n} | {c.trials:,} | {_pct(c.rate('fail'))} | {_pct(c.rate('inconclusive'))} "
                    f"| {_pct(c.rate('pass'))} | {_pct(c.threshold_fail / c.trials)} | {c.target} | "
                    f"{'yes' if c.met else 'no'} |")
    return rows


def drop_rows(cells: Sequence[Cell]) -> list[str]:
    rows = ["| scenario | cases broken (π) | mean Δ of the metric | that metric shown worse | median m |",
            "| --- | ---: | ---: | ---: | ---: |"]
    for c in cells:
        if c.kind != "drop":
            continue
        rows.append(f"| {c.scenario} | {c.broken_share:.3f} | {np.nanmean(c.delta):+.3f} | "
                    f"{_pct(c.target_worse / c.trials)} | {int(np.median(c.family))} |")
    return rows


def _top(counts: Mapping[str, int], trials: int, limit: int = 4) -> str:
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{name} {_pct(c / trials)}" for name, c in top[:limit])
    return (shown + (f", {len(top) - limit} more" if len(top) > limit else "")) or "—"


def aa_rows(cells: Sequence[Cell]) -> list[str]:
    rows = ["| scenario | n | median m | gated metrics not settled (share of trials) | shown worse (share of trials) |",
            "| --- | ---: | ---: | --- | --- |"]
    for c in cells:
        if c.kind == "A/A":
            rows.append(f"| {c.scenario} | {c.n} | {int(np.median(c.family))} | {_top(c.unsettled, c.trials)} | "
                        f"{_top(c.worse, c.trials)} |")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000, help="trials per A/A cell (default 1,000)")
    ap.add_argument("--power-trials", type=int, help="trials per drop and halved-recall cell (default: half of --trials)")
    ap.add_argument("--seed", type=int, default=0, help="cell i draws from numpy default_rng([seed, i])")
    ap.add_argument("--run", type=Path, help="a run folder of the bundled eval set (default: make one, offline)")
    ap.add_argument("--n", type=int, default=LARGE_N, help="the large eval set's size (default 300)")
    ap.add_argument("--json", type=Path, help="also write every cell and the machine to this JSON file")
    a = ap.parse_args(argv)
    power_trials = a.power_trials if a.power_trials is not None else max(1, a.trials // 2)
    started = time.perf_counter()
    load = [os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = a.run.resolve() if a.run is not None else make_bundled_run(Path(tmp) / "results")
        pop, info = load_population(run_dir)
    if info["kernel_mismatches"]:
        print(f"warning: the kernels disagree with {info['kernel_mismatches']} record(s)", file=sys.stderr)
    print(f"The bundled run: {info['cases']} cases ({info['answerable']} answerable), {run_dir.name}; "
          f"the kernels reproduce every record's retrieval values: {'yes' if not info['kernel_mismatches'] else 'no'}")
    print(f"{datetime.date.today().isoformat()}, {machine()}; evalkit at {revision()}")
    print(f"Trials: {a.trials:,} per A/A cell, {power_trials:,} per drop and halved-recall cell; seed {a.seed} "
          f"(cell i: default_rng([{a.seed}, i])); α = {ALPHA}; flaky case: each part moves with p = {WOBBLE}, "
          f"times out with p = {ERROR_P}")

    def progress(c: Cell) -> None:
        sys.stdout.flush()
        print(f"  {c.scenario}, n = {c.n}: fail {_pct(c.rate('fail'))}, exit 4 {_pct(c.rate('inconclusive'))}, "
              f"pass {_pct(c.rate('pass'))} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)

    cells = simulate(pop, trials=a.trials, power_trials=power_trials, seed=a.seed, large_n=a.n, progress=progress)
    load.append(os.getloadavg())
    wall = time.perf_counter() - started
    print()
    print("\n".join(table_rows(cells)))
    print()
    print("A/A: what is not settled, and what is shown worse (m: the metrics that changed, Bonferroni's count):")
    print()
    print("\n".join(aa_rows(cells)))
    print()
    print("Drops (run b broken on a share π of the cases, on top of the flakiness):")
    print()
    print("\n".join(drop_rows(cells)))
    print()
    print(f"Load average (1, 5, 15 min): at the start {', '.join(f'{x:.2f}' for x in load[0])}; "
          f"at the end {', '.join(f'{x:.2f}' for x in load[1])}. Wall {wall:.0f} s.")
    missed = [c.scenario + f" (n = {c.n})" for c in cells if not c.met]
    print("Targets missed: " + ("; ".join(missed) if missed else "none"))
    if a.json is not None:
        a.json.write_text(json.dumps({
            "date": datetime.date.today().isoformat(), "machine": machine(), "revision": revision(), "load": load,
            "wall_s": wall,
            "trials": a.trials, "power_trials": power_trials, "seed": a.seed, "run": str(run_dir), "population": info,
            "cells": [{"scenario": c.scenario, "kind": c.kind, "n": c.n, "flaky": c.flaky, "trials": c.trials,
                       "seed": c.seed, **c.counts, "threshold_fail": c.threshold_fail, "metric": c.metric,
                       "target_worse": c.target_worse, "broken_share": c.broken_share,
                       "mean_delta": float(np.nanmean(c.delta)) if c.delta else None, "unsettled": c.unsettled,
                       "worse": c.worse, "median_m": float(np.median(c.family)), "met": c.met} for c in cells],
        }, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
