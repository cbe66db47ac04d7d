"""Score an existing TREC run file against TREC qrels, as trec_eval reads them.

`score_trec_run(run, qrels, ks=...)` reads a run (`qid Q0 docno rank score tag`, one line per
retrieved document) and qrels (`qid 0 docno rel`, through `importers.trec.read_qrels`), and
scores every query with evalkit's own kernels (`metrics.retrieval.score_case_retrieval`): each
judged docno of grade > 0 is a gold support `{"chunk_id": docno}` with its grade as relevance,
each retrieved docno a chunk with that chunk_id. So a TREC document is a support, and the
numbers are those `evalkit run` gives the same ranking of the same judgments.

What trec_eval does, done the same way (its source: form_res_rels.c, get_qrels.c, m_*.c):

- **Order.** trec_eval ignores the rank column: it sorts each query's documents by score,
  descending, ties by docno descending (`strcmp`, byte order; Python's str order is the same
  on UTF-8), and so does this. A run whose file order differs from that order is scored in
  trec_eval's order, with a warning naming how many queries moved (`TrecScores.reordered`).
- **Comments.** A line of the run or the qrels that starts with `#` is skipped (trec_eval 10.0).
- **Which queries.** A query of the run with no judgment in the qrels is skipped (trec_eval
  evaluates only judged queries; counted in `skipped["not_judged"]`), as is a judged query
  the run does not list (trec_eval without `-c`; `skipped["not_in_run"]`).
- **Relevance level** (`relevance_level`, trec_eval's `-l`, default: every grade > 0, which is
  trec_eval's default 1 on integer grades): a grade >= the level is relevant; a grade in (0,
  level) is a graded-only support, which only nDCG counts (trec_eval's ndcg takes the gain of
  every judged grade > 0).
- **Gain** (`gain`): "exponential" 2^rel - 1 (evalkit's default, ranx's ndcg_burges), or
  "linear" rel (trec_eval's ndcg and ndcg_cut); the two agree on binary grades.
- **Topics without a relevant document** (`no_relevant`): a judged query whose judgments are all
  non-relevant (or, with a level, below it). "skip" (the default, evalkit's rule everywhere: a
  case without gold supports is unlabeled and in no retrieval mean) leaves it out of every
  mean; "zero" counts it 0 on every metric, as trec_eval and ir_measures do.

A docno listed twice in one query is an input error, as in trec_eval (evalkit would count the
repeat as a duplicate chunk, trec_eval refuses the file). Scores must be finite numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evalkit.errors import MAX_PROBLEMS_SHOWN, BadConfig, InputError, Problem
from evalkit.interop.importers.trec import (
    check_relevance_level,
    read_qrels,
    supports_of,
)
from evalkit.jsonio import read_text
from evalkit.metrics.retrieval import (
    AT_K_METRICS,
    GAINS,
    score_case_retrieval,
    validate_ks,
)
from evalkit.store.runlog import Cell

__all__ = ["NO_RELEVANT", "TREC_EVAL_NAMES", "TREC_METRICS", "UNCUT_NAMES", "TrecRun", "TrecScores", "read_trec_run",
           "score_trec_run", "trec_eval_name", "trec_eval_names", "trec_order"]

NO_RELEVANT = ("skip", "zero")
# The @K metrics a TREC run is scored on (recall_all needs support groups, which qrels lack).
TREC_METRICS = tuple(m for m in AT_K_METRICS if m != "recall_all")
# evalkit @K metric -> trec_eval's measure on the ranking cut at K (`{k}` its K); mrr and rprec
# have no cut-off in trec_eval: recip_rank and Rprec equal them once K covers the ranking.
TREC_EVAL_NAMES = {
    "recall_any": "success_{k}", "recall_frac": "recall_{k}", "precision": "P_{k}", "mrr": "recip_rank",
    "ndcg": "ndcg_cut_{k}", "map": "map_cut_{k}", "rprec": "Rprec",
}


# trec_eval's measures of the whole ranking, which the @K metrics equal once K covers it.
UNCUT_NAMES = {"mrr": "recip_rank", "rprec": "Rprec", "map": "map", "ndcg": "ndcg"}


def trec_eval_name(metric: str, k: int, gain: str = "linear") -> str | None:
    """trec_eval's name of `metric` at K (None for nDCG with gain exponential: trec_eval has none).
    recip_rank and Rprec have no cut-off in trec_eval: theirs only once K covers the ranking."""
    if metric == "ndcg" and gain != "linear":
        return None
    name = TREC_EVAL_NAMES.get(metric)
    return None if name is None else name.format(k=k)


def trec_eval_names(metric: str, k: int, depth: int, gain: str = "linear") -> list[str]:
    """Every trec_eval measure `metric`@K equals on rankings at most `depth` long: its cut name
    (`map_cut_10`) and, once K >= depth, the uncut one (`map`); recip_rank and Rprec only then."""
    names = []
    cut = trec_eval_name(metric, k, gain)
    if cut is not None and metric not in ("mrr", "rprec"):
        names.append(cut)
    if k >= depth and metric in UNCUT_NAMES and (metric != "ndcg" or gain == "linear"):
        names.append(UNCUT_NAMES[metric])
    return names


@dataclass
class TrecRun:
    """A run file as trec_eval reads it.

    Attributes:
        rankings: qid -> docnos in trec_eval's order (score descending, then docno
            descending), queries in the order the file first lists them.
        tags: the tag column's values, in file order.
        n_lines: document lines read (comments and blank lines not counted).
        reordered: qids whose file order is not trec_eval's order.
    """

    rankings: dict[str, list[str]] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    n_lines: int = 0
    reordered: list[str] = field(default_factory=list)


def trec_order(docs: Sequence[tuple[str, float]]) -> list[str]:
    """The docnos of [(docno, score)] in trec_eval's order: score descending, ties by docno
    descending (form_res_rels.c `comp_sim_docno`: `strcmp(p2->docno, p1->docno)`)."""
    by_docno = sorted(docs, key=lambda d: d[0], reverse=True)
    return [d for d, _ in sorted(by_docno, key=lambda d: -d[1])]  # stable: ties keep docno descending


def read_trec_run(path: str | Path) -> TrecRun:
    """Read a TREC run file (module docstring).

    Raises:
        InputError: every malformed line (not 6 columns, a score that is not a finite number)
            and every docno listed twice in a query, each with its line.
    """
    path = Path(path)
    where = str(path)
    text = read_text(path)
    problems: list[Problem] = []
    listed: dict[str, list[tuple[str, float]]] = {}
    seen: dict[tuple[str, str], int] = {}
    run = TrecRun()
    for lineno, line in enumerate(text.split("\n"), start=1):
        if line.startswith("#"):
            continue  # a comment line (trec_eval 10.0)
        cols = line.split()
        if not cols:
            continue
        if len(cols) != 6:
            problems.append(Problem(f"expected `qid Q0 docno rank score tag`, got {len(cols)} columns", path=where, line=lineno))
            continue
        qid, _, docno, _, raw, tag = cols
        try:
            score = float(raw)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            problems.append(Problem(f"score {raw!r} is not a finite number", path=where, line=lineno))
            continue
        first = seen.setdefault((qid, docno), lineno)
        if first != lineno:
            problems.append(Problem(f"docno {docno!r} is listed twice for query {qid!r} (first at line {first}); "
                                    "trec_eval refuses a run with duplicate docs", path=where, line=lineno))
            continue
        listed.setdefault(qid, []).append((docno, score))
        run.tags.append(tag)
        run.n_lines += 1
    if problems:
        if len(problems) > MAX_PROBLEMS_SHOWN:
            problems = [*problems[:MAX_PROBLEMS_SHOWN], Problem(f"… and {len(problems) - MAX_PROBLEMS_SHOWN} more", path=where)]
        raise InputError(problems)
    for qid, docs in listed.items():
        ranking = trec_order(docs)
        run.rankings[qid] = ranking
        if ranking != [d for d, _ in docs]:
            run.reordered.append(qid)
    return run


@dataclass
class TrecScores:
    """What `score_trec_run` computed.

    Attributes:
        ks: the cut-offs, the first the primary K.
        means: str(K) -> metric -> the mean over the queries it applies to (None: none).
        n: str(K) -> metric -> how many queries each mean is over.
        per_query: qid -> str(K) -> metric -> value (None: the metric does not apply).
        n_queries: queries scored (judged and in the run).
        skipped: "not_judged" (run queries without judgments), "not_in_run" (judged queries the
            run lacks), "no_relevant" (judged, nothing relevant; left out with no_relevant "skip").
        reordered: run queries whose file order is not trec_eval's order.
        depth: the longest ranking of the run: at K >= depth a metric is trec_eval's uncut one.
        warnings: one line each.
    """

    ks: list[int]
    gain: str
    relevance_level: float | None
    no_relevant: str
    means: dict[str, dict[str, float | None]] = field(default_factory=dict)
    n: dict[str, dict[str, int]] = field(default_factory=dict)
    per_query: dict[str, dict[str, dict[str, float | None]]] = field(default_factory=dict)
    n_queries: int = 0
    skipped: dict[str, int] = field(default_factory=lambda: {"not_judged": 0, "not_in_run": 0, "no_relevant": 0})
    reordered: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    depth: int = 0
    warnings: list[str] = field(default_factory=list)

    def to_json(self, *, per_query: bool = False) -> dict[str, Any]:
        from evalkit.metrics.keys import ir_measures_values

        out: dict[str, Any] = {
            "ks": list(self.ks), "gain": self.gain, "relevance_level": self.relevance_level,
            "no_relevant": self.no_relevant, "n_queries": self.n_queries, "skipped": dict(self.skipped),
            "reordered": len(self.reordered), "tags": list(self.tags), Cell.AT_K: {
                k: {**self.means[k], "n_by_metric": dict(self.n[k])} for k in self.means
            },
            "ir_measures": ir_measures_values(self.means),
            "trec_eval": {
                name: self.means[str(k)][m] for k in sorted(self.ks) for m in TREC_METRICS
                for name in trec_eval_names(m, k, self.depth, self.gain)
            },
            "warnings": list(self.warnings),
        }
        if per_query:
            out["per_query"] = self.per_query
        return out


def score_trec_run(
    run: str | Path | TrecRun,
    qrels: str | Path | Sequence[str | Path],
    *,
    ks: Sequence[int] = (10,),
    relevance_level: float | None = None,
    gain: str = "exponential",
    no_relevant: Literal["skip", "zero"] = "skip",
) -> TrecScores:
    """Score the TREC run `run` against `qrels` (one path or several, merged: a docno judged
    twice keeps its highest grade) at each K of `ks` (module docstring: the rules).

    Raises:
        InputError: a malformed run or qrels line (each with its file and line); a bad K,
            gain, relevance level or no_relevant value (BadConfig).
    """
    ks = validate_ks(list(ks))
    if gain not in GAINS:
        raise BadConfig(Problem(f"unknown gain {gain!r}; expected one of {', '.join(GAINS)}", field="--gain"))
    if no_relevant not in NO_RELEVANT:
        raise BadConfig(Problem(f"unknown no_relevant {no_relevant!r}; expected one of {', '.join(NO_RELEVANT)}",
                                field="--no-relevant"))
    level = check_relevance_level(relevance_level)
    problems: list[Problem] = []
    judged: dict[str, dict[str, float]] = {}
    for p in [qrels] if isinstance(qrels, (str, Path)) else list(qrels):
        for qid, docs in read_qrels(Path(p), problems).items():
            mine = judged.setdefault(qid, {})
            for d, r in docs.items():
                mine[d] = max(mine.get(d, r), r)
    trec_run = run if isinstance(run, TrecRun) else read_trec_run(run)
    if problems:
        raise InputError(problems)
    out = TrecScores(ks=ks, gain=gain, relevance_level=level, no_relevant=no_relevant,
                     reordered=list(trec_run.reordered), tags=list(dict.fromkeys(trec_run.tags)),
                     depth=max((len(r) for r in trec_run.rankings.values()), default=0))
    sums = {str(k): {m: 0.0 for m in TREC_METRICS} for k in ks}
    counts = {str(k): {m: 0 for m in TREC_METRICS} for k in ks}
    for qid, ranking in trec_run.rankings.items():
        docs = judged.get(qid)
        if docs is None:
            out.skipped["not_judged"] += 1
            continue
        supports = supports_of(docs, level)
        no_rel = not any(s.get("graded_only") is not True for s in supports)
        if no_rel and no_relevant == "skip":
            out.skipped["no_relevant"] += 1
            continue
        chunks = [{"chunk_id": d, "rank": i} for i, d in enumerate(ranking, start=1)]
        at_k = score_case_retrieval({"gold_supports": supports}, chunks, [], None, None, ks, gain=gain)[Cell.AT_K]
        values: dict[str, dict[str, float | None]] = {}
        for k in ks:
            block = at_k[str(k)]
            # "zero": trec_eval's 0 for a query with nothing relevant (and nDCG's 0 when IDCG is 0)
            values[str(k)] = {m: (0.0 if block[m] is None and no_relevant == "zero" else block[m]) for m in TREC_METRICS}
            for m, v in values[str(k)].items():
                if v is not None:
                    sums[str(k)][m] += v
                    counts[str(k)][m] += 1
        out.per_query[qid] = values
        out.n_queries += 1
    out.skipped["not_in_run"] = sum(1 for q in judged if q not in trec_run.rankings)
    for k in ks:
        key = str(k)
        out.means[key] = {m: (sums[key][m] / counts[key][m] if counts[key][m] else None) for m in TREC_METRICS}
        out.n[key] = dict(counts[key])
    _warn(out, len(trec_run.rankings))
    return out


def _warn(out: TrecScores, n_run: int) -> None:
    if out.reordered:
        shown = ", ".join(out.reordered[:5]) + (" …" if len(out.reordered) > 5 else "")
        out.warnings.append(
            f"{len(out.reordered)} of {n_run} queries are not listed in trec_eval's order ({shown}): scored by score "
            "descending, ties by docno descending, as trec_eval sorts (the rank column is not read)"
        )
    if out.skipped["not_judged"]:
        out.warnings.append(f"{out.skipped['not_judged']} run queries have no judgment in the qrels: skipped, as trec_eval does")
    if out.skipped["not_in_run"]:
        out.warnings.append(f"{out.skipped['not_in_run']} judged queries are not in the run: skipped, as trec_eval does "
                            "without -c")
    if out.skipped["no_relevant"]:
        out.warnings.append(
            f"{out.skipped['no_relevant']} judged queries have no relevant document: left out of every mean "
            "(--no-relevant skip, evalkit's rule); trec_eval counts them 0 (--no-relevant zero)"
        )
