"""BM25 scores against hand computation, fusion and tie-breaks, search terms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalkit.reference.index import LexicalIndex, fuse, normalize_rows
from evalkit.reference.tokens import count_tokens, fold, terms

DOCS = [["cat", "dog"], ["cat"], ["bird", "bird", "fish"]]  # N = 3, avgdl = 6 / 3 = 2


def test_bm25_by_hand() -> None:
    idx = LexicalIndex(DOCS, k1=1.2, b=0.75)
    # by hand: idf(dog) = ln(1 + (3 - 1 + 0.5) / (1 + 0.5)); doc 0 has tf 1, |d| = avgdl,
    # so the tf part is 1 * 2.2 / (1 + 1.2) = 1
    idf_dog = math.log(1 + 2.5 / 1.5)
    assert idx.scores(["dog"]) == pytest.approx([idf_dog * 1, 0, 0])
    # by hand: bird in doc 2, tf 2, |d| = 3: 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 3 / 2))
    tf_part = 2 * 2.2 / (2 + 1.2 * (0.25 + 0.75 * 3 / 2))
    assert idx.scores(["bird"])[2] == pytest.approx(math.log(1 + 2.5 / 1.5) * tf_part)
    # by hand: cat df 2: idf = ln(1 + 1.5 / 2.5); doc 1 |d| = 1: 2.2 / (1 + 1.2 * (0.25 + 0.75 / 2))
    idf_cat = math.log(1 + 1.5 / 2.5)
    assert idx.scores(["cat"])[1] == pytest.approx(idf_cat * 2.2 / (1 + 1.2 * (0.25 + 0.375)))


def test_repeated_query_terms_count_once_and_unknown_terms_score_nothing() -> None:
    idx = LexicalIndex(DOCS)
    assert list(idx.scores(["dog", "dog"])) == list(idx.scores(["dog"]))
    assert not idx.scores(["zebra"]).any()
    # an unseen term has df = 0: the largest idf, ln(1 + 3.5 / 0.5)
    assert idx.idf("zebra") == pytest.approx(math.log(1 + 3.5 / 0.5))


def test_fuse_lexical_only_ranks_by_normalised_bm25_then_chunk_id() -> None:
    lex = np.array([2.0, 4.0, 0.0, 2.0])
    hits = fuse(lex, None, np.ones(4, bool), ["d", "c", "b", "a"], k=10, w_vector=0.7, w_lexical=0.3)
    # zero lexical score is not a candidate; min-max over the candidates [2, 4, 2]
    assert [h.index for h in hits] == [1, 3, 0]  # 0 and 3 tie at 0.0: chunk id "a" < "d"
    assert [h.score_final for h in hits] == [1.0, 0.0, 0.0]
    assert all(h.score_vector == 0.0 for h in hits)
    assert [h.score_lexical for h in hits] == [4.0, 2.0, 2.0]


def test_fuse_with_vectors_uses_the_weights() -> None:
    lex = np.array([0.0, 2.0, 4.0])
    vec = np.array([1.0, 0.5, 0.0])
    hits = fuse(lex, vec, np.ones(3, bool), ["a", "b", "c"], k=3, w_vector=0.7, w_lexical=0.3)
    # by hand: norm vec = [1, .5, 0], norm lex = [0, .5, 1]
    final = {h.index: h.score_final for h in hits}
    assert final == pytest.approx({0: 0.7 * 1, 1: 0.7 * 0.5 + 0.3 * 0.5, 2: 0.3 * 1})
    assert [h.index for h in hits] == [0, 1, 2]


def test_fuse_respects_mask_and_k() -> None:
    lex = np.array([1.0, 2.0, 3.0])
    hits = fuse(lex, None, np.array([True, True, False]), ["a", "b", "c"], k=1, w_vector=0.5, w_lexical=0.5)
    assert [h.index for h in hits] == [1]
    assert fuse(lex, None, np.zeros(3, bool), ["a", "b", "c"], 5, 0.5, 0.5) == []


def test_single_candidate_normalises_to_one() -> None:
    hits = fuse(np.array([0.0, 3.0]), None, np.ones(2, bool), ["a", "b"], 5, 0.7, 0.3)
    assert [(h.index, h.score_final) for h in hits] == [(1, 1.0)]


def test_normalize_rows() -> None:
    m = normalize_rows([[3.0, 4.0], [0.0, 0.0]])
    assert m.tolist() == [[3 / 5, 4 / 5], [0.0, 0.0]]


@pytest.mark.parametrize(
    ("text", "n"),
    [("## Due dates, 2024", 6), ("", 0), ("snake_case word", 2), ("a+b", 3), ("émoji ✓ ok", 3)],
)
def test_count_tokens(text: str, n: int) -> None:
    assert count_tokens(text) == n


def test_terms_drop_stopwords_and_fold_plurals() -> None:
    assert terms("What are the Tasks and Queries of this class?") == ["task", "query", "class"]
    assert fold("status") == "status" and fold("bus") == "bus" and fold("dates") == "date"
