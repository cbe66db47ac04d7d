"""Graded-only gold supports (`graded_only: true`): nDCG only, never the recall set.

Kernels by hand, the fused path against the kernels bit for bit, validation, and one case
imported from seed 002 (GNO) run end to end, its nDCG@10 checked against seed 002's own
ndcgAtK formula worked out by hand.
"""

from __future__ import annotations

import json
import math
import random
import textwrap
from pathlib import Path

import pytest

from evalkit import run_eval
from evalkit.errors import BadEvalSet, InputError
from evalkit.evalset.anchors import MatchTable, match_ranking
from evalkit.evalset.load import load_eval_set
from evalkit.interop.importers import import_cases
from evalkit.interop.importers.base import ImportOptions
from evalkit.interop.importers.docids import load_docid_map
from evalkit.interop.importers.output import write_eval_set
from evalkit.metrics.retrieval import (
    _recall_view,
    _score_ks,
    attribution_hit,
    average_precision,
    mrr,
    ndcg,
    precision,
    r_precision,
    recall_all,
    recall_any,
    recall_frac,
    recency_check,
    scope_miss,
    score_case_retrieval,
)


def _table(matches, relevance, graded=()) -> MatchTable:
    return MatchTable(
        matches=[frozenset(m) for m in matches],
        relevance=[float(r) for r in relevance],
        n_supports=len(relevance),
        graded_only=frozenset(graded),
    )


def _kernels(table, k, groups=None) -> dict:
    return {
        "recall_any": recall_any(table, k),
        "recall_all": recall_all(table, k, groups),
        "recall_frac": recall_frac(table, k),
        "precision": precision(table, k),
        "mrr": mrr(table, k),
        "ndcg": ndcg(table, k),
        "map": average_precision(table, k),
        "rprec": r_precision(table, k),
    }


def test_kernels_by_hand() -> None:
    # Supports 0 (rel 3) and 1 (rel 2) are the recall set; 2 (rel 1) is graded-only.
    # Ranking: pos1 nothing, pos2 -> support 2 (graded-only), pos3 -> support 1, pos4 -> support 0.
    t = _table([[], [2], [1], [0]], [3, 2, 1], graded=[2])
    got = _kernels(t, 3, groups=[[0, 1]])
    assert got["recall_any"] == 1.0  # support 1 at pos 3
    assert got["recall_frac"] == 1 / 2  # of the recall set {0, 1}; support 2 is in neither part
    assert got["recall_all"] == 0.0  # support 0 not in the top 3
    assert got["precision"] == 1 / 3  # pos 2 matches only a graded-only support: a miss
    assert got["mrr"] == 1 / 3  # not 1/2
    # nDCG counts support 2: DCG@3 = (2^1-1)/log2(3) + (2^2-1)/log2(4); IDCG@3 over all three grades.
    dcg = 1 / math.log2(3) + 3 / 2
    idcg = 7 / 1 + 3 / math.log2(3) + 1 / 2
    assert got["ndcg"] == pytest.approx(dcg / idcg, abs=1e-12)
    assert _kernels(t, 4)["recall_frac"] == 1.0


def test_all_graded_only_case_is_scored_for_ndcg_only() -> None:
    t = _table([[0], [1]], [1, 2], graded=[0, 1])
    got = _kernels(t, 5)
    assert {m: v for m, v in got.items() if m != "ndcg"} == dict.fromkeys(
        ["recall_any", "recall_all", "recall_frac", "precision", "mrr", "map", "rprec"]
    )
    # DCG = 1/log2(2) + 3/log2(3); IDCG = 3/log2(2) + 1/log2(3).
    assert got["ndcg"] == pytest.approx((1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)), abs=1e-12)

    case = {
        "answerable": True,
        "gold_supports": [{"chunk_id": "a", "graded_only": True, "relevance": 2},
                          {"chunk_id": "b", "graded_only": True}],
    }
    rm = score_case_retrieval(case, [{"chunk_id": "b", "rank": 1}, {"chunk_id": "a", "rank": 2}],
                              [{"chunk_id": "a"}], None, "off", [5])
    assert rm["status"] == "scored" and rm["n_gold"] == 2
    assert rm["recall_at_k"] is None and rm["mrr"] is None and rm["precision_at_k"] is None
    assert rm["recall_frac"] is None and rm["recall_all"] is None
    assert rm["attribution_hit"] is None  # a reference to a graded-only support is no attribution
    assert rm["gold_hit"] == [] and rm["first_match_rank"] is None
    assert rm["ndcg_at_k"] == pytest.approx((1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)), abs=1e-12)


def test_no_graded_support_costs_no_copy() -> None:
    t = _table([[0], []], [1])
    matches, n = _recall_view(t)
    assert matches is t.matches and n == 1


@pytest.mark.parametrize("seed", range(3))
def test_fused_path_equals_kernels_with_graded_supports(seed: int) -> None:
    rng = random.Random(700 + seed)
    for _ in range(2000):
        n = rng.randint(1, 6)
        graded = {i for i in range(n) if rng.random() < 0.4}
        supports = [
            {"chunk_id": f"g{i}", "relevance": rng.choice([0, 0.5, 1, 2, 3]), **({"graded_only": True} if i in graded else {})}
            for i in range(n)
        ]
        pool = [f"g{i}" for i in range(n)] + [f"d{j}" for j in range(8)]
        chunks = [{"chunk_id": rng.choice(pool), "rank": r} for r in range(rng.randint(0, 25))]
        table = match_ranking(chunks, supports)
        assert table.graded_only == frozenset(graded)
        recall_set = [i for i in range(n) if i not in graded]
        groups = None
        if recall_set and rng.random() < 0.7:
            groups = [rng.sample(recall_set, rng.randint(0, len(recall_set))) for _ in range(rng.randint(0, 3))]
        ks = rng.sample([1, 2, 3, 5, 10, 20, 30], rng.randint(1, 4))
        at_k, gold_hit, first = _score_ks(table, ks, groups)
        for k in ks:
            assert repr(at_k[str(k)]) == repr(_kernels(table, k, groups)), (table, k, groups)
        view = [m - table.graded_only for m in table.matches[: ks[0]]]
        assert gold_hit == sorted(set().union(*view)) if view else gold_hit == []
        assert first == next((p for p, m in enumerate(view, start=1) if m), None)


def test_group_naming_a_graded_support_is_rejected_by_kernel_and_fused_path() -> None:
    t = _table([[0]], [1, 1], graded=[1])
    with pytest.raises(InputError, match="graded_only"):
        recall_all(t, 5, [[0, 1]])
    with pytest.raises(InputError, match="graded_only"):
        _score_ks(t, [5], [[1]])


def test_attribution_scope_and_recency_ignore_or_refuse_graded_supports() -> None:
    supports = [{"rel_path": "a/x.md", "heading_path": ""}, {"rel_path": "b/y.md", "heading_path": "", "graded_only": True}]
    # A reference citing only the graded-only note is no attribution hit.
    assert attribution_hit(supports, [{"rel_path": "b/y.md"}]) is False
    assert attribution_hit(supports, [{"rel_path": "a/x.md"}]) is True
    # Only the recall set's folders count for scope miss: selecting b/ alone misses a/x.md.
    assert scope_miss(supports, {"selected_folders": ["b"]}, "on") is True
    assert scope_miss(supports, {"selected_folders": ["a"]}, "on") is False
    with pytest.raises(InputError, match="graded_only"):
        recency_check("cite_both", supports, match_ranking([], supports), 5, [])


def _write(path: Path, cases: list[dict]) -> Path:
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    return path


def test_validation_errors(tmp_path: Path) -> None:
    base = {"id": "c", "question": "q?", "answerable": True}
    bad_group = {**base, "gold_supports": [{"chunk_id": "a"}, {"chunk_id": "b", "graded_only": True}],
                 "required_support_groups": [[0, 1]]}
    with pytest.raises(BadEvalSet) as e:
        load_eval_set([_write(tmp_path / "g.jsonl", [bad_group])], [])
    assert "g.jsonl:1: required_support_groups[0][1]: index 1 points to a graded_only support" in str(e.value)

    recency = {**base, "gold_supports": [{"chunk_id": "a"}, {"chunk_id": "b", "graded_only": True}],
               "recency_conflict_rule": "cite_both"}
    with pytest.raises(BadEvalSet, match=r"recency_conflict_rule: recency_conflict_rule cannot be combined with graded_only"):
        load_eval_set([_write(tmp_path / "r.jsonl", [recency])], [])

    not_bool = {**base, "gold_supports": [{"chunk_id": "a", "graded_only": "yes"}]}
    with pytest.raises(BadEvalSet, match=r"gold_supports\[0\]\.graded_only"):
        load_eval_set([_write(tmp_path / "b.jsonl", [not_bool])], [])

    typo = {**base, "gold_supports": [{"chunk_id": "a", "graded_onyl": True}]}
    with pytest.raises(BadEvalSet, match="did you mean 'graded_only'"):
        load_eval_set([_write(tmp_path / "t.jsonl", [typo])], [])

    ok = {**base, "gold_supports": [{"chunk_id": "a"}, {"chunk_id": "b", "graded_only": True, "relevance": 2}],
          "required_support_groups": [[0]]}
    es = load_eval_set([_write(tmp_path / "ok.jsonl", [ok])], [])
    assert [s.graded_only for s in es.cases[0].gold_supports] == [False, True]


# --------------------------------------------------------------------------- end to end

# Seed 002, "Test Data Format", evals/fixtures/queries.json, verbatim (tests/data/gno).
SEED_002_QUERIES = (Path(__file__).parents[1] / "data" / "gno" / "queries.json").read_text(encoding="utf-8")

DOCS = {  # docid -> note of the vault
    "#a1b2c3": "contracts/termination.md",
    "#d4e5f6": "contracts/notice.md",
    "#g7h8i9": "contracts/misc.md",
    "#x1": "contracts/other1.md",
    "#x2": "contracts/other2.md",
    "#x3": "contracts/other3.md",
}

# The docids each query's search returns, best first (one chunk per document).
RANKINGS = {
    "termination clause": ["#x1", "#g7h8i9", "#d4e5f6", "#x2", "#x3", "#a1b2c3"],
    "Kündigungsklausel": ["#a1b2c3", "#x1"],
}

BOT = textwrap.dedent(
    f'''
    DOCS = {DOCS!r}
    RANKINGS = {RANKINGS!r}

    def ask(request):
        docids = RANKINGS[request["question"]]
        chunks = [
            {{"chunk_id": f"{{d}}-0", "rel_path": DOCS[d], "heading_path": "# Doc", "text": "text of " + d, "rank": i + 1}}
            for i, d in enumerate(docids)
        ]
        return {{"answer": "an answer", "references": [], "debug": {{"retrieved_chunks": chunks}}}}
    '''
)


def test_imported_gno_case_ndcg_equals_seed_002_formula_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    vault = tmp_path / "vault"
    for rel in DOCS.values():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(f"# Doc\n\nThe note {rel}.\n")
    (tmp_path / "queries.json").write_text(SEED_002_QUERIES, encoding="utf-8")
    (tmp_path / "docids.tsv").write_text(
        "docid\trel_path\n" + "".join(f"{d}\t{p}\n" for d, p in DOCS.items() if not d.startswith("#x"))
    )
    (tmp_path / "bot.py").write_text(BOT, encoding="utf-8")

    options = ImportOptions(docid_map=load_docid_map(tmp_path / "docids.tsv"))
    cases = import_cases("gno", [tmp_path / "queries.json"], options)
    write_eval_set(cases, tmp_path / "eval_set.jsonl", extra_categories=[])

    result = run_eval(
        eval_set=str(tmp_path / "eval_set.jsonl"), target=f"python:{tmp_path / 'bot.py'}:ask", vault=str(vault),
        retrieval_only=True, results_dir=str(tmp_path / "results"), k=[5, 10],
    )
    records = {r["test_case_id"]: r for r in map(json.loads, (result.run_dir / "results.jsonl").read_text().splitlines())}
    q1 = records["q1"]["retrieval_metrics"]

    # Seed 002's ndcgAtK(10) for q1, by hand. relevanceMap = {a1b2c3: 3, d4e5f6: 2, g7h8i9: 1};
    # output = [x1, g7h8i9, d4e5f6, x2, x3, a1b2c3]; term i (0-based) = (2^rel - 1) / log2(i + 2).
    dcg = 0 + (2**1 - 1) / math.log2(3) + (2**2 - 1) / math.log2(4) + 0 + 0 + (2**3 - 1) / math.log2(7)
    # IDCG: the judgments sorted by relevance 3, 2, 1.
    idcg = (2**3 - 1) / math.log2(2) + (2**2 - 1) / math.log2(3) + (2**1 - 1) / math.log2(4)
    assert q1["at_k"]["10"]["ndcg"] == pytest.approx(dcg / idcg, abs=1e-12)

    # Seed 002's Recall@5 = hits / |relevantDocs|: d4e5f6 only (a1b2c3 is 6th) -> 1/2.
    # g7h8i9 (judged, not relevant) is not in the recall set: with it, this would be 2/3.
    assert q1["at_k"]["5"]["recall_frac"] == 1 / 2
    assert q1["at_k"]["10"]["recall_frac"] == 1.0
    assert q1["at_k"]["5"]["recall_any"] == 1.0
    assert q1["at_k"]["5"]["precision"] == 1 / 5  # position 2 (g7h8i9) is no hit
    assert q1["at_k"]["5"]["mrr"] == 1 / 3  # first recall-set hit at position 3, not 2
    assert q1["gold_hit"] == [1] and q1["first_match_rank"] == 3

    q2 = records["q2"]["retrieval_metrics"]
    assert q2["at_k"]["10"]["ndcg"] == 1.0 and q2["at_k"]["5"]["recall_frac"] == 1.0

    # The gold anchors are checked against the vault before the run: none is stale.
    assert not [w for w in result.metrics.get("warnings", []) if "anchor" in str(w).lower()]
    assert records["q1"]["case"]["language"] == "en"
