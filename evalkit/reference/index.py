"""BM25 over chunks (numpy), optional embedding vectors, and score fusion.

BM25 with k1=1.2, b=0.75 and the always-positive idf of Lucene:

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    bm25(q, d)  = sum over distinct query terms t of
                  idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))

A chunk's indexed text is its file name (stem), its heading path and its text, because
people ask for notes by title. Terms come from tokens.terms (lowercase, stopwords out,
plural fold).

Why numpy rather than rank_bm25 or a search engine: no extra dependency, exact control
over every formula we document, and a vault of a few thousand chunks scores in well under
a millisecond with one array add per query term.

Fusion: lexical and vector scores are min-max normalised over the searched chunks
(max == min: 1.0 if positive else 0.0), then
`score_final = w_vector * norm_vector + w_lexical * norm_lexical` with the request's
rerank_weights. Without an embedding endpoint, score_vector is 0, the vector weight is
ignored and score_final = norm_lexical; only chunks with a positive lexical score are
candidates. Ranking: score_final desc, then chunk_id asc (TIE_BREAK, recorded in
config.json), where score_final is rounded to 6 decimals first, as it is returned: chunks
whose returned scores are equal are ordered by id, never by float noise or index order.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import PurePosixPath

import numpy as np

from evalkit.reference.chunker import Chunk

_ROUND = 6  # scores are rounded so ties (and ranks) do not depend on float noise
# The ranking order `fuse` gives, as config.json's `reproducibility.tie_break` states it.
TIE_BREAK = "score_final desc, chunk_id asc"


def indexed_text(chunk: Chunk) -> str:
    """What BM25 sees for a chunk: file stem, heading path, chunk text."""
    return f"{PurePosixPath(chunk.rel_path).stem}\n{chunk.heading_path}\n{chunk.text}"


class LexicalIndex:
    """Inverted index with per-posting BM25 weights precomputed; immutable after build."""

    def __init__(self, docs: list[list[str]], *, k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.n_docs = len(docs)
        lengths = np.array([len(d) for d in docs], dtype=np.float64)
        avgdl = float(lengths.mean()) if self.n_docs and lengths.sum() else 1.0
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for i, d in enumerate(docs):
            for t, tf in Counter(d).items():
                ids, tfs = postings.setdefault(t, ([], []))
                ids.append(i)
                tfs.append(tf)
        self._postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._idf: dict[str, float] = {}
        for t, (ids, tfs) in postings.items():
            idx = np.asarray(ids, dtype=np.int64)
            tf = np.asarray(tfs, dtype=np.float64)
            norm = k1 * (1 - b + b * lengths[idx] / avgdl)
            self._postings[t] = (idx, tf * (k1 + 1) / (tf + norm))
            self._idf[t] = self.idf(t, len(ids))
        self.term_sets = [frozenset(d) for d in docs]

    def idf(self, term: str, df: int | None = None) -> float:
        """Lucene idf; a term the index has never seen gets df = 0 (the largest idf)."""
        if df is None:
            if term in self._idf:
                return self._idf[term]
            df = 0
        return math.log(1 + (self.n_docs - df + 0.5) / (df + 0.5))

    def knows(self, term: str) -> bool:
        """Whether some chunk of the index holds `term`."""
        return term in self._idf

    def scores(self, query_terms: list[str]) -> np.ndarray:
        """BM25 of every chunk for the distinct query terms (zeros when nothing matches)."""
        out = np.zeros(self.n_docs, dtype=np.float64)
        for t in dict.fromkeys(query_terms):
            hit = self._postings.get(t)
            if hit is not None:
                out[hit[0]] += self._idf[t] * hit[1]
        return out


def _minmax(x: np.ndarray) -> np.ndarray:
    if x.size == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    if hi > lo:
        return (x - lo) / (hi - lo)
    return np.full_like(x, 1.0 if hi > 0 else 0.0)


@dataclass(frozen=True)
class Hit:
    index: int  # position in the index's chunk list
    score_vector: float
    score_lexical: float
    score_final: float


def fuse(
    lexical: np.ndarray,
    vector: np.ndarray | None,
    mask: np.ndarray,
    chunk_ids: list[str],
    k: int,
    w_vector: float,
    w_lexical: float,
) -> list[Hit]:
    """Top k hits among `mask` by fused score (see module docstring).

    Args:
        lexical: BM25 score of every chunk.
        vector: cosine similarity of every chunk, or None without embeddings.
        mask: boolean array, the chunks that may be returned (folder and vault filters).
        chunk_ids: for the tie-break.
        k: how many hits at most.
        w_vector, w_lexical: the request's rerank weights.
    """
    cand = np.flatnonzero(mask)
    if vector is None:
        cand = cand[lexical[cand] > 0]
    if cand.size == 0:
        return []
    nl = _minmax(lexical[cand])
    if vector is None:
        final = nl
        vec = np.zeros_like(nl)
    else:
        vec = vector[cand]
        final = w_vector * _minmax(vec) + w_lexical * nl
    rows = [
        (round(float(f), _ROUND), chunk_ids[i], int(i), round(float(v), _ROUND), round(float(lexical[i]), _ROUND))
        for f, i, v in zip(final, cand, vec, strict=True)
    ]
    rows.sort(key=lambda r: (-r[0], r[1]))
    return [Hit(i, v, lx, f) for f, _, i, v, lx in rows[:k]]


def normalize_rows(vectors: list[list[float]]) -> np.ndarray:
    """Unit-length rows (zero rows stay zero) so a dot product is a cosine."""
    m = np.asarray(vectors, dtype=np.float64)
    if m.ndim != 2:
        m = m.reshape(len(vectors), -1)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return m / norms
