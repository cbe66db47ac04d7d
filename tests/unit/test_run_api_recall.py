"""`RunResult.data["recall_at_k"]` is the number every results.jsonl record's `recall_at_k` is
(issue 37 item 3, "one name per number"): seed 000's Recall@K, the hit rate, averaged over the
records that have one. B.O.B's fractional recall is `data["recall_frac"]`, by its registry name.
On the 12 bundled cases the API used to say 0.833 (recall_frac) where the records average 0.917.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from evalkit import run_eval
from evalkit.metrics.registry import METRICS

# Each case has two gold notes, a.md and b.md; the bot returns, per case:
BOT = textwrap.dedent(
    '''
    RETURNS = {"0": ["a", "b"], "1": ["a", "x"], "2": ["x", "y"], "3": ["x"]}

    async def ask(request):
        names = RETURNS[request["question"].split()[-1]]
        chunks = [
            {"chunk_id": f"c-{name}", "rel_path": f"notes/{name}.md", "heading_path": "# H", "start_line": 1,
             "end_line": 2, "score_final": 1.0 / (i + 1), "text": f"note {name}", "rank": i + 1}
            for i, name in enumerate(names)
        ]
        ref = {k: chunks[0][k] for k in ("chunk_id", "rel_path", "heading_path")}
        return {"answer": "See [1].", "references": [ref], "abstained": False, "debug": {"retrieved_chunks": chunks}}
    '''
)


@pytest.fixture
def small_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bot.py").write_text(BOT)
    gold = [{"rel_path": "notes/a.md", "heading_path": "# H"}, {"rel_path": "notes/b.md", "heading_path": "# H"}]
    cases = [{"id": f"q{i}", "question": f"case {i}", "answerable": True, "gold_supports": gold} for i in range(3)]
    cases.append({"id": "q3", "question": "case 3", "answerable": False, "gold_supports": []})
    (tmp_path / "es.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    result = run_eval(eval_set=str(tmp_path / "es.jsonl"), target=f"python:{tmp_path / 'bot.py'}:ask",
                      retrieval_only=True, results_dir=str(tmp_path / "results"), k=5)
    records = [json.loads(line) for line in (result.run_dir / "results.jsonl").read_text().splitlines()]
    return result, records


def test_the_apis_recall_is_the_mean_of_the_records_recall_at_k(small_run) -> None:
    result, records = small_run
    per_case = [r["retrieval_metrics"]["recall_at_k"] for r in records]
    # by hand: q0 finds a and b (hit), q1 finds a (hit), q2 finds neither (miss), q3 is unanswerable (null)
    assert per_case == [1.0, 1.0, 0.0, None]
    hits = [v for v in per_case if v is not None]
    assert result.data["recall_at_k"] == pytest.approx(sum(hits) / len(hits)) == pytest.approx(2 / 3)
    assert result.data["recall_at_k"] == result.data["recall_any"] == result.metrics["aggregate_metrics"]["recall_at_k_avg"]
    # B.O.B's recall, |gold found| / |gold|: (2/2 + 1/2 + 0/2) / 3 = 1/2, by its own name only
    assert result.data["recall_frac"] == pytest.approx(1 / 2) == result.metrics["aggregate_metrics"]["recall_frac_avg"]


def test_data_holds_seed_001s_names_and_every_at_k_metric_by_its_registry_name(small_run) -> None:
    result, _ = small_run
    agg = result.metrics["aggregate_metrics"]
    at_k = [m for m in METRICS if m.at_k is not None]
    assert set(result.data) == {"recall_at_k", "precision_at_k", "mrr", "k", *(m.at_k for m in at_k)}
    for m in at_k:
        assert result.data[m.at_k] == agg["at_k"]["5"][m.at_k], m.at_k
    assert result.data["precision_at_k"] == result.data["precision"] and result.data["k"] == 5
    # no name in .data means something else in metrics.json's aggregate
    assert "recall_at_k_avg" not in result.data
