"""`evalkit import --format mtrag` (issue 40 item 7): MTRAG's generation tasks become
conversations (`turns`) and their gold passages a notes folder, one note per source document
with a heading per passage.

The synthetic tests pin the mapping (turns from tasks and from `input`, answerability, tags)
and that a hostile passage (headings, setext underlines, an unclosed fence, `<script>`, `%%`)
stays one section and one run of chunks of its own. The real-data test imports
../shared/corpora/mtrag (SOURCE.md there) through the CLI, validates it, runs the reference
chatbot over the notes with live history, and recomputes Recall@5 per turn position and per
conversation from results.jsonl and the MTRAG file alone; skipped when the corpus is absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.errors import InputError
from evalkit.evalset.load import load_eval_set
from evalkit.interop.importers import import_cases
from evalkit.notes.markdown import read_note
from evalkit.reference.chunker import chunk_markdown

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
MTRAG = REPO_ROOT.parent / "shared" / "corpora" / "mtrag" / "generation_tasks.jsonl"
K = 5

HOSTILE = [
    "Intro line\n# Not a heading\nSetext title\n===\nmore\n---\n",
    "```python\nunclosed fence\n\n<script>\nalert(1)\n\n%% an Obsidian comment that never closes\n## Also not one",
    "> a quote\n- a list\n1. ordered\n[ref]: http://example.com\n    # indented\n| a | b |\n",
]


def _msg(speaker: str, text: str) -> dict:
    return {"speaker": speaker, "text": text}


def _task(cid: str, turn: int, messages: list[str], contexts: list[tuple[str, str]], answerability: str,
          multi: str = "Follow-up", collection: str = "govt", qtypes: tuple[str, ...] = ("Factoid",)) -> dict:
    return {
        "conversation_id": cid, "task_id": f"{cid}<::>{turn}", "turn": str(turn),
        "input": [_msg("user" if i % 2 == 0 else "agent", m) for i, m in enumerate(messages)],
        "contexts": [{"document_id": d, "text": t} for d, t in contexts],
        "targets": [{"speaker": "agent", "text": f"answer {turn}"}],
        "answerability": [answerability], "Multi-Turn": [multi], "Question Type": list(qtypes),
        "Collection": collection,
    }


def _write(path: Path, tasks: list[dict]) -> Path:
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    return path


def test_turns_come_from_the_tasks_and_from_the_input_before_them(tmp_path: Path) -> None:
    tasks = [
        _task("c1", 1, ["Q1?"], [("doc-a-0-10", "alpha text")], "ANSWERABLE", multi="N/A"),
        _task("c1", 3, ["Q1?", "A1.", "Q2?", "A2.", "Q3?"], [("doc-a-20-40", "beta text"), ("doc-b-0-5", "gamma")],
              "PARTIAL", multi="Clarification", qtypes=("Comparative", "Factoid")),
        _task("c2", 2, ["P1?", "B1.", "P2?"], [("doc-a-0-10", "alpha text")], "UNDERSPECIFIED", multi="N/A"),
        _task("c3", 1, ["Nothing?"], [], "UNANSWERABLE", multi="N/A", collection="fiqa"),
    ]
    cases = import_cases("mtrag", [_write(tmp_path / "t.jsonl", tasks)])
    by_id = {c.case["id"]: c for c in cases}
    assert list(by_id) == ["c1", "c2", "c3"]
    c1 = by_id["c1"].case
    assert (c1["tags"], c1["domain"]) == (["mtrag", "mtrag:govt"], "govt")
    first, second, third = c1["turns"]
    assert first["gold_supports"] == [{"rel_path": "govt/doc-a.md", "heading_path": "# doc-a-0-10"}]
    assert "follow_up" not in first and first["category"] == "factual" and first["expected_answer"] == "answer 1"
    # Turn 2 has no task: its question and answer come from turn 3's input; asked, never scored.
    assert second == {"question": "Q2?", "answerable": True, "expected_answer": "A2.", "category": "factual",
                      "tags": ["no-gold"]}
    assert third["question"] == "Q3?" and third["answerable"] is True and third["follow_up"] == "clarification"
    assert third["gold_supports"] == [{"rel_path": "govt/doc-a.md", "heading_path": "# doc-a-20-40"},
                                      {"rel_path": "govt/doc-b.md", "heading_path": "# doc-b-0-5"}]
    assert third["category"] == "reasoning" and third["tags"] == ["mtrag:partial", "qtype:comparative", "qtype:factoid"]
    # UNDERSPECIFIED: not answerable, its passages named but not scored; UNANSWERABLE: no passage.
    under = by_id["c2"].case["turns"][1]
    assert under["answerable"] is False and "gold_supports" not in under
    assert under["mtrag"]["document_ids"] == ["doc-a-0-10"] and under["mtrag"]["answerability"] == "UNDERSPECIFIED"
    assert by_id["c3"].case["turns"][0]["answerable"] is False
    # Each note once, on the first conversation citing it; passages in offset order.
    assert sorted(by_id["c1"].files) == ["govt/doc-a.md", "govt/doc-b.md"] and not by_id["c2"].files
    assert [h.path for h in read_note(by_id["c1"].files["govt/doc-a.md"]).headings] == ["# doc-a-0-10", "# doc-a-20-40"]
    # The set loads: 3 + 2 + 1 turn cases.
    out = tmp_path / "es.jsonl"
    out.write_text("".join(json.dumps(c.case) + "\n" for c in cases))
    assert len(load_eval_set([out]).cases) == 6


def test_a_hostile_passage_stays_its_own_section_and_chunks(tmp_path: Path) -> None:
    contexts = [(f"doc-x-{i * 100}-{i * 100 + 99}", text) for i, text in enumerate(HOSTILE)]
    cases = import_cases("mtrag", [_write(tmp_path / "t.jsonl", [_task("c", 1, ["Q?"], contexts, "ANSWERABLE")])])
    note = cases[0].files["govt/doc-x.md"]
    headings = [f"# {d}" for d, _ in contexts]
    assert [h.path for h in read_note(note).headings] == headings
    chunks = chunk_markdown(note.encode(), "govt/doc-x.md").chunks
    assert sorted({c.heading_path for c in chunks}) == headings  # each passage chunked, nothing else
    for heading, (_, text) in zip(headings, contexts):
        body = "".join(c.text for c in chunks if c.heading_path == heading).replace("\\", "")
        for line in filter(str.strip, text.split("\n")):
            assert line in body, line  # every line of the passage, as written (the escapes aside)


def test_a_passage_given_twice_keeps_its_first_text_and_says_so(tmp_path: Path) -> None:
    tasks = [_task("c1", 1, ["Q?"], [("doc-a-0-10", "first text")], "ANSWERABLE"),
             _task("c2", 1, ["R?"], [("doc-a-0-10", "second text")], "ANSWERABLE")]
    cases = import_cases("mtrag", [_write(tmp_path / "t.jsonl", tasks)])
    assert "first text" in cases[0].files["govt/doc-a.md"] and not cases[1].files
    assert len(cases[0].warnings) == 1 and "t.jsonl:2: passage 'doc-a-0-10' has another text at" in cases[0].warnings[0]


def test_the_cli_asks_for_a_notes_folder_and_names_the_passages(tmp_path: Path) -> None:
    from evalkit.cli.main import app

    source = _write(tmp_path / "t.jsonl", [_task("c1", 1, ["Q?"], [("doc-a-0-10", "text")], "ANSWERABLE")])
    done = CliRunner().invoke(app, ["import", "--format", "mtrag", str(source), "--output", str(tmp_path / "es.jsonl")])
    assert done.exit_code == 2 and "--format mtrag writes the fixtures' gold passages as notes (1 here)" in done.output
    assert not (tmp_path / "es.jsonl").exists()


def test_a_bad_task_is_named_by_line_and_field(tmp_path: Path) -> None:
    bad = _task("c", 2, ["Q1?", "A1."], [], "ANSWERABLE")  # turn 2 needs 3 messages
    worse = {**_task("d", 1, ["Q?"], [], "ANSWERABLE"), "answerability": ["MAYBE"]}
    with pytest.raises(InputError) as err:
        import_cases("mtrag", [_write(tmp_path / "t.jsonl", [bad, worse])])
    got = {(p.line, p.field) for p in err.value.problems}
    assert got == {(1, "input"), (2, "answerability")}


@pytest.mark.skipif(not MTRAG.is_file(), reason=f"MTRAG not found at {MTRAG}")
def test_mtrag_imports_validates_and_runs_with_recall_at_5_per_turn_as_computed_here(tmp_path: Path) -> None:
    from evalkit.cli.main import app
    from evalkit.run.runner import run

    eval_set, vault = tmp_path / "mtrag.jsonl", tmp_path / "notes"
    runner = CliRunner()
    done = runner.invoke(app, ["import", "--format", "mtrag", str(MTRAG), "--output", str(eval_set),
                               "--vault-out", str(vault)], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert "365 conversations" in done.output and "637 notes" in done.output
    checked = runner.invoke(app, ["validate", "--eval-set", str(eval_set), "--vault", str(vault)], catch_exceptions=False)
    assert checked.exit_code == 0, checked.output
    assert "all found" in checked.output

    # Each passage is its own run of chunks in the reference chatbot's index: every chunk under
    # one passage's heading, every passage with a chunk, nothing skipped.
    headings: dict[str, set[str]] = {}
    for line in MTRAG.read_text(encoding="utf-8").splitlines():
        task = json.loads(line)
        for c in task["contexts"]:
            rel = f"{task['Collection']}/{c['document_id'].rsplit('-', 2)[0]}.md"
            headings.setdefault(rel, set()).add(f"# {c['document_id']}")
    assert sorted(p.relative_to(vault).as_posix() for p in vault.rglob("*.md")) == sorted(headings)
    for rel, want in headings.items():
        doc = chunk_markdown((vault / rel).read_bytes(), rel)
        assert not doc.skipped and {c.heading_path for c in doc.chunks} == want, rel

    result = run({"vault": str(vault), "eval_set": [str(eval_set)], "retrieval_only": True, "k": [K],
                  "results_dir": str(tmp_path / "results"), "concurrency": 4})
    assert result.success and result.n_errors == 0
    metrics = json.loads((result.run_dir / "metrics.json").read_text())
    records = {r["test_case_id"]: r for r in map(json.loads, (result.run_dir / "results.jsonl").read_text().splitlines())}

    # Independently: the gold of each MTRAG task (its passages, when ANSWERABLE or PARTIAL) and a
    # hit when one of the top K chunks is under that passage's heading in its document's note.
    hits: dict[str, list[tuple[str, int]]] = {"first": [], "follow-up": []}
    per_conversation: dict[str, list[int]] = {}
    by_case: dict[str, int] = {}
    for line in MTRAG.read_text(encoding="utf-8").splitlines():
        task = json.loads(line)
        if task["answerability"][0] not in ("ANSWERABLE", "PARTIAL") or not task["contexts"]:
            continue
        gold = {(f"{task['Collection']}/{c['document_id'].rsplit('-', 2)[0]}.md", f"# {c['document_id']}")
                for c in task["contexts"]}
        assert all((vault / rel).is_file() for rel, _ in gold)
        chunks = records[f"{task['conversation_id']}#{int(task['turn'])}"]["retrieved_chunks"][:K]
        hit = int(any((c["rel_path"], c["heading_path"]) in gold for c in chunks))
        hits["first" if int(task["turn"]) == 1 else "follow-up"].append((task["conversation_id"], hit))
        by_case[f"{task['conversation_id']}#{int(task['turn'])}"] = hit
        per_conversation.setdefault(task["conversation_id"], []).append(hit)
    for position, got in hits.items():
        ours = metrics["by_turn"][position]
        assert ours["n"]["recall_at_k_avg"] == len(got)
        assert ours["recall_at_k_avg"] == pytest.approx(sum(h for _, h in got) / len(got), abs=1e-12)
    conv = metrics["conversations"]
    means = [sum(v) / len(v) for v in per_conversation.values()]
    assert conv["n"]["recall_at_k_avg"] == len(means) and conv["n_conversations"] == 365
    assert conv["recall_at_k_avg"] == pytest.approx(sum(means) / len(means), abs=1e-12)
    # Each scored turn's record holds the hit computed here, and no other turn is scored.
    scored = {k: r["retrieval_metrics"]["recall_at_k"] for k, r in records.items()
              if r["retrieval_metrics"]["status"] == "scored"}
    assert scored == by_case
