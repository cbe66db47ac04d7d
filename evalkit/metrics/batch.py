"""Retrieval metrics of a block of stored records at once: `score_case_retrieval`'s numbers, with numpy.

Re-scoring a large run (`score_retrieval`) spent most of its time in per-case Python: a
gold index, the column checks and the heading comparisons of 20 chunks, the K loop and a
dict per case, for about 60 µs a case. Here the cases of a block (about a thousand
records) are matched and scored column-wise: paths and ids become integer codes over
the block, a (case, position, support) table of matches is built with numpy, and every
K is read off one left-to-right pass over the positions. The anchor rule is not written
again here: the arrays do only its two equality tests (an equal chunk id matches; another
file does not), and every pair that shares a file goes to `evalkit.evalset.anchors.form_matches`,
the rule `match_support` and `GoldIndex` use.

It takes the records a stored run is made of and nothing else (`RetrievalBatch.add`
says False to any other, and the caller scores that one with `score_case_retrieval`):

- chunks are plain dicts with integer, non-decreasing ranks and distinct, non-empty
  string ids (what run_eval writes: no duplicates, no reordering);
- every gold support is a plain dict without `graded_only` and with a finite numeric
  relevance (or none); any form (id, line span, anchor, snippets) is taken, since the pairs
  on one file are decided by the anchor rule itself;
- no `recency_conflict_rule`, valid `required_support_groups`, at most 62 supports;
- references are plain dicts.

The values are the same floats as `score_case_retrieval`'s, not close ones: the gains,
log2(p + 1) and the ideal DCG are the Python floats the kernels use, and each sum is
taken in the kernels' order (numpy's elementwise add, divide and min are IEEE, like
Python's); a None becomes the NaN constant RecordTable uses. tests/unit/test_rescore_batch.py
holds the batch against the per-record definition on varied records, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from evalkit.evalset.anchors import SupportForm, form_matches, path_of, paths_of, support_form
from evalkit.metrics.retrieval import (
    AT_K_METRICS,
    FOLDER_MODES_WITH_SELECTION,
    as_dict,
    idcg_table,
    log2_table,
    scope_miss,
    validate_ks,
)

__all__ = ["RECALL_ANY_COLUMN", "MRR_COLUMN", "RetrievalBatch"]

_CHUNK_COLUMNS = itemgetter("rank", "chunk_id", "rel_path")
_DICT_ONLY, _INT_ONLY, _STR_ONLY = {dict}, {int}, {str}
_STR_OR_NONE = {str, type(None)}
_NUMBERS = (int, float)
_MAX_SUPPORTS = 62  # support sets are int64 bit masks for the support groups
_NAN = float("nan")  # RecordTable's None: the same constant, so the same bytes
_RECALL_ANY, _RECALL_ALL, _RECALL_FRAC, _PRECISION, _MRR, _NDCG = (AT_K_METRICS.index(m) for m in (
    "recall_any", "recall_all", "recall_frac", "precision", "mrr", "ndcg"
))
# The primary K's recall_any and mrr in `score()`'s cells (summary.md's worst cases read them).
RECALL_ANY_COLUMN, MRR_COLUMN = _RECALL_ANY, _MRR

class RetrievalBatch:
    """A block of stored records, scored together (see the module docstring).

    `add` each record's case, chunks, references and folder selection (False: not one
    this batch takes; score it with `score_case_retrieval`), then `score()` gives the
    retrieval cells of every added record, in order, and `clear()` starts the next block.

    Everything is kept in flat lists over the block (one entry per case, per chunk, per
    reference, per support), so the per-case work at `add` is a few C-level passes.

    Args:
        ks: the cut-offs (ks[0] is the primary K).
        require_snippets: whether snippets are enforced (a case whose supports carry
            snippets is then not taken).
        case_sensitive: compare paths and headings case-sensitively.
        folder_mode: the run's folder mode (scope_miss is computed when it can apply).
    """

    def __init__(self, ks: Sequence[int], *, require_snippets: bool, case_sensitive: bool, folder_mode: str | None) -> None:
        self.ks = validate_ks(ks)
        self.kmax = max(self.ks)
        self.snippets = require_snippets
        self.cs = case_sensitive
        self.folder_mode = folder_mode
        self.scope = folder_mode in FOLDER_MODES_WITH_SELECTION
        self._by_grades: dict[tuple[float, ...], tuple[list[float], list[float]]] = {}
        self.clear()

    def __len__(self) -> int:
        return len(self.scored)

    def cells(self) -> int:
        """The size of the block's (case, position, support) tables: with a large K and many
        supports a block is worth flushing early (each table is one byte a cell)."""
        return len(self.n_sup) * self._widest * self._most_supports

    def clear(self) -> None:
        """Forget the block (after `score`)."""
        # Per case.
        self._widest = self._most_supports = 0
        self.scored: list[bool] = []
        self.n_chunks: list[int] = []
        self.n_refs: list[int] = []
        self.n_sup: list[int] = []
        self.ideal: list[float] = []  # len(ks) per scored case
        self.scope_miss: list[float] = []  # per scored case
        self.group_case: list[int] = []  # per required support group (of a scored case)
        self.group_mask: list[int] = []
        # Per chunk in the top K / per reference / per support, of the scored cases.
        self.ch_ids: list[str] = []
        self.ch_paths: list[Any] = []
        self.ch_dicts: list[dict] = []  # for form_matches
        self.rf_ids: list[str | None] = []
        self.rf_paths: list[Any] = []
        self.rf_dicts: list[dict] = []
        self.s_rel: list[float] = []
        self.s_gain: list[float] = []
        self.s_path: list[str] = []
        self.s_id: list[str | None] = []
        self.s_forms: list[SupportForm | None] = []  # None: no path, matches by id only

    # ------------------------------------------------------------------ intake

    def add(self, case: Mapping, chunks: Any, references: Any, folder_selection: Any) -> bool:
        """Take one record's retrieval inputs; False (nothing taken) when its shape is not
        one this batch handles exactly."""
        if type(case) is not dict:
            return False
        supports = case.get("gold_supports")
        if supports is None:
            supports = []
        elif type(supports) is not list or len(supports) > _MAX_SUPPORTS:
            return False
        if chunks is None:
            chunks = []
        elif type(chunks) is not list:
            return False
        if references is None:
            references = []
        elif type(references) is not list or (references and set(map(type, references)) != _DICT_ONLY):
            return False
        parsed = self._supports(supports)
        if parsed is None:
            return False
        if chunks:
            if set(map(type, chunks)) != _DICT_ONLY:
                return False
            try:
                ranks, ids, paths = zip(*map(_CHUNK_COLUMNS, chunks))
            except KeyError:
                return False  # a chunk without one of the keys (stored chunks have them all)
            if set(map(type, ranks)) != _INT_ONLY or ranks != tuple(sorted(ranks)):
                return False  # not in rank order: order_chunks sorts them
            if set(map(type, ids)) != _STR_ONLY or "" in ids or len(set(ids)) != len(ids):
                return False  # duplicates (or no ids): the per-record loop records them
        else:
            ids = paths = ()
        scored = bool(supports) and case.get("answerable", True) is not False
        if scored:
            if case.get("recency_conflict_rule"):
                return False
            groups = case.get("required_support_groups")
            masks = self._groups(groups, len(supports)) if groups is not None else []
            if masks is None:
                return False
            i = len(self.ideal) // len(self.ks)  # this case's index among the block's scored cases
            self.group_case += [i] * len(masks)
            self.group_mask += masks
            rel = parsed[0]
            ideal, gains = self._grades(rel)
            self.ideal += ideal
            miss = (
                scope_miss(supports, as_dict(folder_selection) if folder_selection is not None else None,
                           self.folder_mode, case_sensitive=self.cs)
                if self.scope
                else None
            )
            self.scope_miss.append(_NAN if miss is None else float(miss))
            self.s_rel += rel
            self.s_gain += gains
            self.s_path += parsed[1]
            self.s_id += parsed[2]
            self.s_forms += parsed[3]
            self.n_sup.append(len(rel))
            kmax = self.kmax
            self.ch_ids += ids[:kmax]
            self.ch_paths += paths[:kmax]
            self.ch_dicts += chunks[:kmax]
            self.n_chunks.append(min(len(ids), kmax))
            self._widest = max(self._widest, min(len(ids), kmax), len(references))
            self._most_supports = max(self._most_supports, len(rel))
            for r in references:
                cid = r.get("chunk_id")
                self.rf_ids.append(None if cid is None else cid if type(cid) is str else str(cid))
            self.rf_paths += map(dict.get, references, repeat("rel_path"))
            self.rf_dicts += references
            self.n_refs.append(len(references))
        self.scored.append(scored)
        return True

    def _grades(self, rel: list[float]) -> tuple[list[float], list[float]]:
        """(IDCG at each K, each support's gain) for these grades: the kernels' floats."""
        key = tuple(rel)
        got = self._by_grades.get(key)
        if got is None:
            idcg_at, n_ideal = idcg_table(rel, self.kmax)
            got = ([idcg_at[min(k, n_ideal)] for k in self.ks], [2.0**r - 1.0 for r in rel])  # _gain, as ndcg
            if len(self._by_grades) < 4096:
                self._by_grades[key] = got
        return got

    def _supports(self, supports: list) -> tuple[list, list, list, list] | None:
        """GoldIndex's reading of the supports: (relevance, normalized path, id, SupportForm
        or None without a path), or None for a form this batch leaves out."""
        cs = self.cs
        rel: list[float] = []
        paths: list[str] = []
        ids: list[str | None] = []
        forms: list[SupportForm | None] = []
        for s in supports:
            if type(s) is not dict or s.get("graded_only") is True:
                return None
            r = s.get("relevance")
            if r is None or type(r) is bool:
                rel.append(1.0)
            elif type(r) in _NUMBERS and math.isfinite(r):
                rel.append(float(r))
            else:
                return None
            gid = s.get("chunk_id")
            if gid is None or gid == "":
                ids.append(None)
            elif type(gid) is str:
                ids.append(gid)
            else:
                return None
            raw = s.get("rel_path")
            snips = s.get("snippets")
            if (raw is not None and type(raw) is not str) or (snips is not None and type(snips) is not list):
                return None
            path = path_of(raw, cs)
            paths.append(path)
            if not path:
                forms.append(None)  # matches by id only
                continue
            heading = s.get("heading_path")
            if heading is not None and type(heading) is not str:
                return None
            forms.append(support_form(s, cs))
        return rel, paths, ids, forms

    @staticmethod
    def _groups(groups: Any, n: int) -> list[int] | None:
        """The non-empty groups as bit masks of support indices; None unless a list of lists
        of valid indices (recall_all raises on the others: the per-record path says where)."""
        if type(groups) is not list:
            return None
        masks: list[int] = []
        for g in groups:
            if not g:
                continue  # recall_all skips empty groups
            if type(g) is not list:
                return None
            mask = 0
            for idx in g:
                if type(idx) is not int or not 0 <= idx < n:
                    return None
                mask |= 1 << idx
            masks.append(mask)
        return masks

    # ------------------------------------------------------------------ scoring

    def score(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(cells, scope_miss, attribution_hit) of the added records, in order.

        cells: (n, len(ks) * 6) float64, for each K the AT_K_METRICS values (NaN for
        None); scope_miss and attribution_hit: (n,) float64, 1.0 / 0.0 / NaN.
        """
        n, nks = len(self.scored), len(self.ks)
        cells = np.full((n, nks * len(AT_K_METRICS)), _NAN)
        scope = np.full(n, _NAN)
        attribution = np.full(n, _NAN)
        rows = np.flatnonzero(np.asarray(self.scored, dtype=bool))
        m = len(rows)
        if not m:
            return cells, scope, attribution
        scope[rows] = self.scope_miss

        n_sup = np.asarray(self.n_sup, dtype=np.int64)
        s_width = int(n_sup.max())
        s_case, s_pos = _layout(n_sup)
        path_code: dict[str, int] = {}
        gp = [path_code.setdefault(p, len(path_code)) if p else -1 for p in self.s_path]
        id_code: dict[str, int] = {}
        gi = [-1 if x is None else id_code.setdefault(x, len(id_code)) for x in self.s_id]
        GP = np.full((m, s_width), -1, dtype=np.int64)
        GI = np.full((m, s_width), -1, dtype=np.int64)
        REL = np.full((m, s_width), -np.inf)  # -inf: no support there, never the best free one
        GAIN = np.zeros((m, s_width))
        GP[s_case, s_pos] = gp
        GI[s_case, s_pos] = gi
        REL[s_case, s_pos] = self.s_rel
        GAIN[s_case, s_pos] = self.s_gain
        s_start = np.cumsum(n_sup) - n_sup
        gold = (GP, GI, s_start, path_code, id_code)

        matches = self._match(self.ch_ids, self.ch_paths, self.ch_dicts, self.n_chunks, gold, self.snippets)
        # references carry no text: snippets are never required of them (as score_case_retrieval)
        refs = self._match(self.rf_ids, self.rf_paths, self.rf_dicts, self.n_refs, gold, False)
        attribution[rows] = np.where(refs.any(axis=(1, 2)), 1.0, 0.0)
        cells[rows] = self._score_positions(matches, n_sup, REL, GAIN)
        return cells, scope, attribution

    def _match(self, ids: list, paths: list, items: list[dict], counts: list[int], gold: tuple,
               require_snippets: bool) -> np.ndarray:
        """(case, position, support) -> whether they match, as `match_support` decides: the
        id and file tests as array compares, the rest by `form_matches` per pair on one file."""
        GP, GI, s_start, path_code, id_code = gold
        m, s_width = GP.shape
        counts_a = np.asarray(counts, dtype=np.int64)
        width = int(counts_a.max()) if len(counts_a) else 0
        if not width:
            return np.zeros((m, 0, s_width), dtype=bool)
        total = len(ids)
        case_of, pos_of = _layout(counts_a)
        # Normalized paths (GoldIndex's own cache), then the block's gold-path codes: a path
        # no support names is -1 and matches nothing.
        norm = paths_of(paths, self.cs)
        PC = np.full((m, width), -1, dtype=np.int64)
        IC = np.full((m, width), -1, dtype=np.int64)
        PC[case_of, pos_of] = np.fromiter(map(path_code.get, norm, repeat(-1)), np.int64, total)
        IC[case_of, pos_of] = np.fromiter(map(id_code.get, ids, repeat(-1)), np.int64, total)

        matched = (IC[:, :, None] == GI[:, None, :]) & (GI >= 0)[:, None, :]
        check = (PC[:, :, None] == GP[:, None, :]) & (GP >= 0)[:, None, :] & ~matched
        if check.any():
            ci, pi, si = np.nonzero(check)
            c_start = np.cumsum(counts_a) - counts_a
            forms, cs = self.s_forms, self.cs
            ok = [
                form_matches(forms[g], items[c], require_snippets, cs)  # type: ignore[arg-type]
                for c, g in zip((c_start[ci] + pi).tolist(), (s_start[ci] + si).tolist())
            ]
            hit = np.asarray(ok, dtype=bool)
            matched[ci[hit], pi[hit], si[hit]] = True
        return matched

    def _score_positions(self, matches: np.ndarray, n_sup: np.ndarray, REL: np.ndarray, GAIN: np.ndarray) -> np.ndarray:
        """Every kernel at every K, as `_score_ks` computes them: one pass over positions 1..K."""
        m, width, s_width = matches.shape
        ks = self.ks
        log2_p1 = log2_table(self.kmax)
        hits = np.zeros((m, s_width), dtype=bool)
        credited = np.zeros((m, s_width), dtype=bool)
        done = np.zeros(m, dtype=np.int64)
        first = np.zeros(m, dtype=np.int64)  # 0: no match yet
        dcg = np.zeros(m)
        rows = np.arange(m)
        ideal = np.asarray(self.ideal, dtype=np.float64).reshape(m, len(ks))
        g_case = np.asarray(self.group_case, dtype=np.intp)
        g_mask = np.asarray(self.group_mask, dtype=np.int64)
        has_groups = np.zeros(m, dtype=bool)
        has_groups[g_case] = True
        bits = np.left_shift(np.int64(1), np.arange(s_width, dtype=np.int64))

        n_metrics = len(AT_K_METRICS)
        out = np.empty((m, len(ks) * n_metrics))
        p = 0
        for k in sorted(set(ks)):
            while p < min(k, width):
                at = matches[:, p, :]
                any_at = at.any(axis=1)
                hits |= at
                done += any_at
                first[(first == 0) & any_at] = p + 1
                free = at & ~credited
                any_free = free.any(axis=1)
                if any_free.any():
                    # The free support of highest grade, the lowest index among equals.
                    best = np.where(free, REL, -np.inf).argmax(axis=1)
                    credited[rows[any_free], best[any_free]] = True
                    dcg = dcg + np.where(any_free, GAIN[rows, best] / log2_p1[p + 1], 0.0)
                p += 1
            block = np.empty((m, n_metrics))
            block[:, _RECALL_ANY] = np.where(hits.any(axis=1), 1.0, 0.0)
            block[:, _RECALL_FRAC] = hits.sum(axis=1) / n_sup
            block[:, _PRECISION] = done / k
            in_k = (first > 0) & (first <= k)
            block[:, _MRR] = np.where(in_k, 1.0 / np.where(in_k, first, 1), 0.0)
            ideal_k = ideal[:, ks.index(k)]
            positive = ideal_k > 0.0
            block[:, _NDCG] = np.where(positive, np.minimum(1.0, dcg / np.where(positive, ideal_k, 1.0)), _NAN)
            recall_all = np.full(m, _NAN)
            if len(g_case):
                hit_mask = (hits * bits).sum(axis=1)
                some = np.zeros(m, dtype=bool)
                np.logical_or.at(some, g_case, (hit_mask[g_case] & g_mask) == g_mask)
                recall_all[has_groups] = np.where(some[has_groups], 1.0, 0.0)
            block[:, _RECALL_ALL] = recall_all
            for j, kj in enumerate(ks):
                if kj == k:
                    out[:, j * n_metrics : (j + 1) * n_metrics] = block
        return out


def _layout(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For items stored case after case, `counts` per case: each item's case and its
    position within the case."""
    total = int(counts.sum())
    case_of = np.repeat(np.arange(len(counts)), counts)
    pos_of = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    return case_of, pos_of
