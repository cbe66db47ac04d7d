"""Per-case expectation metrics: must_include / must_exclude / ordered_hints (seed 004).

A case's `expected` block (schema.CaseExpectations) lists strings the retrieved text and
the answer must hold (`must_include`), must not hold (`must_exclude`) and must show in a
given order (`ordered_hints`, at least two). `score_expectations` scores them twice:
over the ranked retrieved chunks (`retrieved`) and over the answer (`answer`).

Matching: the phrase rule (EVAL.md, "Phrases"), the one gold snippets use. An item is
found in a text when `normalize_phrase(item) in normalize_phrase(text)`, both in Unicode
NFKC, case-folded, every whitespace removed (`evalkit.evalset.anchors.normalize_phrase`).
Offsets are offsets in the normalised text.

Scored chunks: the first `constraints.top_k` chunks when the case sets it, else all
given, in the given (rank) order. A chunk's missing or None `text` is "". An answer of
None (the target failed) is scored as "": a system failure scores 0 on every
"found" metric, as evalkit's retrieval metrics do.

Symbols: I = must_include, E = must_exclude, H = ordered_hints, C = scored chunks,
rank(x) = 1-based position in C of the first chunk containing x (none when no chunk does).

retrieved (only the sections whose list is non-empty; always `n_chunks` = |C|, `top_k`):
- include_recall    = |{x in I : found in some chunk of C}| / |I|
- include_mrr       = (1/|I|) * sum over x in I of 1/rank(x), a term of 0 when not found
- include_precision = |{c in C : c contains some x in I}| / |C|; 0.0 when C is empty
  (the target returned nothing: a miss, as precision@K scores a failed case)
- exclude_hit_ratio = |{x in E : found in some chunk of C}| / |E|;
  exclude_violated  = any such hit
- ordering: pos(h) = (rank(h), offset of h's first occurrence in that chunk). Over the
  n(n-1)/2 pairs i<j of H: both found -> correct when pos_i < pos_j, reversed when >,
  tied when equal; missing when either is not found.
  ordering_accuracy    = correct / total (missing and tied pairs are not correct: a result
                         that shows only the first hint has shown no order)
  ordering_kendall_tau = (correct - reversed) / (correct + reversed + tied) over the
                         comparable (both-found) pairs; None when none is comparable.
- token budget (constraints.token_budget set and I non-empty). Tokenizer: a chunk's
  tokens are its `token_count` when that is an int >= 0, else ceil(len(text) / 4)
  (Hindsight's approximation). Walk C in order: a chunk that fits in the remaining budget
  is included whole; the first that does not is included in part, its first
  floor(len(text) * remaining / tokens) characters of the raw text, and the walk stops
  (it also stops, with no chunk cut, when the budget is spent exactly).
  fact_retention = |{x in I : contained within one included (part of a) chunk}| / |I|;
  a fact cut off at the boundary is lost. `budget.tokens_used` counts the included part
  of a cut chunk (so it equals token_budget when a chunk is cut); `token_source` says
  which tokenizer the walked chunks used ("token_count", "chars/4", "mixed", None when
  no chunk was walked).

answer: the same sections over the answer as a single text: include_recall (no MRR or
precision), exclude_hit_ratio / exclude_violated, and ordering with pos(h) = offset of
h in the normalised answer.

Not applicable -> None, never a silent perfect score: `score_expectations` returns None
when the case has no `expected` or none of its lists applies (a single ordered hint has
no order and is ignored; the schema rejects it anyway).

Differences from Hindsight's scorer (seed 004), which otherwise these follow:
- Hindsight returns 1.0 for an empty list; we omit the section (None).
- Hindsight tests `content.toLowerCase().includes(s.toLowerCase())`; we use the phrase
  rule (so "Straße" matches "STRASSE", "ﬁle" matches "file", "foo bar" matches "foobar").
- Two hints in the same chunk: Hindsight compares first-candidate indices only, so the
  pair is never correct; we order them by their offset in the chunk. With one fact per
  chunk the two agree. Hindsight has no reversed/tied split nor Kendall tau.
- Hindsight's exactPathPrecision is our include_precision, except 0.0 (not 1.0) on an
  empty result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from evalkit.evalset.anchors import normalize_phrase

__all__ = [
    "EXPECTATION_METRICS",
    "LOWER_IS_BETTER_EXPECTATIONS",
    "RETRIEVED_EXPECTATIONS",
    "expectation_values",
    "score_expectations",
]

EXPECTATION_METRICS: tuple[str, ...] = (
    "must_include_recall",
    "must_include_mrr",
    "must_include_precision",
    "must_exclude_hit_rate",
    "must_exclude_violation_rate",
    "ordering_accuracy",
    "fact_retention",
    "answer_must_include_recall",
    "answer_must_exclude_violation_rate",
    "answer_ordering_accuracy",
)
LOWER_IS_BETTER_EXPECTATIONS: tuple[str, ...] = (
    "must_exclude_hit_rate",
    "must_exclude_violation_rate",
    "answer_must_exclude_violation_rate",
)

# metric name -> (block, key, kind); "flag" values are booleans read as 0.0/1.0.
_VALUE_SOURCES: dict[str, tuple[str, str, str]] = {
    "must_include_recall": ("retrieved", "include_recall", "num"),
    "must_include_mrr": ("retrieved", "include_mrr", "num"),
    "must_include_precision": ("retrieved", "include_precision", "num"),
    "must_exclude_hit_rate": ("retrieved", "exclude_hit_ratio", "num"),
    "must_exclude_violation_rate": ("retrieved", "exclude_violated", "flag"),
    "ordering_accuracy": ("retrieved", "ordering_accuracy", "num"),
    "fact_retention": ("retrieved", "fact_retention", "num"),
    "answer_must_include_recall": ("answer", "include_recall", "num"),
    "answer_must_exclude_violation_rate": ("answer", "exclude_violated", "flag"),
    "answer_ordering_accuracy": ("answer", "ordering_accuracy", "num"),
}
# The ones scored over the retrieved chunks (their `text`, and `token_count` for the budget).
RETRIEVED_EXPECTATIONS: tuple[str, ...] = tuple(m for m, (block, _, _) in _VALUE_SOURCES.items() if block == "retrieved")

_Pos = tuple[int, int]


def _str_list(v: Any) -> list[str]:
    # Tolerates a dict that did not go through the schema: only strings count, and a
    # blank one would match every text, so it is dropped.
    if not isinstance(v, (list, tuple)):
        return []
    return [s for s in v if isinstance(s, str) and s.strip()]


def _pos_int(v: Any, minimum: int) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        return None
    return v


def _chunk_text(chunk: Any) -> str:
    text = chunk.get("text") if isinstance(chunk, Mapping) else None
    return text if isinstance(text, str) else ""


def _first_pos(item: str, texts: Sequence[str]) -> _Pos | None:
    """(0-based chunk index, offset) of the first occurrence of the normalised item."""
    for i, t in enumerate(texts):
        off = t.find(item)
        if off >= 0:
            return (i, off)
    return None


def _ordering(positions: Sequence[_Pos | None]) -> dict[str, Any]:
    correct = reversed_ = tied = missing = 0
    n = len(positions)
    for i in range(n):
        pi = positions[i]
        for j in range(i + 1, n):
            pj = positions[j]
            if pi is None or pj is None:
                missing += 1
            elif pi < pj:
                correct += 1
            elif pi > pj:
                reversed_ += 1
            else:
                tied += 1
    total = n * (n - 1) // 2
    comparable = correct + reversed_ + tied
    return {
        "ordering_accuracy": correct / total,
        "ordering_pairs": {
            "total": total,
            "correct": correct,
            "reversed": reversed_,
            "tied": tied,
            "missing": missing,
        },
        "ordering_kendall_tau": (correct - reversed_) / comparable if comparable else None,
    }


def _exclude(items: Sequence[str], raw: Sequence[str], texts: Sequence[str]) -> dict[str, Any]:
    hits = [r for r, x in zip(raw, items) if any(x in t for t in texts)]
    return {
        "exclude_hits": hits,
        "exclude_hit_ratio": len(hits) / len(items),
        "exclude_violated": bool(hits),
    }


def _budget(
    raw_texts: Sequence[str],
    chunks: Sequence[Any],
    budget: int,
    inc_raw: Sequence[str],
    inc: Sequence[str],
) -> dict[str, Any]:
    included: list[str] = []
    used = whole = 0
    cut = False
    sources: set[str] = set()
    for text, chunk in zip(raw_texts, chunks):
        remaining = budget - used
        if remaining <= 0:
            break
        tc = _pos_int(chunk.get("token_count") if isinstance(chunk, Mapping) else None, 0)
        if tc is not None:
            tokens = tc
            sources.add("token_count")
        else:
            tokens = math.ceil(len(text) / 4)
            sources.add("chars/4")
        if tokens <= remaining:
            included.append(normalize_phrase(text))
            used += tokens
            whole += 1
            continue
        included.append(normalize_phrase(text[: len(text) * remaining // tokens]))
        used += remaining
        cut = True
        break
    retained = [r for r, x in zip(inc_raw, inc) if any(x in t for t in included)]
    lost = [r for r, x in zip(inc_raw, inc) if not any(x in t for t in included)]
    source = None if not sources else sources.pop() if len(sources) == 1 else "mixed"
    return {
        "fact_retention": len(retained) / len(inc),
        "fact_retained": retained,
        "fact_lost": lost,
        "budget": {
            "token_budget": budget,
            "tokens_used": used,
            "chunks_whole": whole,
            "chunk_cut": cut,
            "token_source": source,
        },
    }


def score_expectations(
    case: Mapping[str, Any], chunks: Sequence[Mapping[str, Any]], answer: str | None
) -> dict[str, Any] | None:
    """Score a case's `expected` over its ranked chunks and its answer (module docstring).

    `case` is an `EvalCase.model_dump(mode="json")` dict; `chunks` are in rank order.
    Returns None when the case has no `expected` or none of its lists applies, else
    `{"retrieved": {...}, "answer": {...}}`.
    """
    expected = case.get("expected")
    if not isinstance(expected, Mapping):
        return None
    inc_raw = _str_list(expected.get("must_include"))
    exc_raw = _str_list(expected.get("must_exclude"))
    hints_raw = _str_list(expected.get("ordered_hints"))
    if len(hints_raw) < 2:
        hints_raw = []
    if not (inc_raw or exc_raw or hints_raw):
        return None

    constraints = case.get("constraints")
    if not isinstance(constraints, Mapping):
        constraints = {}
    top_k = _pos_int(constraints.get("top_k"), 1)
    token_budget = _pos_int(constraints.get("token_budget"), 1)

    scored = list(chunks[:top_k] if top_k is not None else chunks)
    raw_texts = [_chunk_text(c) for c in scored]
    # Normalised once: every section below scans these.
    texts = [normalize_phrase(t) for t in raw_texts]
    ans = normalize_phrase(answer) if isinstance(answer, str) else ""
    inc = [normalize_phrase(s) for s in inc_raw]
    exc = [normalize_phrase(s) for s in exc_raw]
    hints = [normalize_phrase(s) for s in hints_raw]

    retrieved: dict[str, Any] = {"n_chunks": len(scored), "top_k": top_k}
    answered: dict[str, Any] = {}

    if inc:
        ranks = [_first_pos(x, texts) for x in inc]
        found = [r for r, p in zip(inc_raw, ranks) if p is not None]
        retrieved["include_found"] = found
        retrieved["include_missing"] = [r for r, p in zip(inc_raw, ranks) if p is None]
        retrieved["include_recall"] = len(found) / len(inc)
        retrieved["include_mrr"] = sum(1 / (p[0] + 1) for p in ranks if p is not None) / len(inc)
        relevant = sum(1 for t in texts if any(x in t for x in inc))
        retrieved["include_precision"] = relevant / len(texts) if texts else 0.0

        a_found = [r for r, x in zip(inc_raw, inc) if x in ans]
        answered["include_found"] = a_found
        answered["include_missing"] = [r for r, x in zip(inc_raw, inc) if x not in ans]
        answered["include_recall"] = len(a_found) / len(inc)

    if exc:
        retrieved.update(_exclude(exc, exc_raw, texts))
        answered.update(_exclude(exc, exc_raw, [ans]))

    if hints:
        retrieved.update(_ordering([_first_pos(h, texts) for h in hints]))
        answered.update(_ordering([(0, o) if (o := ans.find(h)) >= 0 else None for h in hints]))

    if inc and token_budget is not None:
        retrieved.update(_budget(raw_texts, scored, token_budget, inc_raw, inc))

    return {"retrieved": retrieved, "answer": answered}


def _value(v: Any, kind: str) -> float | None:
    if kind == "flag":
        return float(v) if isinstance(v, bool) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    # Every metric here is a fraction: anything outside [0, 1] (or NaN) is an edited file.
    return v if 0.0 <= v <= 1.0 else None


def expectation_values(block: Mapping[str, Any] | None) -> dict[str, float | None]:
    """One value per EXPECTATION_METRICS name from a record's `expectations` block.

    None when not applicable; booleans (exclude_violated) read as 0.0/1.0. Reads files a
    user may have edited, so non-mapping parts and non-numeric, non-finite or
    out-of-[0, 1] values read as None rather than raising.
    """
    parts: dict[str, Mapping[str, Any]] = {}
    for name in ("retrieved", "answer"):
        part = block.get(name) if isinstance(block, Mapping) else None
        parts[name] = part if isinstance(part, Mapping) else {}
    return {
        metric: _value(parts[where].get(key), kind) for metric, (where, key, kind) in _VALUE_SOURCES.items()
    }
