"""Editing the notes between two runs shows in compare (issue 30 item 4): one note edited and
one added used to give "the configs do not differ" and no warning, though the index stats said
docs_processed 6 -> 7 and another index_version."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from evalkit import run_eval
from evalkit.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def test_a_changed_corpus_is_in_the_config_diff_and_the_notes(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    shutil.copytree(ROOT / "sample_vault", vault)
    es, results = str(ROOT / "eval_set.jsonl"), str(tmp_path / "r")
    run_eval(es, vault=str(vault), run_id="a", results_dir=results, retrieval_only=True, quiet=True)
    note = next(vault.rglob("*.md"))
    note.write_text(note.read_text() + "\nOne more line.\n")
    (vault / "added.md").write_text("# Added\n\nA new note.\n")
    run_eval(es, vault=str(vault), run_id="b", results_dir=results, retrieval_only=True, quiet=True)

    out = CliRunner().invoke(app, ["compare", "a", "b", "--results-dir", results, "--format", "json"])
    body = json.loads(out.stdout)
    docs = body["config_diff"]["index.docs_processed"]
    assert docs[1] == docs[0] + 1  # by hand: one note added
    assert "index.index_version" in body["config_diff"]
    assert any("the notes or the index changed between the runs" in n for n in body["notes"])

    same = CliRunner().invoke(app, ["compare", "a", "a", "--results-dir", results, "--format", "json"])
    assert not any(k.startswith("index.") for k in json.loads(same.stdout)["config_diff"])
