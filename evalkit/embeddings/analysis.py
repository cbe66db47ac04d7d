"""Embedding analysis of a stored run: EVAL.md, "Embedding analysis", is the spec.

Per case (the first trial of each case): the cosine similarity of the question to each gold
support's text, to each of the top-K retrieved chunks (K the run's primary K), and the gap
(best gold minus best retrieved). Per run: their distribution, the cases whose gold is far
from the question (at or below the run's `far_percentile`-th percentile of question-to-gold
similarity), and k-means clusters of the questions with each cluster's failure rate and top
terms, k chosen by the highest mean silhouette over k = 2..`max_clusters` (the silhouette is
the clustering quality reported).

A gold support's text comes from the notes: the notes are chunked by the reference chunker
and a support's text is every chunk the one anchor rule (`evalkit.evalset.anchors.match_support`)
matches to it, in file order, joined and cut at MAX_GOLD_CHARS. Without the notes (or when
no note chunk matches), the chunks retrieved anywhere in the run that the rule matches stand
in (their text as the run stored it, which may be cut). A retrieved chunk the run stored cut
gets its full text where the judges' source of it finds it (`evalkit.judges.context`), so
both sides of the gap are whole texts.

Memory stays bounded as the run grows: the records are read once, keeping per case its
texts' numbers in one table of distinct texts; the texts are then embedded BLOCK_CASES cases
at a time (each distinct text of a block once), the block's similarities taken and its
vectors dropped, but for the questions the clustering takes (at most MAX_CLUSTER_QUESTIONS).
An embedder whose vectors depend on the texts embedded together (the lexical one's IDF) is
first fitted on every text of the analysis, so each vector is the one a single call gives.

The kernels (`cosine_rows`, `kmeans`, `silhouette`) are numpy over plain arrays;
`analyze_run` reads the run and `write_analysis` writes `embeddings.json` and re-renders an
existing report.html.
"""

from __future__ import annotations

import asyncio
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from evalkit.embeddings.embedders import Embedder, EmbeddingError
from evalkit.evalset.anchors import match_support, normalize_rel_path, order_chunks
from evalkit.metrics.stages import record_stage
from evalkit.store.runlog import Cfg, Met, Rec
from evalkit.store.runs import EMBEDDINGS_FILE, RunDir

__all__ = [
    "DEFAULT_FAR_PERCENTILE", "DEFAULT_MAX_CLUSTERS", "FAILING_STAGES", "MAX_GOLD_CHARS", "SCHEMA",
    "analyze_run", "cosine_rows", "distances", "error_body", "kmeans", "leading_coordinates", "silhouette", "terms", "top_terms", "write_analysis",
]

SCHEMA = 1
MAX_GOLD_CHARS = 4000  # one gold support's text sent to the embedder (OpenAI's limit is 8,191 tokens)
DEFAULT_FAR_PERCENTILE = 10.0
DEFAULT_MAX_CLUSTERS = 8
MIN_CLUSTER_CASES = 4  # fewer questions than this: no clustering
# More questions than this are clustered as a seeded sample of this many (the distance matrix
# the silhouettes share is n x n: 4,000 questions take 128 MB).
MAX_CLUSTER_QUESTIONS = 4000
# Cases whose texts are embedded together: a block of SciFact cases at K = 20 holds about
# 5,000 distinct texts, 80 MB of 4,096-float lexical vectors.
BLOCK_CASES = 256
CLUSTER_DIMS = 128  # k-means runs in the questions' 128 leading directions (`leading_coordinates`)
KMEANS_RESTARTS = 4
KMEANS_MAX_ITER = 100
TOP_TERMS = 5
# A case is failing when its failure stage (evalkit.metrics.stages) is one of these; cases
# whose stage is `unlabeled` or `unknown` are left out of the clusters' rates.
FAILING_STAGES = ("retrieval_miss", "not_cited", "unsupported", "incorrect", "abstained_answerable",
                  "answered_unanswerable", "error")
_UNJUDGED = ("unlabeled", "unknown")
_TERM = re.compile(r"[^\W\d_][\w'-]*[^\W_]|[^\W\d_]")
_STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does for from had has have how i if in into is it its "
    "me my of on or our should so than that the their them then there these they this to was we were what when "
    "where which who whom whose why will with would you your about after before any all also more most not "
    "only other over same some such up out just s t don".split()
)


# --------------------------------------------------------------------------- kernels


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of `a` with the same row of `b`; NaN where either row is zero."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    dots = np.einsum("ij,ij->i", a, b)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = dots / (na * nb)
    out[(na == 0) | (nb == 0)] = np.nan
    return np.clip(out, -1.0, 1.0)


def _unit(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def _sq_dists(x: np.ndarray, centers: np.ndarray) -> np.ndarray:
    d = (x * x).sum(1)[:, None] - 2.0 * x @ centers.T + (centers * centers).sum(1)[None, :]
    return np.maximum(d, 0.0)


def _kmeans_pp(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding (Arthur & Vassilvitskii): each next center drawn with probability
    proportional to the squared distance to the nearest center chosen so far."""
    n = x.shape[0]
    centers = [x[int(rng.integers(n))]]
    closest = _sq_dists(x, np.asarray(centers))[:, 0]
    for _ in range(1, k):
        total = closest.sum()
        if total <= 0:
            break
        pick = int(rng.choice(n, p=closest / total))
        centers.append(x[pick])
        closest = np.minimum(closest, _sq_dists(x, x[pick:pick + 1])[:, 0])
    return np.asarray(centers)


def _lloyd(x: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Lloyd's iterations from `centers` until the labels stop changing (or KMEANS_MAX_ITER).
    Centers are updated as one matrix product (members' sums / counts), no copy of `x`."""
    n, k = x.shape[0], centers.shape[0]
    sq = (x * x).sum(1)
    labels = np.full(n, -1)
    rows = np.arange(n)
    onehot = np.zeros((n, k))
    for _ in range(KMEANS_MAX_ITER):
        d = np.maximum(sq[:, None] - 2.0 * x @ centers.T + (centers * centers).sum(1)[None, :], 0.0)
        new = d.argmin(1)
        if np.array_equal(new, labels):
            break
        labels = new
        for j in np.setdiff1d(np.arange(k), labels):  # an empty cluster takes the point farthest from its center
            far = int(d[rows, labels].argmax())
            labels[far] = j
            d[far] = 0.0
        onehot[:] = 0.0
        onehot[rows, labels] = 1.0
        centers = (onehot.T @ x) / onehot.sum(0)[:, None]
    inertia = float(np.maximum(sq - 2.0 * np.einsum("ij,ij->i", x, centers[labels]) + (centers[labels] ** 2).sum(1), 0.0).sum())
    return labels, centers, inertia


def kmeans(x: np.ndarray, k: int, *, seed: int = 0, restarts: int = KMEANS_RESTARTS,
           init: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """k-means (Lloyd) with k-means++ seeding, `restarts` seedings from one
    `numpy.random.default_rng(seed)`, the lowest inertia kept (the first on a tie).
    `init`: start once from these centers instead (tests compare with scikit-learn).

    Returns:
        (labels, centers, inertia): labels in 0..k-1 per row; inertia the sum of squared
        distances to the assigned centers.
    """
    x = np.asarray(x, dtype=np.float64)
    if init is not None:
        return _lloyd(x, np.array(init, dtype=np.float64))
    rng = np.random.default_rng(seed)
    best: tuple[np.ndarray, np.ndarray, float] | None = None
    for _ in range(max(1, restarts)):
        centers = _kmeans_pp(x, k, rng)
        if centers.shape[0] < k:
            centers = np.vstack([centers, x[rng.choice(x.shape[0], k - centers.shape[0], replace=False)]])
        got = _lloyd(x, centers.copy())
        if best is None or got[2] < best[2]:
            best = got
    assert best is not None
    return best


def leading_coordinates(gram: np.ndarray, dims: int = CLUSTER_DIMS) -> np.ndarray:
    """Coordinates of the rows in the `dims` leading eigen-directions of their Gram matrix
    X X^T (eigenvectors scaled by the square roots of their eigenvalues; a truncated SVD of
    X): the pairwise distances of X exactly when X has rank <= `dims`, else their best
    approximation of that rank. k-means runs there: the same partition problem at a fraction
    of the cost when the vectors have thousands of dimensions."""
    values, vectors = np.linalg.eigh(gram)
    top = np.argsort(values)[::-1][:dims]
    return vectors[:, top] * np.sqrt(np.maximum(values[top], 0.0))[None, :]


def distances(x: np.ndarray, block: int = 512) -> np.ndarray:
    """The (n, n) Euclidean distance matrix of the rows of `x`, made in blocks of rows (the
    diagonal exactly 0)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    sq = (x * x).sum(1)
    out = np.empty((n, n))
    for start in range(0, n, block):
        stop = min(n, start + block)
        out[start:stop] = np.sqrt(np.maximum(sq[start:stop, None] - 2.0 * x[start:stop] @ x.T + sq[None, :], 0.0))
    out[np.arange(n), np.arange(n)] = 0.0
    return out


def silhouette(x: np.ndarray, labels: np.ndarray, *, dist: np.ndarray | None = None) -> float:
    """The mean silhouette (Rousseeuw 1987) over every row, Euclidean distance: for row i,
    a = mean distance to the other rows of its cluster, b = the lowest mean distance to the
    rows of another cluster, s = (b - a) / max(a, b), and s = 0 for a row alone in its
    cluster (scikit-learn's `silhouette_score`). `dist`: the rows' distance matrix when the
    caller has it (`distances`; one for every k tried). NaN with fewer than 2 clusters."""
    labels = np.asarray(labels)
    ids, inverse = np.unique(labels, return_inverse=True)
    k, n = len(ids), len(labels)
    if k < 2 or k >= n:
        return math.nan
    d = distances(x) if dist is None else dist
    onehot = np.zeros((n, k))
    onehot[np.arange(n), inverse] = 1.0
    sizes = onehot.sum(0)
    sums = d @ onehot  # (n, k): each row's distance sum to each cluster
    rows = np.arange(n)
    own_size = sizes[inverse] - 1
    a = np.divide(sums[rows, inverse], own_size, out=np.zeros(n), where=own_size > 0)
    others = sums / sizes[None, :]
    others[rows, inverse] = np.inf
    b = others.min(1)
    denom = np.maximum(a, b)
    s = np.divide(b - a, denom, out=np.zeros(n), where=denom > 0)
    s[own_size == 0] = 0.0
    return float(s.mean())


def _stats(values: Sequence[float]) -> dict[str, Any]:
    """n, mean, median, p10, p90, min, max (numpy's linear percentiles); nulls when empty."""
    v = np.asarray([x for x in values if x is not None and not math.isnan(x)], dtype=np.float64)
    if not v.size:
        return {"n": 0, "mean": None, "median": None, "p10": None, "p90": None, "min": None, "max": None}
    return {"n": int(v.size), "mean": float(v.mean()), "median": float(np.median(v)),
            "p10": float(np.percentile(v, 10)), "p90": float(np.percentile(v, 90)),
            "min": float(v.min()), "max": float(v.max())}


def _num(x: float) -> float | None:
    return None if x is None or math.isnan(x) else float(x)


def terms(text: str) -> set[str]:
    """A question's terms for the clusters' top terms: NFKC, lower-cased words that start
    with a letter (digits after it, inner ' and - kept), stop words and one-letter words left out."""
    words = _TERM.findall(unicodedata.normalize("NFKC", text).lower())
    return {w for w in words if len(w) > 1 and w not in _STOPWORDS}


def top_terms(cluster: Sequence[set[str]], everyone: Sequence[set[str]], n: int = TOP_TERMS) -> list[str]:
    """The `n` terms most particular to a cluster: score = (questions of the cluster holding
    the term) x (ln((1 + N) / (1 + df)) + 1), df over all N clustered questions; ties by
    term. Terms held by one question only are left out when the cluster has several."""
    df: dict[str, int] = {}
    for t in everyone:
        for w in t:
            df[w] = df.get(w, 0) + 1
    tf: dict[str, int] = {}
    for t in cluster:
        for w in t:
            tf[w] = tf.get(w, 0) + 1
    floor = 2 if len(cluster) > 1 else 1
    big_n = len(everyone)
    scored = [(-(c * (math.log((1 + big_n) / (1 + df[w])) + 1)), w) for w, c in tf.items() if c >= floor]
    return [w for _, w in sorted(scored)[:n]]


# --------------------------------------------------------------------------- reading the run


@dataclass
class _Case:
    case_id: str
    question: int  # the question's number in the analysis' table of distinct texts
    stage: str
    supports: list[Mapping[str, Any]]
    retrieved: list[int]  # the top K chunks' texts, in rank order (numbers in the table)
    gold_texts: list[tuple[int | None, str | None]] = field(default_factory=list)  # (text, source) per support


def _primary_k(config: Mapping[str, Any], metrics: Mapping[str, Any] | None) -> int:
    ks = (metrics or {}).get(Met.KS) or ((config.get(Cfg.SETTINGS) or {}).get("k")) or [5]
    return int(ks[0])


@dataclass
class _Read:
    """What one pass over the records keeps: the cases, the table of distinct texts, and
    the distinct retrieved chunks by normalized file (the gold texts' fallback)."""

    cases: list[_Case] = field(default_factory=list)
    texts: dict[str, int] = field(default_factory=dict)
    run_chunks: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)
    restored: int = 0
    still_cut: int = 0

    def text(self, t: str) -> int:
        return self.texts.setdefault(t, len(self.texts))


def _read_cases(run: RunDir, k: int, reader: Any) -> _Read:
    """The first record of each case (its first trial), in file order, streamed: a chunk the
    run stored cut takes its full text from `reader` (`evalkit.judges.context`) when it has it."""
    seen: set[str] = set()
    seen_chunks: set[Any] = set()
    out = _Read()
    for rec in run.iter_results():
        cid = str(rec.get(Rec.CASE_ID))
        if cid in seen:
            continue
        seen.add(cid)
        case = rec.get(Rec.CASE) or {}
        question = rec.get(Rec.QUESTION) or case.get("question") or ""
        chunks = [c for c in order_chunks(rec.get(Rec.RETRIEVED_CHUNKS) or []) if isinstance(c, Mapping)][:k]
        for i, ch in enumerate(chunks):
            if ch.get("text_truncated"):
                text = reader.chunk_text(ch) if reader is not None else None
                if text is None:
                    out.still_cut += 1
                else:
                    chunks[i] = {**ch, "text": text, "text_truncated": False}
                    out.restored += 1
        for ch in chunks:
            key = (ch.get("chunk_id"), ch.get("rel_path"), ch.get("start_line"))
            if key not in seen_chunks:
                seen_chunks.add(key)
                out.run_chunks.setdefault(normalize_rel_path(ch.get("rel_path")), []).append(ch)
        out.cases.append(_Case(
            case_id=cid, question=out.text(str(question)), stage=record_stage(rec, k),
            supports=[s for s in case.get("gold_supports") or [] if isinstance(s, Mapping)],
            retrieved=[out.text(str(ch.get("text") or "")) for ch in chunks],
        ))
    return out


def _note_chunks(notes: Path | None) -> dict[str, list[dict[str, Any]]]:
    """The notes' chunks by normalized file, as the reference chunker cuts them."""
    if notes is None:
        return {}
    from evalkit.reference.corpus import build_corpus

    by_file: dict[str, list[dict[str, Any]]] = {}
    for c in build_corpus(Path(notes), vault_id=Path(notes).name).chunks:
        by_file.setdefault(normalize_rel_path(c.rel_path), []).append({
            "chunk_id": c.chunk_id, "rel_path": c.rel_path, "heading_path": c.heading_path,
            "start_line": c.start_line, "end_line": c.end_line, "text": c.text,
        })
    return by_file


def _gold_text(support: Mapping[str, Any], note_chunks: Mapping[str, list[dict[str, Any]]],
               run_chunks: Mapping[str, list[Mapping[str, Any]]]) -> tuple[str | None, str | None]:
    """(text, source) of one gold support: the matching note chunks ("notes"), else the
    matching chunks retrieved in the run ("retrieved"), else (None, None)."""
    file = normalize_rel_path(support.get("rel_path"))
    for source, pool in (("notes", note_chunks), ("retrieved", run_chunks)):
        candidates = pool.get(file, []) if file else [c for cs in pool.values() for c in cs]
        texts = [str(c.get("text") or "") for c in candidates if match_support(support, c)]
        text = "\n\n".join(t for t in texts if t.strip())
        if text:
            return text[:MAX_GOLD_CHARS], source
    return None, None


# --------------------------------------------------------------------------- the analysis


def analyze_run(
    run: RunDir,
    embedder: Embedder,
    *,
    notes: Path | None = None,
    k: int | None = None,
    far_percentile: float = DEFAULT_FAR_PERCENTILE,
    max_clusters: int = DEFAULT_MAX_CLUSTERS,
    seed: int = 0,
) -> dict[str, Any]:
    """embeddings.json's body for `run` (module docstring; EVAL.md for each field).

    Raises:
        EmbeddingError: the embedder failed (the caller records it: `write_analysis`).
    """
    from evalkit.judges.context import context_source

    config = run.read_config()
    metrics = run.read_metrics()
    k = int(k) if k else _primary_k(config, metrics)
    # The notes, and the full text of chunks the run stored cut: the judges' source of full
    # chunk text (`--notes`, else the vault config.json records for a reference-chatbot run).
    source = context_source(config, notes)
    notes = notes if notes is not None else source.vault if source.reader is not None else None
    read = _read_cases(run, k, source.reader)
    cases, texts = read.cases, read.texts
    note_chunks = _note_chunks(notes)
    for c in cases:
        golds = [_gold_text(s, note_chunks, read.run_chunks) for s in c.supports]
        c.gold_texts = [(read.text(g) if g else None, src) for g, src in golds]
    table = list(texts)  # the distinct texts, by number
    read_restored, read_still_cut = read.restored, read.still_cut
    del note_chunks, read

    fit = getattr(embedder, "fit", None)
    if not embedder.cacheable and fit is not None:
        embedder = fit(table)
    # An embedder whose vectors depend on the texts of a call and that cannot be fitted first
    # embeds every text in one call.
    block = BLOCK_CASES if embedder.cacheable or fit is not None else max(1, len(cases))
    chosen, sample = _cluster_cases(cases, seed)
    slot = {case: n for n, case in enumerate(chosen)} if len(chosen) >= MIN_CLUSTER_CASES else {}
    questions: np.ndarray | None = None  # the chosen questions' unit vectors, in the embedder's dtype

    rows: list[dict[str, Any]] = []
    for first in range(0, len(cases), block):
        part = cases[first:first + block]
        local: dict[int, int] = {}
        for c in part:
            for t in (c.question, *(g for g, _ in c.gold_texts if g is not None), *c.retrieved):
                local.setdefault(t, len(local))
        unit = asyncio.run(embedder.embed([table[t] for t in local]))
        if unit.shape[0] != len(local):
            raise EmbeddingError(f"the embedder gave {unit.shape[0]} vectors for {len(local)} texts")
        # Unit rows, in place (the embedder's array is ours), 512 rows at a time: np.linalg.norm
        # squares its whole input first. A row's norm is the same in any slice of rows.
        for at in range(0, unit.shape[0], 512):
            part_rows = unit[at:at + 512]
            norms = np.linalg.norm(part_rows, axis=1, keepdims=True)
            np.divide(part_rows, norms, out=part_rows, where=norms > 0)

        def sims(pairs: list[tuple[int, int]], unit: np.ndarray = unit) -> list[float | None]:
            return [_num(x) for x in cosine_rows(unit[[local[q] for q, _ in pairs]], unit[[local[t] for _, t in pairs]])]

        for n, c in enumerate(part, first):
            gold = sims([(c.question, g) for g, _ in c.gold_texts if g is not None])
            gold_it = iter(gold)
            per_support = [next(gold_it) if g is not None else None for g, _ in c.gold_texts]
            retrieved = sims([(c.question, t) for t in c.retrieved])
            best_gold = max((x for x in per_support if x is not None), default=None)
            best_ret = max((x for x in retrieved if x is not None), default=None)
            rows.append({
                "id": c.case_id,
                "question": table[c.question],
                "stage": c.stage,
                "failing": c.stage in FAILING_STAGES,
                "n_gold": len(c.supports),
                "gold_sources": [src for _, src in c.gold_texts],
                "q_gold": per_support,
                "q_gold_best": best_gold,
                "q_retrieved": retrieved,
                "q_retrieved_best": best_ret,
                "gap": None if best_gold is None or best_ret is None else best_gold - best_ret,
            })
            if n in slot:
                if questions is None:
                    questions = np.zeros((len(chosen), unit.shape[1]), dtype=unit.dtype)
                questions[slot[n]] = unit[local[c.question]]
        del unit, part_rows, sims  # before the next block's vectors exist (a slice keeps them alive)

    # Handed over in a box the clustering empties: no name here keeps the vectors alive.
    box = [questions] if questions is not None else []
    del questions
    return {
        "schema_version": SCHEMA,
        "run_id": run.run_id,
        "computed_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "embedder": embedder.identity(),
        "k": k,
        "notes": str(notes) if notes is not None else None,
        "n_cases": len(rows),
        "gold_unresolved": sum(1 for c in cases for g, _ in c.gold_texts if g is None),
        "gold_from_retrieved": sum(1 for c in cases for _, src in c.gold_texts if src == "retrieved"),
        "retrieved_text_restored": read_restored,
        "retrieved_text_cut": read_still_cut,
        "distribution": _distribution(rows),
        "far_gold": _far_gold(rows, far_percentile),
        "clusters": _clusters(rows, chosen, sample, box, table, cases, max_clusters, seed),
        "cases": rows,
        "error": None,
    }


def _distribution(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    def of(key: str, where: Iterable[Mapping[str, Any]] = rows) -> dict[str, Any]:
        return _stats([r[key] for r in where if r[key] is not None])

    failing = [r for r in rows if r["failing"]]
    passing = [r for r in rows if r["stage"] == "pass"]
    return {
        "q_gold_best": of("q_gold_best"), "q_retrieved_best": of("q_retrieved_best"), "gap": of("gap"),
        "q_gold_best_failing": of("q_gold_best", failing), "q_gold_best_passing": of("q_gold_best", passing),
        "gold_closer": sum(1 for r in rows if r["gap"] is not None and r["gap"] > 0),
        "retrieved_closer": sum(1 for r in rows if r["gap"] is not None and r["gap"] < 0),
    }


def _far_gold(rows: Sequence[Mapping[str, Any]], percentile: float) -> dict[str, Any]:
    """The cases at or below the `percentile`-th percentile (numpy, linear) of the run's
    question-to-gold similarity, lowest first."""
    scored = [r for r in rows if r["q_gold_best"] is not None]
    if not scored:
        return {"percentile": percentile, "threshold": None, "n": 0, "failing": 0, "cases": []}
    threshold = float(np.percentile([r["q_gold_best"] for r in scored], percentile))
    far = sorted((r for r in scored if r["q_gold_best"] <= threshold), key=lambda r: (r["q_gold_best"], r["id"]))
    return {
        "percentile": percentile, "threshold": threshold, "n": len(far), "failing": sum(1 for r in far if r["failing"]),
        "cases": [{key: r[key] for key in ("id", "question", "stage", "failing", "q_gold_best", "q_retrieved_best", "gap")}
                  for r in far],
    }


def _cluster_cases(cases: Sequence[_Case], seed: int) -> tuple[list[int], int | None]:
    """The cases whose questions are clustered (those of a judged stage; above
    MAX_CLUSTER_QUESTIONS, a seeded sample keeps the distance matrix small), and how many
    there were before sampling (None: not sampled). Known before any text is embedded, so
    only these questions' vectors are kept."""
    chosen = [i for i, c in enumerate(cases) if c.stage not in _UNJUDGED]
    if len(chosen) <= MAX_CLUSTER_QUESTIONS:
        return chosen, None
    pick = np.sort(np.random.default_rng(seed).choice(len(chosen), MAX_CLUSTER_QUESTIONS, replace=False))
    return [chosen[i] for i in pick], len(chosen)


def _clusters(rows: Sequence[Mapping[str, Any]], chosen: Sequence[int], sampled_from: int | None,
              box: list[np.ndarray], table: Sequence[str], cases: Sequence[_Case],
              max_clusters: int, seed: int) -> dict[str, Any]:
    """k-means over the questions of the judged cases (`_cluster_cases`; `box` holds their
    unit vectors in that order, taken out so that each copy is freed as soon as it is used),
    k by the best silhouette."""
    base: dict[str, Any] = {"method": "kmeans", "distance": "euclidean on unit vectors", "seed": seed,
                            "n_questions": len(chosen) if sampled_from is None else sampled_from,
                            "k": None, "silhouette": None, "candidates": [], "clusters": []}
    if len(chosen) < MIN_CLUSTER_CASES or not box:
        base["skipped"] = f"fewer than {MIN_CLUSTER_CASES} questions with a pass/fail outcome"
        return base
    if sampled_from is not None:
        base["sampled_from"], base["n_questions"] = sampled_from, len(chosen)
    x = np.asarray(box.pop(), dtype=np.float64)
    # Distinct rows after rounding, a row at a time (np.unique over the rows sorts copies of
    # the whole matrix); + 0.0 makes -0.0 equal 0.0, as np.unique's comparison has it.
    distinct = len({(np.round(row, 12) + 0.0).tobytes() for row in x})
    gram = x @ x.T
    if x.shape[1] > CLUSTER_DIMS:  # the full vectors are not needed again: the Gram matrix gives the rest
        del x
        y = leading_coordinates(gram)
    else:
        y = x
    sq = np.diag(gram).copy()
    # sq[:, None] - 2 gram + sq[None, :], in one n x n array (the same operations in the same order)
    dist = np.multiply(gram, 2.0)
    np.subtract(sq[:, None], dist, out=dist)
    np.add(dist, sq[None, :], out=dist)
    np.sqrt(np.maximum(dist, 0.0, out=dist), out=dist)
    dist[np.diag_indices_from(dist)] = 0.0
    del gram
    base["kmeans_dims"] = int(y.shape[1])
    best: tuple[float, int, np.ndarray] | None = None
    for k in range(2, min(max_clusters, distinct - 1, len(chosen) - 1) + 1):
        labels, _, _ = kmeans(y, k, seed=seed)
        if len(np.unique(labels)) < k:
            continue
        s = silhouette(y, labels, dist=dist)  # from `dist`, the full vectors' distances
        base["candidates"].append({"k": k, "silhouette": _num(s)})
        if not math.isnan(s) and (best is None or s > best[0]):
            best = (s, k, labels)
    if best is None:
        base["skipped"] = "the questions' vectors are too few or too alike to split"
        return base
    s, k, labels = best
    base["k"], base["silhouette"] = k, float(s)
    everyone = [terms(table[cases[i].question]) for i in chosen]
    clusters = []
    for j in range(k):
        members = [chosen[m] for m in np.flatnonzero(labels == j)]
        failing = [i for i in members if rows[i]["failing"]]
        clusters.append({
            "n": len(members), "failing": len(failing), "failure_rate": len(failing) / len(members),
            "top_terms": top_terms([terms(table[cases[i].question]) for i in members], everyone),
            "failing_ids": [rows[i]["id"] for i in failing],
            "ids": [rows[i]["id"] for i in members],
        })
    clusters.sort(key=lambda c: (-c["failure_rate"], -c["n"], c["ids"][0]))
    for n, c in enumerate(clusters, 1):
        c["cluster"] = n
    base["clusters"] = clusters
    return base


# --------------------------------------------------------------------------- the file


def error_body(run: RunDir, identity: Mapping[str, Any], error: BaseException) -> dict[str, Any]:
    """embeddings.json for an analysis the embedder stopped: what failed, and nothing else."""
    return {"schema_version": SCHEMA, "run_id": run.run_id,
            "computed_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "embedder": dict(identity), "error": {"message": str(error)}}


def write_analysis(run: RunDir, body: Mapping[str, Any]) -> Path:
    """Write embeddings.json atomically into the run folder, then re-render the run's
    report.html when it has one (the page shows the analysis)."""
    from evalkit.derive.summary import write_report

    path = run.write_file(EMBEDDINGS_FILE, orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n")
    write_report(run)
    return path

