"""Per-case retrieval metrics over a MatchTable (ranx's kernel layer, in plain Python).

Every kernel takes the `MatchTable` of one case and a cut-off K and returns a float, or
None when the metric does not apply to the case (no gold supports, no support groups).
Positions are 1-based ranks after `anchors.order_chunks`; "top K" is the first K
positions. `score_case_retrieval` assembles the record's `retrieval_metrics` dict.
EVAL.md, section "Retrieval", is the spec; the docstrings say the same in short.

Graded-only supports (`graded_only: true`, `MatchTable.graded_only`) count for nDCG
alone: every other kernel reads the *recall view* of the table, in which they are
removed from each position's matches and from the number of supports. A case whose
supports are all graded-only has None for every metric but nDCG.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timezone
from itertools import compress
from typing import Any

from evalkit.errors import InputError, Problem
from evalkit.evalset.anchors import GoldIndex, MatchTable, normalize_rel_path
from evalkit.store.runlog import Cell

__all__ = [
    "AT_K_METRICS",
    "FOLDER_MODES_WITH_SELECTION",
    "GAINS",
    "attribution_hit",
    "average_precision",
    "mrr",
    "ndcg",
    "precision",
    "recall_all",
    "recall_any",
    "r_precision",
    "recall_frac",
    "recency_check",
    "recorded_acknowledgement",
    "with_acknowledgement",
    "scope_miss",
    "score_case_retrieval",
    "validate_ks",
]

FOLDER_MODES_WITH_SELECTION = ("on", "on_with_fallback")
# "map" and "rprec" last: the order compare_runs lists its @K rows in, and the order of
# every `at_k` block (added in issue 43; the first six kept their places).
AT_K_METRICS = ("recall_any", "recall_all", "recall_frac", "precision", "mrr", "ndcg", "map", "rprec")
# nDCG's gain of a support of relevance rel: "exponential" 2^rel - 1 (evalkit's default, seed
# 000's and ranx's ndcg_burges), "linear" rel (trec_eval's ndcg / ndcg_cut, ir_measures' nDCG).
GAINS = ("exponential", "linear")


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(Problem(f"K must be a positive integer, got {k!r}", field="k"))
    return k


def _recall_view(table: MatchTable) -> tuple[list[frozenset[int]], int]:
    """(matches, number of supports) without the graded-only supports: the recall set.

    The table itself when no support is graded-only (no copy)."""
    g = table.graded_only
    if not g:
        return table.matches, table.n_supports
    return [m - g if m else m for m in table.matches], table.n_supports - len(g)


def _hits(table: MatchTable, k: int) -> set[int]:
    """Gold indices of the recall set matched by at least one chunk in the top K."""
    return _hits_in(_recall_view(table)[0], k)


def _hits_in(matches: list[frozenset[int]], k: int) -> set[int]:
    out: set[int] = set()
    for m in matches[: _check_k(k)]:
        out |= m
    return out


def recall_any(table: MatchTable, k: int) -> float | None:
    """Recall_any@K (the seed's Recall@K, a hit): 1 if any top-K chunk matches any gold support.

    Formula: 1[ |{gold hit in top K}| >= 1 ]. None when the case has no gold supports
    (graded-only supports do not count: they are not in the recall set); 0 for an empty
    ranking; K larger than the ranking uses the whole ranking.
    """
    matches, n = _recall_view(table)
    if n == 0:
        return None
    return 1.0 if _hits_in(matches, k) else 0.0


def recall_frac(table: MatchTable, k: int) -> float | None:
    """Recall_frac@K (B.O.B's recall): |gold supports hit in top K| / |gold supports|.

    A support counts once however many chunks match it. Graded-only supports are in
    neither the numerator nor the denominator. None without (recall-set) gold supports.
    """
    matches, n = _recall_view(table)
    if n == 0:
        return None
    return len(_hits_in(matches, k)) / n


def recall_all(table: MatchTable, k: int, groups: Sequence[Sequence[int]] | None) -> float | None:
    """Recall_all@K: 1 if some required support group is fully hit in the top K.

    `groups` are indices into the gold supports: OR of groups, AND within a group.
    Formula: max over groups g of 1[ g ⊆ hit@K ]. None when `groups` is None or holds
    no non-empty group (empty groups are skipped: a vacuous group would be satisfied by
    an empty ranking), or when the case has no gold supports.

    Raises:
        InputError: an index is outside the gold supports, or names a graded-only
            support (never in the recall set, so the group could never be satisfied).
    """
    if groups is None or table.n_supports == 0:
        return None
    real = [list(g) for g in groups if g]
    if not real:
        return None
    graded = table.graded_only
    for gi, g in enumerate(real):
        for idx in g:
            if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < table.n_supports:
                raise InputError(
                    Problem(
                        f"index {idx!r} is out of range: the case has {table.n_supports} gold supports",
                        field=f"required_support_groups[{gi}]",
                    )
                )
            if idx in graded:
                raise InputError(
                    Problem(
                        f"index {idx!r} points to a graded_only support (counts for nDCG only)",
                        field=f"required_support_groups[{gi}]",
                    )
                )
    hit = _hits(table, k)
    return 1.0 if any(all(i in hit for i in g) for g in real) else 0.0


def precision(table: MatchTable, k: int) -> float | None:
    """Precision@K: fraction of the K top positions holding a chunk that matches any gold support.

    Formula: |{p <= K : chunk at p matches some gold support}| / K. The denominator is
    always K, also when fewer than K chunks came back (missing positions are misses; the
    standard P@K, as ranx and trec_eval). A duplicate chunk matches nothing. Several
    chunks matching the same support all count. A chunk matching only graded-only
    supports is a miss. None without (recall-set) gold supports.
    """
    matches, n = _recall_view(table)
    if n == 0:
        return None
    k = _check_k(k)
    return sum(1 for m in matches[:k] if m) / k


def mrr(table: MatchTable, k: int) -> float | None:
    """Reciprocal rank @K: 1/p for the first position p <= K whose chunk matches, else 0.

    Only the recall set counts (graded-only supports never make a match). None without
    (recall-set) gold supports. Averaged over cases it is MRR@K.
    """
    matches, n = _recall_view(table)
    if n == 0:
        return None
    for p, m in enumerate(matches[: _check_k(k)], start=1):
        if m:
            return 1.0 / p
    return 0.0


def _gain(rel: float) -> float:
    return 2.0**rel - 1.0


def _linear_gain(rel: float) -> float:
    return rel


def _gain_of(gain: str):
    if gain == "exponential":
        return _gain
    if gain == "linear":
        return _linear_gain
    raise InputError(Problem(f"unknown nDCG gain {gain!r}; expected one of {', '.join(GAINS)}", field="gain"))


def _credit_positions(table: MatchTable, k: int) -> list[int]:
    """The positions p <= K whose chunk is credited with a support of the recall set, in
    order: each support credited once, by nDCG's rule (among the supports the chunk matches
    that are not yet credited, the highest relevance, then the lowest index). A TREC document
    per credited support: AP and R-precision count these positions."""
    matches = _recall_view(table)[0]
    rel = table.relevance
    credited: set[int] = set()
    out: list[int] = []
    for p, m in enumerate(matches[: _check_k(k)], start=1):
        free = [i for i in m if i not in credited]
        if free:
            credited.add(min(free, key=lambda i: (-rel[i], i)))
            out.append(p)
    return out


def average_precision(table: MatchTable, k: int) -> float | None:
    """AP@K (metric `map`; its mean over cases is MAP@K): Σ_{p<=K credited} c(p)/p / n.

    c(p) = the number of positions <= p credited with a support of the recall set (each
    support credited once, nDCG's rule: `_credit_positions`); n = the number of supports
    in the recall set, retrieved or not (trec_eval's map on the ranking cut at K, its
    map_cut_K; ranx's map@K). None without (recall-set) gold supports.
    """
    matches, n = _recall_view(table)
    if n == 0:
        return None
    total = 0.0
    for c, p in enumerate(_credit_positions(table, k), start=1):
        total += c / p
    return total / n


def r_precision(table: MatchTable, k: int) -> float | None:
    """R-precision@K (metric `rprec`): c(min(R, K)) / R, where R = the number of supports in
    the recall set and c(q) the positions <= q credited with one of them (as AP). trec_eval's
    Rprec on the ranking cut at K (equal to it once K >= R). None without (recall-set) gold
    supports.
    """
    n = _recall_view(table)[1]
    if n == 0:
        return None
    return len(_credit_positions(table, min(_check_k(k), n))) / n


def ndcg(table: MatchTable, k: int, gain: str = "exponential") -> float | None:
    """nDCG@K with gain 2^rel - 1 and discount log2(p + 1), each gold support credited once.

    DCG@K = Σ_{p<=K} (2^{rel(s_p)} - 1) / log2(p + 1), where s_p is the gold support
    credited at position p: among the supports the chunk matches that are not yet
    credited, the one with the highest relevance (ties: lowest index); none -> gain 0.
    IDCG@K = the same sum over the gold relevances sorted descending, cut at K.
    nDCG@K = DCG@K / IDCG@K, in [0, 1] (a one-to-one assignment never beats the sorted
    ideal). None without gold supports, or when IDCG is 0 (every relevance is 0).
    Graded-only supports count here like any other, in DCG and in IDCG.
    `gain="linear"`: gain rel instead of 2^rel - 1 (trec_eval's); the same on binary relevance.
    """
    gain_fn = _gain_of(gain)
    if table.n_supports == 0:
        return None
    k = _check_k(k)
    credited: set[int] = set()
    dcg = 0.0
    for p, m in enumerate(table.matches[:k], start=1):
        free = [i for i in m if i not in credited]
        if not free:
            continue
        best = min(free, key=lambda i: (-table.relevance[i], i))
        credited.add(best)
        dcg += gain_fn(table.relevance[best]) / math.log2(p + 1)
    ideal = sorted(table.relevance, reverse=True)[:k]
    # Added left to right, as DCG is and as the one-pass scorers keep their partial sums: not
    # sum(), which compensates its rounding from Python 3.12 on, so the same case would
    # get another last bit on another Python.
    idcg = 0.0
    for p, r in enumerate(ideal, start=1):
        idcg += gain_fn(r) / math.log2(p + 1)
    if idcg <= 0.0:
        return None
    # Mathematically DCG <= IDCG; the clamp only absorbs rounding with near-equal grades.
    return min(1.0, dcg / idcg)


def _folder_of(rel_path: str) -> str:
    return rel_path.rsplit("/", 1)[0] if "/" in rel_path else ""


def _inside(folder: str, selected: str) -> bool:
    return selected == "" or folder == selected or folder.startswith(selected + "/")


def scope_miss(
    supports: Sequence[Mapping],
    folder_selection: Mapping | None,
    folder_mode: str | None,
    *,
    case_sensitive: bool = True,
) -> bool | None:
    """Whether folder selection excluded every gold support (seed: strict definition).

    Computed only when `folder_mode` is "on" or "on_with_fallback" and the target
    reported a `folder_selection`. A support's folder is the directory of its normalized
    `rel_path`; it is in scope when it lies at the vault root (root notes belong to no
    folder, so a selection cannot exclude them, as in the reference chatbot) or equals or
    lies below a selected folder (normalized like paths; "" or "/" selects the whole
    vault). `selected_folders` is read literally: an empty list selects no folder.
    `fallback_used` is not consulted: `selected_folders` is what was searched.

    Graded-only supports (nDCG only) are ignored, like supports without a rel_path.

    Returns:
        True when no support is in scope; None when folder_mode is off/unknown,
        folder_selection is missing, or no (recall-set) gold support has a rel_path
        (chunk_id-only supports have no folder).
    """
    if folder_mode not in FOLDER_MODES_WITH_SELECTION or folder_selection is None:
        return None
    folders = [
        _folder_of(normalize_rel_path(s.get("rel_path"), case_sensitive=case_sensitive))
        for s in supports
        if s.get("rel_path") and s.get("graded_only") is not True
    ]
    if not folders:
        return None
    selected = [
        normalize_rel_path(f, case_sensitive=case_sensitive)
        for f in (folder_selection.get("selected_folders") or [])
        if f is not None
    ]
    return not any(f == "" or any(_inside(f, sel) for sel in selected) for f in folders)


def attribution_hit(
    supports: Sequence[Mapping], references: Sequence[Mapping], *, case_sensitive: bool = True
) -> bool | None:
    """Whether any cited reference matches any gold support (same anchor rules, no snippets).

    References carry no text, so snippets are never required here. Graded-only supports
    do not count (a reference matching only those is no hit). None without (recall-set)
    gold supports; False when there are no references.
    """
    if not supports:
        return None
    index = GoldIndex(supports, case_sensitive=case_sensitive)
    if len(index.graded_only) == index.n:
        return None
    return _attribution(index, references)


def _attribution(index: GoldIndex, references: Sequence[Mapping]) -> bool:
    g = index.graded_only
    if g:
        return any(index.match(r) - g for r in references)
    return any(index.match(r) for r in references)


def _parse_date(v: Any) -> datetime | None:
    if v is None:
        return None
    if isinstance(v, datetime):
        d = v
    elif isinstance(v, date):
        d = datetime(v.year, v.month, v.day)
    else:
        try:
            d = datetime.fromisoformat(str(v).strip())
        except ValueError:
            return None
    if d.tzinfo is not None:
        d = d.astimezone(timezone.utc).replace(tzinfo=None)
    return d


def recency_check(
    rule: str | None,
    supports: Sequence[Mapping],
    table: MatchTable,
    k: int,
    references: Sequence[Mapping],
    *,
    case_sensitive: bool = True,
    index: GoldIndex | None = None,
    acknowledged: bool | None = None,
) -> dict | None:
    """A recency/conflict rule's pass, from the retrieval and citations (and, for
    acknowledge_both, the conflict judge's verdict on the answer's wording).

    Sets: N = supports with the newest `date`; O = dated supports older than that
    (undated supports are in neither). A reference "cites" a support when it matches it.
    - cite_newer: pass = some reference cites a support in N, and no reference cites
      only supports in O (relying on superseded notes). Needs at least one date.
    - cite_both: pass = every gold support is cited by some reference.
    - acknowledge_both: pass = every gold support is hit in the top-K chunks (the
      answerer saw both sides) AND the conflict judge found the conflict acknowledged
      (`acknowledged`, see `with_acknowledgement`); None until a judge has said.

    `index`: the supports' GoldIndex when the caller has it (same result, built once).
    `acknowledged`: the record's conflict verdict (`recorded_acknowledgement`), None when
    not judged; read by acknowledge_both only.

    Returns:
        {"rule", "pass", "newest_cited", "older_cited", "all_cited", "all_retrieved"}, plus
        "acknowledged" for acknowledge_both; pass None when cite_newer has no dated support
        or acknowledge_both is not judged; None when there is no rule or no gold support.

    Raises:
        InputError: an unparseable `date` on a support, or a graded-only support (the
            rule is about which supports are cited; validation rejects the combination).
    """
    if not rule or not supports:
        return None
    graded = [i for i, s in enumerate(supports) if s.get("graded_only") is True]
    if graded:
        raise InputError(
            Problem(
                f"recency_conflict_rule cannot be combined with graded_only supports (gold_supports{graded})",
                field="recency_conflict_rule",
            )
        )
    dates: list[datetime | None] = []
    for i, s in enumerate(supports):
        raw = s.get("date")
        d = _parse_date(raw)
        if raw is not None and d is None:
            raise InputError(Problem(f"not an ISO date: {raw!r}", field=f"gold_supports[{i}].date"))
        dates.append(d)
    known = [d for d in dates if d is not None]
    newest = {i for i, d in enumerate(dates) if known and d == max(known)}
    older = {i for i, d in enumerate(dates) if d is not None and i not in newest}
    index = index if index is not None else GoldIndex(supports, case_sensitive=case_sensitive)
    cited_sets = [index.match(r) for r in references]
    cited = frozenset().union(*cited_sets) if cited_sets else frozenset()
    newest_cited = bool(cited & newest)
    older_only = any(c and c <= older for c in cited_sets)
    all_cited = len(cited) == len(supports)
    all_retrieved = len(_hits(table, k)) == len(supports)
    if rule == "cite_newer":
        passed: bool | None = None if not known else (newest_cited and not older_only)
    elif rule == "cite_both":
        passed = all_cited
    elif rule == "acknowledge_both":
        passed = None  # set by with_acknowledgement below
    else:
        raise InputError(Problem(f"unknown recency_conflict_rule {rule!r}", field="recency_conflict_rule"))
    out = {
        "rule": rule,
        "pass": passed,
        "newest_cited": newest_cited if known else None,
        "older_cited": bool(cited & older) if known else None,
        "all_cited": all_cited,
        "all_retrieved": all_retrieved,
    }
    return with_acknowledgement(out, acknowledged) if rule == "acknowledge_both" else out


def with_acknowledgement(recency: Mapping, acknowledged: bool | None) -> dict:
    """An acknowledge_both `recency` with the conflict judge's verdict applied.

    pass = all_retrieved AND acknowledged; None while `acknowledged` is None (no judge ran,
    so the rule is not checked). A recency dict of another rule is returned unchanged.
    """
    out = dict(recency)
    if out.get("rule") != "acknowledge_both":
        return out
    out["acknowledged"] = acknowledged
    out["pass"] = None if acknowledged is None else bool(out.get("all_retrieved")) and acknowledged
    return out


def recorded_acknowledgement(record: Mapping) -> bool | None:
    """The conflict judge's verdict a results.jsonl record holds (`conflict.acknowledged`),
    or None when the record has none."""
    verdict = record.get("conflict")
    value = verdict.get("acknowledged") if isinstance(verdict, Mapping) else None
    return value if isinstance(value, bool) else None


def as_dict(obj: Any) -> Mapping:
    # Read-only use: a dict is taken as it is (no copy per chunk and per support).
    if type(obj) is dict:
        return obj
    if obj is None:
        return {}
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    return dict(obj)


_DICT_ONLY = {dict}


def _dicts(items: Sequence[Any]) -> Sequence[Mapping]:
    # Records hold plain dicts: pass the list through instead of copying it item by item.
    if set(map(type, items)) <= _DICT_ONLY:
        return items
    return [as_dict(y) for y in items]


_KS_SEEN: dict[tuple, list[int]] = {}
_INT_ONLY = {int}


def _valid_ks(ks: Sequence[int]) -> list[int]:
    # A re-scoring passes the same ks for every case: validate them once.
    key = tuple(ks)
    out = _KS_SEEN.get(key)
    if out is None or set(map(type, key)) != _INT_ONLY:
        out = validate_ks(ks)
        if len(_KS_SEEN) < 64:
            _KS_SEEN[key] = out
    return out


def validate_ks(ks: Sequence[int]) -> list[int]:
    """The cut-offs in order, duplicates dropped; ks[0] stays the primary K.

    Raises:
        InputError: no K, or a K that is not a positive integer.
    """
    out: list[int] = []
    for k in ks:
        _check_k(k)
        if k not in out:
            out.append(k)
    if not out:
        raise InputError(Problem("at least one K is needed", field="k"))
    return out


def score_case_retrieval(
    case: Mapping,
    chunks: Sequence[Mapping],
    references: Sequence[Mapping],
    folder_selection: Mapping | None,
    folder_mode: str | None,
    ks: Sequence[int],
    *,
    require_snippets: bool = False,
    case_sensitive: bool = True,
    acknowledged: bool | None = None,
    gain: str = "exponential",
) -> dict:
    """The `retrieval_metrics` dict of one results.jsonl record.

    Keys: "k" (primary K = ks[0]); the seed's names at the primary K: "recall_at_k"
    (= recall_any), "mrr", "precision_at_k", "ndcg_at_k", "recall_all", "recall_frac";
    "scope_miss", "attribution_hit", "recency" (dict or None); "at_k": {str(K): {
    recall_any, recall_all, recall_frac, precision, mrr, ndcg, map, rprec}} for every K; and
    diagnostics "n_gold", "n_retrieved", "n_duplicates", "gold_hit" (sorted gold indices
    hit in the primary top K), "first_match_rank", "status".

    Graded-only supports count for nDCG only: a case whose supports are all graded-only
    is "scored" with every value None except nDCG (and n_gold counts them).

    `status` says why values are None: "scored", "unanswerable" (every retrieval metric
    None: they never count in retrieval means) or "unlabeled" (answerable with no gold
    supports: every metric None, counted as unlabeled). A target error is scored by the
    caller passing empty chunks and references: every applicable metric is then 0.

    Args:
        case: the eval case (dict or EvalCase): answerable, gold_supports,
            required_support_groups, recency_conflict_rule.
        chunks: the retrieved chunks as returned (ordered by `rank`, else list order).
        references: the answer's cited references.
        folder_selection: the target's folder_selection, or None.
        folder_mode: "off" | "on" | "on_with_fallback" (the run's setting).
        ks: cut-offs; the first is the primary K. Duplicates are dropped.
        require_snippets: enforce gold snippets on retrieved chunks.
        case_sensitive: compare paths and headings case-sensitively (default).
        acknowledged: the record's conflict verdict (`recorded_acknowledgement`), for an
            acknowledge_both rule; None before (or without) the conflict judge.
        gain: nDCG's gain, "exponential" (2^rel - 1, the default) or "linear" (rel, trec_eval's).

    Raises:
        InputError: a K < 1, an out-of-range support group index, a bad date or gain.
    """
    linear = _gain_of(gain) is _linear_gain
    case = as_dict(case)
    ks = _valid_ks(ks)
    primary = ks[0]
    supports = _dicts(case.get("gold_supports") or [])
    chunk_dicts = _dicts(chunks or [])
    ref_dicts = _dicts(references or [])
    answerable = case.get("answerable", True) is not False
    groups = case.get("required_support_groups")

    status = "scored"
    if not answerable:
        status = "unanswerable"
    elif not supports:
        status = "unlabeled"

    index = GoldIndex(supports, case_sensitive=case_sensitive)
    table = index.ranking(chunk_dicts, require_snippets=require_snippets)
    scored = status == "scored"
    if scored:
        at_k, gold_hit, first = _score_ks(table, ks, groups, linear=linear)
    else:
        at_k = {str(k): dict.fromkeys(AT_K_METRICS) for k in ks}
        gold_hit, first = [], None
    p = at_k[str(primary)]
    selection = as_dict(folder_selection) if folder_selection is not None else None
    cs = case_sensitive
    return {
        "k": primary,
        "recall_at_k": p["recall_any"],
        "mrr": p["mrr"],
        "precision_at_k": p["precision"],
        "ndcg_at_k": p["ndcg"],
        "recall_all": p["recall_all"],
        "recall_frac": p["recall_frac"],
        "scope_miss": (
            scope_miss(supports, selection, folder_mode, case_sensitive=cs)
            if scored and folder_mode in FOLDER_MODES_WITH_SELECTION
            else None
        ),
        "attribution_hit": _attribution(index, ref_dicts) if scored and len(index.graded_only) < index.n else None,
        "recency": (
            recency_check(rule, supports, table, primary, ref_dicts, case_sensitive=cs, index=index, acknowledged=acknowledged)
            if scored and (rule := case.get("recency_conflict_rule"))
            else None
        ),
        Cell.AT_K: at_k,
        "status": status,
        "n_gold": len(supports),
        "n_retrieved": len(chunk_dicts),
        "n_duplicates": len(table.duplicates),
        "gold_hit": gold_hit,
        "first_match_rank": first,
    }


def _score_ks(
    table: MatchTable, ks: Sequence[int], groups: Sequence[Sequence[int]] | None, *, linear: bool = False
) -> tuple[dict[str, dict[str, float | None]], list[int], int | None]:
    """Every kernel at every K in one pass over the matched positions (a case with gold supports).

    Returns the `at_k` blocks, the sorted gold indices hit in the primary top K (ks[0]) and
    the first matching position within it. Each value is computed with the same operations,
    in the same order, as the kernel of that name (recall_any ... ndcg), so the floats are
    identical: DCG and IDCG are the kernels' left-to-right sums, read off at each K.
    Graded-only supports (nDCG only) cost nothing when there are none: the recall view is
    then the table itself, and AP's credits are nDCG's. `linear`: nDCG's gain is rel.

    Raises:
        InputError: an out-of-range support group index, or one naming a graded-only
            support (as `recall_all`).
    """
    n = table.n_supports
    graded = table.graded_only
    n_rec = n - len(graded)
    real = None if groups is None else [list(g) for g in groups if g]
    if real is not None:
        # The index check of recall_all, on a table whose gold hits are all empty.
        recall_all(MatchTable(matches=[], relevance=table.relevance, n_supports=n, graded_only=graded), 1, real)
        real = real or None
    rel = table.relevance
    matches = table.matches
    kmax = max(ks)
    idcg_at, n_ideal = idcg_table(rel, kmax, linear=linear)
    log2_p1 = log2_table(kmax)
    top = matches[:kmax]
    matched = list(compress(range(1, len(top) + 1), top))
    hits: set[int] = set()
    credited: set[int] = set()
    rec_credited: set[int] = set()  # AP's credits when graded-only supports make them differ from nDCG's
    credit_pos: list[int] = []  # positions credited with a recall-set support (AP, R-precision)
    ap_sum = 0.0
    if graded:
        first = next((p for p in matched if matches[p - 1] - graded), None)
    else:
        first = matched[0] if matched else None
    dcg = 0.0
    done = 0  # matched positions already folded into hits / dcg
    n_hit_pos = 0  # of those, positions matching a recall-set support (= done without graded-only)
    blocks: dict[int, dict[str, float | None]] = {}
    gold_hit: list[int] = []
    for k in sorted(set(ks)):
        while done < len(matched) and matched[done] <= k:
            p = matched[done]
            m = matches[p - 1]
            if graded:
                rm = m - graded
                if rm:
                    hits |= rm
                    n_hit_pos += 1
                    rfree = [i for i in rm if i not in rec_credited]
                    if rfree:
                        rec_credited.add(min(rfree, key=lambda i: (-rel[i], i)))
                        credit_pos.append(p)
                        ap_sum += len(credit_pos) / p  # c(p) / p, as average_precision
            else:
                hits |= m
            free = [i for i in m if i not in credited]
            if free:
                best = free[0] if len(free) == 1 else min(free, key=lambda i: (-rel[i], i))
                credited.add(best)
                # _gain (or rel) / log2(p + 1), as ndcg
                dcg += (rel[best] if linear else 2.0 ** rel[best] - 1.0) / log2_p1[p]
                if not graded:
                    credit_pos.append(p)
                    ap_sum += len(credit_pos) / p  # c(p) / p, as average_precision
            done += 1
        ideal_k = idcg_at[min(k, n_ideal)]
        ndcg_k = min(1.0, dcg / ideal_k) if ideal_k > 0.0 else None
        if n_rec == 0:
            blocks[k] = dict.fromkeys(AT_K_METRICS)
            blocks[k]["ndcg"] = ndcg_k
        else:
            blocks[k] = {
                "recall_any": 1.0 if hits else 0.0,
                "recall_all": None if real is None else (1.0 if any(all(i in hits for i in g) for g in real) else 0.0),
                "recall_frac": len(hits) / n_rec,
                "precision": (n_hit_pos if graded else done) / k,
                "mrr": 1.0 / first if first is not None and first <= k else 0.0,
                "ndcg": ndcg_k,
                "map": ap_sum / n_rec,
                # c(min(R, K)) / R: the credited positions within the top min(R, K), as r_precision
                "rprec": (len(credit_pos) if k <= n_rec else bisect_right(credit_pos, n_rec)) / n_rec,
            }
        if k == ks[0]:
            gold_hit = sorted(hits)
    primary = ks[0]
    return {str(k): blocks[k] for k in ks}, gold_hit, first if first is not None and first <= primary else None


# log2(p + 1) by position p, and IDCG@1..K by relevance grades: the same few values for
# every case of a run, computed with the kernels' own expressions (so the same floats).
_LOG2_P1: list[float] = [0.0]
_IDCG: dict[tuple[tuple[float, ...], int, bool], tuple[list[float], int]] = {}
_IDCG_MAX = 1 << 12


def log2_table(kmax: int) -> list[float]:
    global _LOG2_P1
    table = _LOG2_P1
    if len(table) <= kmax:
        # Built whole, then swapped in: a thread never reads a half-grown table.
        table = _LOG2_P1 = [math.log2(p + 1) for p in range(max(kmax + 1, 2 * len(table)))]
    return table


def idcg_table(rel: list[float], kmax: int, *, linear: bool = False) -> tuple[list[float], int]:
    """([0, IDCG@1, IDCG@2, ...] up to the cut-off, number of ideal positions): ndcg's sum
    over the grades sorted descending, cut at kmax, with every partial sum kept (gain rel
    when `linear`)."""
    key = (tuple(rel), kmax, linear)
    got = _IDCG.get(key)
    if got is None:
        gain_fn = _linear_gain if linear else _gain
        ideal = sorted(rel, reverse=True)[:kmax]
        idcg_at = [0]
        idcg = 0
        for p, r in enumerate(ideal, start=1):
            idcg = idcg + gain_fn(r) / math.log2(p + 1)
            idcg_at.append(idcg)
        if len(_IDCG) >= _IDCG_MAX:
            _IDCG.clear()
        got = _IDCG[key] = (idcg_at, len(ideal))
    return got
