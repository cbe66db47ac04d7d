"""GoldIndex (the indexed matcher behind match_ranking) and the fused per-K scorer give
exactly what the pairwise definitions give: every (chunk, support) pair through
`match_support`, chunks in `order_chunks`' rank order, and each kernel called on its own.

The pairwise oracle below is the matcher as it stood before indexing (EVAL.md "Anchors");
the random inputs mix every gold form, messy paths and headings, snippets on cut and
whole texts, duplicates, odd ranks, and chunks that take the column-wise fast path.
"""

from __future__ import annotations

import random

import pytest

from evalkit.errors import InputError
from evalkit.evalset import anchors
from evalkit.evalset.anchors import (
    GoldIndex,
    match_ranking,
    match_support,
    normalize_heading_path,
    normalize_rel_path,
)
from evalkit.metrics.retrieval import (
    _score_ks,
    average_precision,
    mrr,
    ndcg,
    precision,
    r_precision,
    recall_all,
    recall_any,
    recall_frac,
    score_case_retrieval,
)

PATHS = ["notes/a.md", "./notes/a.md", "Notes/A.md", "notes//a.md", "notes\\a.md", "notes/b.md", "b.md", "", None]
HEADINGS = ["# A", "# A > ## B", "#A>## B", "# AB", "## A", "", None, "# a", "# A > ## B > ### C", "# C#", "# A ##"]
TEXTS = ["alpha beta", "RAG systems", "rag\nSYSTEMS here", "", None, "Beta"]
SNIPPETS = [[], ["alpha"], ["rag systems"], ["zzz"], ["  "], ["beta", "alpha"]]


def _oracle_order(chunks: list) -> list:
    def key(item):
        rank = item[1].get("rank")
        if rank is None or isinstance(rank, bool):
            return (1, 0.0, item[0])
        try:
            return (0, float(rank), item[0])
        except (TypeError, ValueError):
            return (1, 0.0, item[0])

    return [c for _, c in sorted(enumerate(chunks), key=key)]


def _oracle_identity(chunk: dict, cs: bool) -> tuple:
    cid = chunk.get("chunk_id")
    if cid is not None and str(cid) != "":
        return ("id", str(cid))
    return (
        "loc",
        normalize_rel_path(chunk.get("rel_path"), case_sensitive=cs),
        normalize_heading_path(chunk.get("heading_path")),
        anchors.int_or_none(chunk.get("start_line")),
        anchors.int_or_none(chunk.get("end_line")),
        chunk.get("text") or "",
    )


def _oracle(chunks: list, supports: list, rs: bool, cs: bool) -> tuple:
    """The pairwise definition: O(K x G) match_support calls."""
    matches, dups, seen = [], set(), set()
    for pos, chunk in enumerate(_oracle_order(chunks)):
        ident = _oracle_identity(chunk, cs)
        if ident in seen:
            dups.add(pos)
            matches.append(frozenset())
            continue
        seen.add(ident)
        matches.append(
            frozenset(i for i, s in enumerate(supports) if match_support(s, chunk, require_snippets=rs, case_sensitive=cs))
        )
    return matches, frozenset(dups)


def _support(rng: random.Random) -> dict:
    s: dict = {}
    if rng.random() < 0.3:
        s["chunk_id"] = rng.choice(["c1", "c2", "c3", "", 5])
    if rng.random() < 0.9:
        s["rel_path"] = rng.choice(PATHS)
    if rng.random() < 0.7:
        s["heading_path"] = rng.choice(HEADINGS)
    if rng.random() < 0.3:
        a = rng.randint(1, 30)
        s["start_line"], s["end_line"] = a, a + rng.randint(0, 10)
    if rng.random() < 0.4:
        s["snippets"] = rng.choice(SNIPPETS)
    if rng.random() < 0.5:
        s["relevance"] = rng.choice([0, 1, 2, 3, 0.5])
    return s


def _chunk(rng: random.Random, tidy: bool) -> dict:
    """tidy: what stored runs hold (string ids, int ranks in order), so the fast path runs."""
    c: dict = {"rel_path": rng.choice(PATHS), "heading_path": rng.choice(HEADINGS), "text": rng.choice(TEXTS)}
    c["chunk_id"] = f"c{rng.randint(1, 6)}" if tidy else rng.choice(["c1", "c2", "c3", "c4", "", None, 5])
    if rng.random() < 0.5:
        a = rng.randint(1, 30)
        c["start_line"], c["end_line"] = a, a + rng.randint(0, 10)
    if rng.random() < 0.3:
        c["text_truncated"] = rng.random() < 0.5
    r = rng.random()
    c["rank"] = rng.randint(0, 8) if tidy or r < 0.6 else rng.choice([None, "3", True, 2.5, float("nan")])
    return c


def _case(rng: random.Random) -> tuple[list, list]:
    supports = [_support(rng) for _ in range(rng.randint(0, 5))]
    tidy = rng.random() < 0.5
    chunks = [_chunk(rng, tidy) for _ in range(rng.randint(0, 10))]
    if tidy:
        chunks = sorted({c["chunk_id"]: c for c in chunks}.values(), key=lambda c: c["rank"])
    elif chunks and rng.random() < 0.3:
        chunks.append(dict(rng.choice(chunks)))
    return chunks, supports


@pytest.mark.parametrize("seed", range(4))
def test_match_ranking_equals_pairwise_definition(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(1500):
        chunks, supports = _case(rng)
        for rs in (False, True):
            for cs in (True, False):
                table = match_ranking(chunks, supports, require_snippets=rs, case_sensitive=cs)
                assert (table.matches, table.duplicates) == _oracle(chunks, supports, rs, cs), (chunks, supports, rs, cs)
                assert table.n_supports == len(supports)


def test_goldindex_match_equals_match_support() -> None:
    rng = random.Random(11)
    for _ in range(3000):
        supports = [_support(rng) for _ in range(rng.randint(1, 4))]
        chunk = _chunk(rng, tidy=False)
        index = GoldIndex(supports)
        expected = frozenset(i for i, s in enumerate(supports) if match_support(s, chunk))
        assert index.match(chunk) == expected


def test_fast_path_is_taken_for_stored_chunks() -> None:
    supports = [{"rel_path": "n/a.md", "heading_path": "# A"}, {"chunk_id": "z"}]
    chunks = [
        {"chunk_id": "x", "rel_path": "n/a.md", "heading_path": "# A > ## B", "rank": 1},
        {"chunk_id": "y", "rel_path": "n/b.md", "heading_path": "# A", "rank": 2},
        {"chunk_id": "z", "rel_path": "n/c.md", "heading_path": "", "rank": 3},
    ]
    index = GoldIndex(supports)
    table = index._bulk(chunks, False)
    assert table is not None and table.matches == [frozenset({0}), frozenset(), frozenset({1})]
    # A duplicate or an out-of-order rank leaves it to the general loop, same answer.
    assert index._bulk([*chunks, dict(chunks[0], rank=4)], False) is None
    assert index._bulk(list(reversed(chunks)), False) is None
    assert index.ranking(list(reversed(chunks))).matches == table.matches


def test_path_table_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(anchors, "_PATHS_MAX", 8)
    for i in range(50):
        assert anchors.path_of(f"./n//{i}.md", True) == f"n/{i}.md"
    assert len(anchors._PATHS[True]) <= 8


def _kernels(table, k: int, groups) -> dict:
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


@pytest.mark.parametrize("seed", range(3))
def test_fused_kernels_equal_each_kernel_bit_for_bit(seed: int) -> None:
    rng = random.Random(100 + seed)
    for _ in range(2000):
        n = rng.randint(1, 6)
        supports = [{"chunk_id": f"g{i}", "relevance": rng.choice([0, 0.5, 1, 2, 3])} for i in range(n)]
        pool = [f"g{i}" for i in range(n)] + [f"d{j}" for j in range(8)]
        chunks = [{"chunk_id": rng.choice(pool), "rank": r} for r in range(rng.randint(0, 25))]
        table = match_ranking(chunks, supports)
        groups = None if rng.random() < 0.3 else [rng.sample(range(n), rng.randint(0, n)) for _ in range(rng.randint(0, 3))]
        ks = rng.sample([1, 2, 3, 5, 10, 20, 30], rng.randint(1, 4))
        at_k, gold_hit, first = _score_ks(table, ks, groups)
        for k in ks:
            # repr: the same floats to the last bit, and None where the kernel gives None.
            assert repr(at_k[str(k)]) == repr(_kernels(table, k, groups)), (table, k, groups)
        hits = set().union(*table.matches[: ks[0]]) if table.matches else set()
        assert gold_hit == sorted(hits)
        assert first == next((p for p, m in enumerate(table.matches[: ks[0]], start=1) if m), None)


def test_fused_kernels_reject_bad_group_index_like_recall_all() -> None:
    table = match_ranking([{"chunk_id": "g0", "rank": 1}], [{"chunk_id": "g0"}])
    with pytest.raises(InputError, match="index 3 is out of range"):
        _score_ks(table, [5], [[0, 3]])
    with pytest.raises(InputError, match="index 3 is out of range"):
        score_case_retrieval({"answerable": True, "gold_supports": [{"chunk_id": "g0"}], "required_support_groups": [[3]]},
                             [], [], None, "off", [5])


def test_canonical_heading_shortcut_equals_full_normalization() -> None:
    # Accepting a heading as already normal must mean the full steps change nothing.
    alphabet = ["#", " ", ">", "A", "b", "-", "\t", "é", "e\u0301", "  ", "##", " > ", ">#", "\u00a0"]
    rng = random.Random(5)
    accepted = 0
    for length in range(7):
        for _ in range(4000):
            h = "".join(rng.choice(alphabet) for _ in range(length))
            fast = anchors._canonical_components(h)
            if fast is not None:
                accepted += 1
                assert fast == anchors._normalized_components(h), repr(h)
    assert accepted > 500
    assert anchors._canonical_components("# Note 12 > ## Section 3") == ("# Note 12", "## Section 3")
    for not_plain in ("#A", "## A ##", "# A>## B", "  # A", "# A >  ## B", "caf\u00e9"):
        assert anchors._canonical_components(not_plain) is None
