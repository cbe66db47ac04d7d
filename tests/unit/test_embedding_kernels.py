"""Issue 43 item 2: the embedding analysis's numeric kernels, each against an independent
computation (scikit-learn, a dev dependency only; never imported by evalkit)."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys

import numpy as np
import pytest

from evalkit.embeddings.analysis import (
    cosine_rows,
    distances,
    kmeans,
    leading_coordinates,
    silhouette,
    terms,
    top_terms,
)
from evalkit.embeddings.embedders import LEXICAL_DIMS, LexicalEmbedder, lexical_features

sklearn = pytest.importorskip("sklearn")
from sklearn.cluster import KMeans  # noqa: E402
from sklearn.feature_extraction.text import TfidfVectorizer  # noqa: E402
from sklearn.metrics import adjusted_rand_score, silhouette_score  # noqa: E402
from sklearn.metrics.pairwise import cosine_similarity  # noqa: E402

TEXTS = [
    "How do I reset the staging database?",
    "Reset the staging database with `make db-reset`; it drops every table first.",
    "Who leads the Harbor search project?",
    "Ravi Menon is the project lead of Harbor.",
    "",  # no words: a zero vector
    "naïve café ÉTÉ résumé",
]


def test_cosine_rows_is_sklearns_cosine_and_nan_for_a_zero_vector() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(7, 5)), rng.normal(size=(7, 5))
    want = np.diag(cosine_similarity(a, b))
    assert np.allclose(cosine_rows(a, b), want, atol=1e-12)
    b[3] = 0.0
    got = cosine_rows(a, b)
    assert math.isnan(got[3]) and np.allclose(np.delete(got, 3), np.delete(want, 3), atol=1e-12)


def test_lexical_vectors_are_sklearns_tfidf_over_the_same_features() -> None:
    # The same n-gram buckets as tokens: sklearn's sublinear TF, smooth IDF and L2 norm must
    # give exactly the vectors the numpy code builds.
    vectorizer = TfidfVectorizer(analyzer=lambda t: [str(b) for b in lexical_features(t)], sublinear_tf=True,
                                 smooth_idf=True, norm="l2")
    fitted = vectorizer.fit_transform(TEXTS).toarray()
    want = np.zeros((len(TEXTS), LEXICAL_DIMS))
    for token, column in vectorizer.vocabulary_.items():
        want[:, int(token)] = fitted[:, column]
    got = LexicalEmbedder().embed_now(TEXTS)
    assert got.shape == (len(TEXTS), LEXICAL_DIMS) and got.dtype == np.float32
    assert np.allclose(got, want, atol=1e-7)  # float32's rounding of the same values
    assert not got[4].any()  # the empty text


def test_lexical_features_are_word_padded_char_ngrams() -> None:
    import zlib

    # "Hi" -> " hi " : 3-grams " hi", "hi "; 4-gram " hi "; no 5-gram.
    want = [zlib.crc32(g.encode()) % LEXICAL_DIMS for g in (" hi", "hi ", " hi ")]
    assert lexical_features("Hi") == want
    assert lexical_features("HI!") == lexical_features("hi")


def test_lexical_vectors_are_the_same_in_another_process() -> None:
    # CRC-32, not Python's salted hash(): another interpreter gives the same buckets.
    code = "from evalkit.embeddings.embedders import lexical_features as f; print(f('Harbor search'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}, cwd=None)
    assert out.stdout.strip() == str(lexical_features("Harbor search"))


def test_lexical_embedder_is_async_like_every_embedder() -> None:
    got = asyncio.run(LexicalEmbedder().embed(TEXTS[:2]))
    assert np.array_equal(got, LexicalEmbedder().embed_now(TEXTS[:2]))


@pytest.mark.parametrize("rows", [1024, 2])
def test_a_fitted_lexical_embedder_gives_each_text_its_one_call_vector_in_any_block(
        rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # The analysis fits the IDF on all its texts, then embeds them a block at a time (and a
    # fitted embedder builds FITTED_ROWS rows at a time): each vector must be bit for bit the
    # row a single call over all the texts gives.
    from evalkit.embeddings import embedders

    monkeypatch.setattr(embedders, "FITTED_ROWS", rows)
    whole = LexicalEmbedder().embed_now(TEXTS)
    fitted = LexicalEmbedder().fit(TEXTS)
    for block in ([0], [3, 1], [4, 2, 0], list(range(len(TEXTS)))):
        assert np.array_equal(fitted.embed_now([TEXTS[i] for i in block]), whole[block])
    # a text the fit did not see is weighed by the fitted IDF too (hashed now, not cached)
    unseen = fitted.embed_now(["harbor lights"])
    assert unseen.shape == (1, LEXICAL_DIMS) and unseen.any() and "harbor lights" not in fitted.seen


def _data(seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.vstack([rng.normal(loc, 0.4, size=(12, 4)) for loc in (0.0, 3.0, -3.0)])


@pytest.mark.parametrize("labels", [
    np.repeat([0, 1, 2], 12),
    np.r_[np.zeros(35, int), 1],  # a cluster of one: its silhouette is 0
    np.tile([0, 1, 2, 3], 9),
])
def test_silhouette_is_sklearns(labels: np.ndarray) -> None:
    x = _data()
    want = silhouette_score(x, labels)
    assert silhouette(x, labels) == pytest.approx(want, abs=1e-12)
    assert silhouette(x, labels, dist=distances(x, block=5)) == pytest.approx(want, abs=1e-12)  # in blocks


def test_silhouette_of_one_cluster_is_nan() -> None:
    assert math.isnan(silhouette(_data(), np.zeros(36, int)))


def test_kmeans_from_given_centers_is_sklearns_lloyd() -> None:
    x = _data(5)
    init = x[[0, 1, 2]].copy()  # three points of one blob: Lloyd must move them apart
    labels, centers, inertia = kmeans(x, 3, init=init)
    ref = KMeans(3, init=init, n_init=1, algorithm="lloyd", tol=0.0, max_iter=300).fit(x)
    assert adjusted_rand_score(labels, ref.labels_) == 1.0
    assert inertia == pytest.approx(ref.inertia_, rel=1e-9)


def test_kmeans_is_seeded_and_finds_the_blobs() -> None:
    x = _data(7)
    a = kmeans(x, 3, seed=0)
    b = kmeans(x, 3, seed=0)
    assert np.array_equal(a[0], b[0]) and a[2] == b[2]
    ref = KMeans(3, n_init=10, random_state=0).fit(x)
    assert adjusted_rand_score(a[0], ref.labels_) == 1.0
    assert a[2] == pytest.approx(ref.inertia_, rel=1e-9)


def test_top_terms_by_cluster_count_times_idf() -> None:
    everyone = [terms(q) for q in ("How do I reset the database?", "Reset staging database", "Who leads Harbor?",
                                   "Harbor launch date")]
    # cluster = the first two; "database" and "reset" are in both (count 2, df 2 of N=4):
    # 2 * (ln(5/3) + 1) each; "staging" is in one question only and left out.
    assert top_terms(everyone[:2], everyone) == ["database", "reset"]
    assert terms("What's the DB's p95 in 2024?") == {"what's", "db's", "p95"}  # a number alone is no term


def test_leading_coordinates_keep_distances_and_are_a_truncated_svd() -> None:
    from sklearn.decomposition import TruncatedSVD
    from sklearn.metrics import pairwise_distances

    rng = np.random.default_rng(11)
    low = rng.normal(size=(50, 5)) @ rng.normal(size=(5, 300))  # rank 5 in 300 dimensions
    y = leading_coordinates(low @ low.T, dims=10)
    assert np.allclose(pairwise_distances(y), pairwise_distances(low), atol=1e-8)  # exact below the rank
    full = rng.normal(size=(60, 40))
    y = leading_coordinates(full @ full.T, dims=6)
    ref = TruncatedSVD(n_components=6, algorithm="arpack").fit_transform(full)
    assert np.allclose(pairwise_distances(y), pairwise_distances(ref), atol=1e-8)
