"""The offline heuristic judge, checked by hand on a fixed context."""

from __future__ import annotations

import asyncio

import pytest

from evalkit.judges import JudgeItem
from evalkit.judges.heuristic import (
    HeuristicJudge,
    citation_check,
    content_words,
    detect_refusal,
    groundedness_score,
    judge_claims,
    split_claims,
)

CONTEXT = (
    {"chunk_id": "c1", "text": "The server listens on port 8080 by default."},
    {"chunk_id": "c2", "text": "The database runs PostgreSQL 16 on a separate host."},
)
QUESTION = "Which port does the server listen on?"


def _judge(kind: str, answer: str, **kw):
    item = JudgeItem(question=QUESTION, answer=answer, context=CONTEXT, **kw)
    return asyncio.run(HeuristicJudge().judge(kind, item)).verdict


def test_content_words_drop_stopwords_short_tokens_and_plural_s():
    # by hand: "The"/"on" are stop words, "is" too short; "listens" -> "listen"; numbers kept
    assert content_words("The server listens on port 8080") == {"server", "listen", "port", "8080"}


def test_grounded_answer_scores_higher_than_ungrounded():
    grounded = _judge("groundedness", "The server listens on port 8080 [1].")
    ungrounded = _judge("groundedness", "Backups are stored in Amazon S3 every night.")
    mixed = _judge("groundedness", "The server listens on port 8080 [1]. Backups are stored in Amazon S3 every night.")

    # by hand: {server, listen, port, 8080} all in chunk 1 -> s = 1, cited -> c = 1 -> 5 × 1 × (0.6 + 0.4)
    assert grounded["score"] == pytest.approx(5 * 1 * (0.6 + 0.4 * 1))
    # by hand: {backup, stored, amazon, every, night} share nothing with either chunk -> s = 0
    assert ungrounded["score"] == 0
    # by hand: s = 1/2, c = 1/2 -> 5 × 1/2 × (0.6 + 0.4 × 1/2)
    assert mixed["score"] == pytest.approx(5 * 1 / 2 * (0.6 + 0.4 * 1 / 2))
    assert grounded["score"] > mixed["score"] > ungrounded["score"]
    assert mixed["supported_claims"] == ["The server listens on port 8080."]
    assert mixed["unsupported_claims"] == ["Backups are stored in Amazon S3 every night."]


def test_uncited_but_supported_answer_tops_out_at_three():
    # by hand: s = 1, c = 0 -> 5 × 1 × 0.6 = 3 ("missing citations" on the seed's rubric)
    assert _judge("groundedness", "The server listens on port 8080.")["score"] == pytest.approx(5 * 0.6)


def test_claim_level_mode_ignores_citations():
    v = _judge("claims", "The server listens on port 8080. Backups are stored in Amazon S3 every night.")
    # by hand: 1 of 2 claims supported -> 5 × 1/2
    assert v["score"] == pytest.approx(5 * 1 / 2)
    assert [c["supported"] for c in v["claims"]] == [True, False]
    assert v["claims"][0]["evidence"] == [1]


def test_threshold_is_sixty_percent_of_claim_words():
    # by hand: {server, listen, port, 9090}: 3 of 4 words in chunk 1 = 0.75 >= 0.6 -> supported.
    # The heuristic cannot see that the number is wrong: it is a weak proxy.
    claims = judge_claims("The server listens on port 9090.", CONTEXT)
    assert claims[0]["overlap"] == pytest.approx(3 / 4) and claims[0]["supported"]
    # by hand: {database, runs, mysql, shared, cluster}: 2 of 5 = 0.4 < 0.6 -> unsupported
    claims = judge_claims("The database runs MySQL on a shared cluster.", CONTEXT)
    assert claims[0]["overlap"] == pytest.approx(2 / 5) and not claims[0]["supported"]


def test_no_claims_gives_no_score_not_zero():
    assert groundedness_score([]) is None
    assert _judge("groundedness", "Hi!")["score"] is None


def test_citation_coverage():
    c = citation_check("A is 1 [1]. B is 2 [2, 3]. C is three.", n_context=2)
    assert c["has_citations"] is True
    assert c["markers"] == [1, 2, 3]
    # by hand: 3 claims, 2 carry a marker
    assert c["claims"] == 3 and c["cited_claims"] == 2 and c["coverage"] == pytest.approx(2 / 3)
    assert c["out_of_range"] == [3]
    assert citation_check("No markers here at all.", n_context=2)["has_citations"] is False


def test_marker_after_the_full_stop_belongs_to_the_sentence_before():
    assert split_claims("The port is 8080. [1]\n- PostgreSQL 16 [2]") == [
        {"claim": "The port is 8080.", "markers": [1]},
        {"claim": "PostgreSQL 16", "markers": [2]},
    ]


@pytest.mark.parametrize(
    ("answer", "abstained"),
    [
        pytest.param("I couldn't find anything about that in your notes.", True, id="couldnt-find"),
        pytest.param("I don't know.", True, id="dont-know"),
        pytest.param("The notes do not mention a deployment date.", True, id="notes-do-not-mention"),
        pytest.param("There is not enough information in the context to answer.", True, id="not-enough-info"),
        pytest.param("The server listens on port 8080 [1].", False, id="plain-answer"),
        pytest.param(
            "The server listens on port 8080 by default and the database runs PostgreSQL 16 on a separate host, "
            "which the operations team set up last year together with the monitoring stack, the alerting rules, "
            "the backup jobs and the dashboards everyone uses. The exact TLS setup is not mentioned.",
            False,
            id="long-answer-with-a-gap",
        ),
    ],
)
def test_refusal_detector(answer, abstained):
    assert detect_refusal(answer)["abstained"] is abstained


def test_correctness_uses_expected_key_facts():
    v = _judge("correctness", "The server listens on port 8080.", expected_key_facts=("port 8080", "PostgreSQL 16"))
    # by hand: {port, 8080} found, {postgresql, 16} not -> 5 × 1/2
    assert v["score"] == pytest.approx(5 * 1 / 2)
    assert v["key_facts_covered"] == ["port 8080"] and v["key_facts_missing"] == ["PostgreSQL 16"]


def test_correctness_without_key_facts_is_unscoreable():
    # Issue 43: the question's words and the context's support scored this 5.0 (a wrong answer
    # of the same words 4.0): with nothing to check it against, there is no score.
    v = _judge("correctness", "The server listens on port 8080.")
    assert v["score"] is None and v["basis"] is None
    assert "unscoreable" in v["reasoning"]


def test_a_citation_marker_of_thousands_of_digits_does_not_crash_the_judge():
    # regression: a [ddd…] run of 5,000 digits made int() raise (Python's 4,300-digit limit)
    from evalkit.judges.heuristic import citation_check, split_claims

    answer = "Water twice a week [" + "9" * 5_000 + "]. Prune suckers [1]."
    assert citation_check(answer, n_context=2)["markers"] == [1]
    assert len(split_claims(answer)) == 2
