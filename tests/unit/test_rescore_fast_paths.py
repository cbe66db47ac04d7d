"""The scoring fast paths give exactly what the general paths give: the column-wise
matcher against the general loop, the cached ideal-DCG table against a fresh one."""

from __future__ import annotations

import random

import pytest


HEADINGS = ["# A", "# A > ## B", "#A>## B", "# AB", "# a > ## b", "", None, "# A > ## B > ### C", "# A ##"]


def test_column_wise_matcher_equals_the_general_loop() -> None:
    """GoldIndex._bulk (stored chunks) and GoldIndex._ranking (any chunks) give the same table."""
    from evalkit.evalset.anchors import GoldIndex

    rng = random.Random(9)
    taken = 0
    for _ in range(3000):
        supports = []
        for _ in range(rng.randint(0, 4)):
            s: dict = {"rel_path": rng.choice(["n/a.md", "./N/A.md", "n/b.md", None, ""])}
            if rng.random() < 0.3:
                s["chunk_id"] = rng.choice(["c1", "c2", "", 3])
            if rng.random() < 0.7:
                s["heading_path"] = rng.choice(HEADINGS)
            if rng.random() < 0.3:
                a = rng.randint(1, 20)
                s["start_line"], s["end_line"] = a, a + rng.randint(0, 5)
            if rng.random() < 0.3:
                s["snippets"] = rng.choice([["alpha"], ["zz"], [" "]])
            supports.append(s)
        chunks = []
        for r, cid in enumerate(rng.sample(["c1", "c2", "c3", "c4", "c5", "c6"], rng.randint(0, 6)), start=1):
            c = {"chunk_id": cid, "rank": r, "rel_path": rng.choice(["n/a.md", "n/A.md", "n//b.md", None, 5]),
                 "heading_path": rng.choice(HEADINGS), "text": rng.choice(["alpha beta", "", None])}
            if rng.random() < 0.5:
                a = rng.randint(1, 20)
                c["start_line"], c["end_line"] = a, a + rng.randint(0, 5)
            if rng.random() < 0.2:
                c["text_truncated"] = True
            chunks.append(c)
        for cs in (True, False):
            index = GoldIndex(supports, case_sensitive=cs)
            for rs in (False, True):
                fast = index._bulk(chunks, rs)
                if fast is None:
                    continue
                taken += 1
                assert fast == index._ranking(chunks, rs, check_order=True), (supports, chunks, cs, rs)
    assert taken > 10000


def test_idcg_table_gives_the_same_floats_when_evicted(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.evalset.anchors import match_ranking
    from evalkit.metrics import retrieval
    from evalkit.metrics.retrieval import _score_ks, ndcg

    monkeypatch.setattr(retrieval, "_IDCG_MAX", 4)
    rng = random.Random(4)
    for _ in range(500):
        n = rng.randint(1, 5)
        supports = [{"chunk_id": f"g{i}", "relevance": rng.choice([0, 0.5, 1, 2, 3, 7])} for i in range(n)]
        pool = [f"g{i}" for i in range(n)] + ["d1", "d2", "d3"]
        table = match_ranking([{"chunk_id": rng.choice(pool), "rank": r} for r in range(rng.randint(0, 12))], supports)
        ks = rng.sample([1, 2, 3, 5, 10, 40], rng.randint(1, 3))
        at_k, _, _ = _score_ks(table, ks, None)
        for k in ks:
            assert repr(at_k[str(k)]["ndcg"]) == repr(ndcg(table, k))
    assert len(retrieval._IDCG) <= 4
