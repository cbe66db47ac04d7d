"""run_eval end to end with a Python-callable target (issue 13, items 5, 6, 7a): the
per-case response_validity, and metrics.json's response_valid_rate, has_citations_rate
and by_language cells, by hand."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import orjson
import pytest

pytestmark = pytest.mark.integration

BOT = textwrap.dedent(
    '''
    import json
    GOOD = json.dumps({"lexicalQueries": ["termination clause"], "vectorQueries": ["contract termination"]})
    PLAN = {  # question: (answer, retrieved rel_path, references, abstained)
        "q1": (GOOD, "n/a.md", 1, False),
        "q2": (json.dumps({"lexicalQueries": []}), "n/x.md", 0, False),
        "q3": ("Kündigung steht in [1].", "n/c.md", 0, False),
        "q4": ("Ich weiß es nicht.", "n/x.md", 0, True),
    }

    def ask(request):
        if request["question"] == "q5":
            raise RuntimeError("boom")
        answer, path, refs, abstained = PLAN[request["question"]]
        chunk = {"chunk_id": path, "rel_path": path, "heading_path": "# H", "text": "t", "rank": 1}
        return {"answer": answer, "abstained": abstained,
                "references": [{"rel_path": path, "heading_path": "# H"}] * refs,
                "debug": {"retrieved_chunks": [chunk]}}
    '''
)

CASES = [
    {"id": "q1", "question": "q1", "answerable": True, "language": "en", "gold_supports": [{"rel_path": "n/a.md"}]},
    {"id": "q2", "question": "q2", "answerable": True, "language": "de", "doc_language": "en",
     "gold_supports": [{"rel_path": "n/b.md"}]},
    {"id": "q3", "question": "q3", "answerable": True, "language": "de", "doc_language": "en",
     "gold_supports": [{"rel_path": "n/c.md"}]},
    {"id": "q4", "question": "q4", "answerable": False, "language": "de"},
    {"id": "q5", "question": "q5", "answerable": True, "gold_supports": [{"rel_path": "n/a.md"}]},
]

SCHEMA = {
    "type": "object",
    "required": ["lexicalQueries", "vectorQueries"],
    "properties": {"lexicalQueries": {"type": "array", "minItems": 1}, "vectorQueries": {"type": "array", "minItems": 1}},
}


def test_validity_citations_and_language_by_hand(tmp_path: Path) -> None:
    from evalkit import run_eval

    (tmp_path / "bot.py").write_text(BOT)
    es = tmp_path / "es.jsonl"
    es.write_text("".join(json.dumps(c) + "\n" for c in CASES))
    schema = tmp_path / "expansion.schema.json"
    schema.write_text(json.dumps(SCHEMA))
    result = run_eval(
        eval_set=str(es), k=[1], target=f"python:{tmp_path / 'bot.py'}:ask", retrieval_only=True,
        results_dir=str(tmp_path / "results"), run_id="v1", no_probe=True,
        response_schema=str(schema), response_field="answer", max_error_rate=1.0,
    )
    run_dir = tmp_path / "results" / "v1"
    records = {r["test_case_id"]: r for r in map(orjson.loads, (run_dir / "results.jsonl").read_bytes().splitlines())}
    validity = {cid: r["response_validity"] for cid, r in records.items()}
    assert validity["q1"] == {"valid": True, "errors": [], "n_errors": 0}
    assert validity["q2"]["valid"] is False and validity["q2"]["n_errors"] == 2
    assert validity["q2"]["errors"] == ["$: 'vectorQueries' is a required property", "$.lexicalQueries: [] should be non-empty"]
    assert validity["q3"] == {"valid": False, "errors": ["answer: not JSON"], "n_errors": 1}
    assert validity["q4"]["errors"] == ["answer: not JSON"]  # an abstention is a response too
    assert validity["q5"] is None  # the target raised: no response to validate

    agg = result.metrics["aggregate_metrics"]
    # Valid: q1 of q1..q4 (q5 excluded, counted in n_errors).
    assert agg["response_valid_rate"] == 1 / 4 and agg["n"]["response_valid_rate"] == 4
    # Answered answerable cases q1, q2, q3 (q4 abstained and is unanswerable, q5 failed);
    # q1 has a reference, q3 a [1] marker, q2 neither.
    assert agg["has_citations_rate"] == 2 / 3 and agg["n"]["has_citations_rate"] == 3
    assert agg["operational_metrics"]["n_errors"] == 1

    by = result.metrics["by_language"]
    assert list(by) == ["de", "de->en", "en"]  # q5 has no language: in no cell
    assert by["en"]["n_cases"] == 1 and by["en"]["recall_at_k_avg"] == 1.0
    # q2 retrieved n/x.md (miss), q3 n/c.md (hit).
    assert by["de->en"]["n_cases"] == 2 and by["de->en"]["recall_at_k_avg"] == 0.5
    assert by["de"]["n_cases"] == 1 and by["de"]["abstention_accuracy"] == 1.0 and "recall_at_k_avg" not in by["de"]
    on_disk = orjson.loads((run_dir / "metrics.json").read_bytes())
    assert on_disk["by_language"] == by
    assert on_disk["aggregate_metrics"]["response_valid_rate"] == 1 / 4

    config = orjson.loads((run_dir / "config.json").read_bytes())
    hashed = config["hashed"]["response_validity"]
    assert hashed["field"] == "answer" and len(hashed["schema_sha256"]) == 64
