"""A chatbot that speaks the contract wrongly is told so by the run itself (issue 26 item 2).

The bots are Python callables answering the right notes in LlamaIndex's stock forms. By hand:
with `/A/B/` heading paths no chunk can match an anchor with a heading, so every retrieval metric
is 0 and the run must say why and exit 2; with a repeated chunk id the second chunk is a
duplicate, so the run measures less and must say so (exit 0: it measured something)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import make_case, run_eval_cli, write_eval_set

GOLD = [{"rel_path": "notes/alpha.md", "heading_path": "# Alpha > ## Setup"}]

BOT = '''
def ask(request):
    chunks = [
        {{"chunk_id": "x", "rel_path": "notes/alpha.md", "heading_path": {first!r}, "text": "## Setup\\n\\nsteps", "rank": 1}},
        {{"chunk_id": {second_id!r}, "rel_path": "notes/alpha.md", "heading_path": "# Alpha", "text": "# Alpha\\n\\nintro", "rank": 2}},
    ]
    return {{"answer": "Run setup.", "abstained": False, "debug": {{"retrieved_chunks": chunks}}}}
'''


def _run(tmp_path: Path, first: str, second_id: str, *extra: str):
    bot = tmp_path / "bot.py"
    bot.write_text(BOT.format(first=first, second_id=second_id))
    es = write_eval_set(tmp_path / "es.jsonl", [make_case(i, question=f"q{i}", gold_supports=GOLD) for i in range(3)])
    return run_eval_cli(*extra, eval_set=es, target=f"python:{bot}:ask", results_dir=tmp_path / "r",
                        retrieval_only=True, json=True)


def test_llamaindex_heading_paths_are_named_and_the_run_exits_2(tmp_path: Path) -> None:
    out = _run(tmp_path, "/Alpha/", "y")
    assert out.exit_code == 2, out.output
    # before the first case: the probe's answer already broke the rule
    assert "the target's first answer breaks the contract" in out.stderr
    assert "'/Alpha/' is '/'-separated and has no # levels" in out.stderr
    payload = json.loads(out.stdout.strip().splitlines()[-1])
    kinds = {w["kind"]: w for w in payload["warnings"]}
    assert kinds["retrieval_unmeasurable"]["severity"] == "error"
    assert kinds["contract_heading_path_form"]["n"] == 3 and kinds["contract_heading_path_form"]["of"] == 3
    assert payload["unmeasurable"] is True and payload["success"] is False
    assert "retrieval was not measured" in out.stderr and "--allow-format-mismatch" in out.stderr
    assert payload["aggregate_metrics"]["recall_at_k_avg"] == 0.0  # the run is kept, and says why it is 0


def test_allow_format_mismatch_accepts_the_run(tmp_path: Path) -> None:
    out = _run(tmp_path, "/Alpha/", "y", "--allow-format-mismatch")
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout.strip().splitlines()[-1])
    assert payload["unmeasurable"] is False
    assert "retrieval_unmeasurable" in {w["kind"] for w in payload["warnings"]}  # still said


def test_repeated_chunk_ids_are_named(tmp_path: Path) -> None:
    out = _run(tmp_path, "# Alpha > ## Setup", "x")
    assert out.exit_code == 0, out.output  # the first chunk matched: retrieval was measured
    payload = json.loads(out.stdout.strip().splitlines()[-1])
    kinds = {w["kind"]: w for w in payload["warnings"]}
    assert "chunk_id 'x' at positions 1 and 2" in kinds["contract_chunk_id_unique"]["message"]
    assert "retrieval_unmeasurable" not in kinds
    # by hand: position 1 matches, position 2 is a duplicate: precision@5 = 1/5 per case
    assert payload["aggregate_metrics"]["recall_at_k_avg"] == 1.0
