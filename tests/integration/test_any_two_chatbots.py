"""Issue 36 item 7, end to end: any two chatbots compare.

Three Python targets answer the same four cases with the same chunks. `full` sends every
contract field; `lean` leaves out the debug-only `score_vector` and `token_count`; `no_text`
leaves out the chunks' text. Before, compare_runs refused both pairs with exit 2 ("debug
payload fields differ") and `--ignore-invariants` marked every retrieval metric not comparable.
Now the lean pair compares like any other (no metric reads those fields), and the no-text pair
loses only what reads chunk text: with snippets required, the retrieval metrics, named with
the field and the side.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app

pytestmark = pytest.mark.integration

CASES = [
    {"id": "q1", "question": "How do I water tomatoes?", "answerable": True,
     "gold_supports": [{"rel_path": "garden/tomatoes.md", "heading_path": "# Tomatoes > ## Watering",
                        "snippets": ["twice a week"]}]},
    {"id": "q2", "question": "When do I prune tomatoes?", "answerable": True,
     "gold_supports": [{"rel_path": "garden/tomatoes.md", "heading_path": "# Tomatoes > ## Pruning",
                        "snippets": ["suckers"]}]},
    {"id": "q3", "question": "How hot should the oven be for bread?", "answerable": True,
     "gold_supports": [{"rel_path": "kitchen/bread.md", "heading_path": "# Bread", "snippets": ["250 degrees"]}]},
    {"id": "q4", "question": "Who won the 1930 world cup?", "answerable": False},
]

BOT = textwrap.dedent(
    '''
    _NOTES = {
        "water": ("garden/tomatoes.md", "# Tomatoes > ## Watering", "Water deeply twice a week in summer."),
        "prune": ("garden/tomatoes.md", "# Tomatoes > ## Pruning", "Remove suckers below the first flowers."),
        "oven": ("kitchen/bread.md", "# Bread", "Bake at 250 degrees for forty minutes."),
    }

    def _reply(question, drop=()):
        hits = [v for key, v in _NOTES.items() if key in question]
        chunks = []
        for rank, (path, heading, text) in enumerate(hits, start=1):
            chunk = {"chunk_id": f"{path}#{rank}", "rel_path": path, "heading_path": heading, "start_line": 1,
                     "end_line": 3, "score_vector": 0.9, "score_lexical": 0.5, "score_final": 1.0, "text": text,
                     "rank": rank, "token_count": 9}
            chunks.append({k: v for k, v in chunk.items() if k not in drop})
        refs = [{k: c[k] for k in ("chunk_id", "rel_path", "heading_path", "start_line", "end_line")} for c in chunks[:1]]
        return {"answer": "See [1]." if chunks else "I don't know.", "references": refs, "abstained": not chunks,
                "abstain_reason": None if chunks else "nothing found",
                "debug": {"retrieved_chunks": chunks, "timings_ms": {"retrieval": 1.0, "generation": 1.0},
                          "versions": {}}}

    def full(request):
        return _reply(request["question"])

    def lean(request):  # a chatbot without the debug-only fields
        return _reply(request["question"], drop=("score_vector", "token_count"))

    def no_text(request):
        return _reply(request["question"], drop=("text",))
    '''
)


def _invoke(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bots")
    es = root / "cases.jsonl"
    es.write_text("".join(json.dumps(c) + "\n" for c in CASES))
    (root / "bot.py").write_text(BOT)
    results = root / "results"
    for run_id, fn, extra in (("full", "full", ()), ("lean", "lean", ()), ("full-s", "full", ("--require-snippets",)),
                              ("no-text-s", "no_text", ("--require-snippets",))):
        res = _invoke("run", "--eval-set", es, "--target", f"python:{root / 'bot.py'}:{fn}", "--retrieval-only",
                      "--no-probe", "--results-dir", results, "--run-id", run_id, "--quiet", *extra)
        assert res.exit_code == 0, res.output
    return {"root": root, "es": es, "results": results}


def _compare(runs: dict[str, Path], a: str, b: str, *flags: str):
    return _invoke("compare", a, b, "--results-dir", runs["results"], "--format", "json", *flags)


def test_the_runs_record_what_each_target_left_out(runs: dict[str, Path]) -> None:
    def invariants(run_id: str) -> dict:
        return json.loads((runs["results"] / run_id / "metrics.json").read_text())["invariants"]

    # both leave out the versions' leaves (`versions: {}`); lean also the two debug-only fields
    full, lean = set(invariants("full")["debug_fields_missing"]), set(invariants("lean")["debug_fields_missing"])
    assert all(f.startswith("debug.versions.") for f in full)
    assert sorted(lean - full) == ["debug.retrieved_chunks[].score_vector", "debug.retrieved_chunks[].token_count"]
    # the labels use anchors with snippets; a run records "snippets" only when it required them
    assert invariants("full")["gold_forms"] == ["anchor"]
    assert invariants("full-s")["gold_forms"] == ["anchor", "snippets"]


def test_a_chatbot_without_debug_only_fields_compares(runs: dict[str, Path]) -> None:
    res = _compare(runs, "full", "lean")
    assert res.exit_code == 0, res.output  # was 2: "debug payload fields differ"
    out = json.loads(res.stdout)
    assert out["invariants"]["ok"] and out["invariants"]["violations"] == [] and out["invariants"]["warnings"] == []
    assert all(row["comparable"] for row in out["deltas"])
    notes = [n for n in out["notes"] if "target leaves out" in n]
    assert notes == [
        "the new run's target leaves out debug.retrieved_chunks[].score_vector (the baseline's sends it): no metric "
        "reads it (chunk scores are shown, never scored); nothing is blocked",
        "the new run's target leaves out debug.retrieved_chunks[].token_count (the baseline's sends it): no metric "
        "either run measured reads it (fact_retention: the token budget counts it (ceil(len(text) / 4) without it)); "
        "nothing is blocked",
    ]


def test_run_eval_gates_the_lean_chatbot_against_the_full_one(runs: dict[str, Path]) -> None:
    res = _invoke("run", "--eval-set", runs["es"], "--target", f"python:{runs['root'] / 'bot.py'}:lean",
                  "--retrieval-only", "--no-probe", "--results-dir", runs["results"], "--run-id", "lean-gated",
                  "--quiet", "--baseline", "full")
    assert res.exit_code == 0, res.output
    gate = json.loads((runs["results"] / "lean-gated" / "metrics.json").read_text())["gate"]
    assert gate["passed"] and gate["invariants"]["violations"] == []


def test_a_chatbot_without_chunk_text_loses_only_what_reads_it(runs: dict[str, Path]) -> None:
    why = ("the new run's target leaves out debug.retrieved_chunks[].text (the baseline's sends it): required gold "
           "snippets are searched in it")
    res = _compare(runs, "full-s", "no-text-s", "--gate", "threshold")
    assert res.exit_code == 1, res.output  # the gate cannot say retrieval held: exit 1, not 2
    out = json.loads(res.stdout)
    assert out["invariants"]["violations"] == []
    assert out["gate"]["failures"] == [
        f"recall_at_k_avg not compared: {why} (--allow-missing-metrics gates without it)",
        f"mrr_avg not compared: {why} (--allow-missing-metrics gates without it)",
    ]
    rows = {(r["metric"], r["scope"]): r for r in out["deltas"] if r["k"] in (5, None)}
    assert rows[("recall_any", "overall")]["comparable"] is False
    assert rows[("recall_any", "overall")]["note"] == f"not comparable: {why}"
    # references carry no text: attribution (and abstention) are compared
    assert rows[("attribution_hit_rate", "overall")]["comparable"] is True
    assert rows[("abstention_accuracy", "overall")]["comparable"] is True
    assert f"{why}; not compared: recall_at_k_avg, mrr_avg" in out["invariants"]["warnings"][0]
    allowed = _compare(runs, "full-s", "no-text-s", "--gate", "threshold", "--allow-missing-metrics")
    assert allowed.exit_code == 0, allowed.output
