"""`evalkit import --format beir DIR --split S --vault OUT`: a BEIR folder -> a vault + an eval set.

The tiny BEIR folder of `beir_dir`: three documents (one with a title, one without, one
whose id has a slash and upper case), three queries (q-2/b is judged only in the train
split), graded test qrels with a score-0 judgment (dropped).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app as main_app
from evalkit.errors import BadConfig, InputError
from evalkit.evalset.load import load_eval_set
from evalkit.interop.importers import FORMATS, get_converter
from evalkit.interop.importers.beir import import_beir, note_path, note_text
from evalkit.interop.importers.output import VAULT_MARKER

CORPUS = [
    {"_id": "doc1", "title": "Tomatoes", "text": "Water tomato plants deeply twice a week."},
    {"_id": "doc2", "title": "", "text": "Feed the sourdough starter the night before."},
    {"_id": "PMC/77 a", "title": "Bread  baking\n notes", "text": "Bake at 250 degrees."},
]
QUERIES = [
    {"_id": "q1", "text": "How often should tomatoes be watered?"},
    {"_id": "q-2/b", "text": "When is the starter fed?"},  # judged in train only: not in the test split
    {"_id": "q3", "text": "At what temperature is bread baked?"},
]
QRELS_TEST = "query-id\tcorpus-id\tscore\nq1\tdoc1\t2\nq1\tPMC/77 a\t1\nq1\tdoc2\t0\nq3\tPMC/77 a\t1\n"
QRELS_TRAIN = "query-id\tcorpus-id\tscore\nq-2/b\tdoc2\t1\n"


def _jsonl(path: Path, items: list[object]) -> None:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in items), encoding="utf-8")


@pytest.fixture
def beir_dir(tmp_path: Path) -> Path:
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    _jsonl(root / "corpus.jsonl", CORPUS)
    _jsonl(root / "queries.jsonl", QUERIES)
    (root / "qrels" / "test.tsv").write_text(QRELS_TEST)
    (root / "qrels" / "train.tsv").write_text(QRELS_TRAIN)
    return root


def test_note_path_is_the_id_when_safe_else_a_slug_and_a_hash() -> None:
    assert note_path("4983") == "4983.md"
    assert note_path("doc1") == "doc1.md"
    slashed = note_path("PMC/77 a")
    assert slashed.startswith("pmc-77-a-") and slashed.endswith(".md") and "/" not in slashed
    # ids differing only in case get different files (case-insensitive disks)
    assert note_path("Doc1") != note_path("doc1")
    assert note_path("///").startswith("doc-")


def test_note_text_heads_a_titled_note_and_leaves_an_untitled_one_as_the_text() -> None:
    assert note_text("Bread  baking\n notes", "Bake.") == "# Bread baking notes\n\nBake.\n"
    assert note_text("", "Just text.") == "Just text.\n"
    assert note_text(None, "Just text.\n") == "Just text.\n"


def test_import_writes_one_note_per_document_and_the_judged_queries(beir_dir: Path, tmp_path: Path) -> None:
    vault, out = tmp_path / "vault", tmp_path / "es.jsonl"
    done = import_beir(beir_dir, vault_out=vault, output=out)

    assert (done.n_docs, done.n_judgments, done.skipped_queries, done.warnings) == (3, 3, 1, ())
    notes = sorted(p.name for p in vault.iterdir())
    assert notes == sorted([VAULT_MARKER, "doc1.md", "doc2.md", note_path("PMC/77 a")])
    assert (vault / "doc1.md").read_text() == "# Tomatoes\n\nWater tomato plants deeply twice a week.\n"
    assert (vault / "doc2.md").read_text() == "Feed the sourdough starter the night before.\n"
    marker = json.loads((vault / VAULT_MARKER).read_text())
    assert (marker["split"], marker["cases"], marker["notes"]) == ("test", 2, 3)

    cases = [json.loads(x) for x in out.read_text().splitlines()]
    assert [c["id"] for c in cases] == ["q1", "q3"]  # queries.jsonl order; q-2/b has no test judgment
    assert cases[0]["question"] == "How often should tomatoes be watered?"
    assert cases[0]["tags"] == ["beir", "beir:tiny"]
    assert cases[0]["gold_supports"] == [  # qrels order; the score-0 judgment of doc2 is dropped
        {"rel_path": "doc1.md", "heading_path": "", "relevance": 2, "doc_id": "doc1"},
        {"rel_path": note_path("PMC/77 a"), "heading_path": "", "relevance": 1, "doc_id": "PMC/77 a"},
    ]
    eval_set = load_eval_set([out])
    assert [c.gold_supports[0].relevance for c in eval_set.cases] == [2.0, 1.0]


def test_split_train_and_tags(beir_dir: Path, tmp_path: Path) -> None:
    from evalkit.interop.importers.base import ImportOptions

    done = import_beir(beir_dir, vault_out=tmp_path / "v", output=tmp_path / "es.jsonl", split="train",
                       options=ImportOptions(category="reasoning", tags=("scifact",)))
    (case,) = [c.case for c in done.cases]
    assert (case["id"], case["category"], case["tags"]) == ("q-2/b", "reasoning", ["beir", "beir:tiny", "scifact"])


def test_unknown_documents_and_queries_in_qrels_are_warnings_and_dropped(beir_dir: Path, tmp_path: Path) -> None:
    (beir_dir / "qrels" / "test.tsv").write_text(QRELS_TEST + "q3\tghost\t1\nq9\tdoc1\t1\nq1\tdoc1\t1\n")
    done = import_beir(beir_dir, vault_out=tmp_path / "v", output=tmp_path / "es.jsonl")
    qrels = beir_dir / "qrels" / "test.tsv"
    assert sorted(done.warnings) == sorted([
        f"{qrels}:8: query 'q1' judges 'doc1' again (line 2 kept)",
        f"{qrels}: query 'q9' is judged but not in queries.jsonl; its judgments are dropped",
        f"{qrels}:6: document 'ghost' is not in corpus.jsonl; judgment dropped",
    ])
    assert [len(c.case["gold_supports"]) for c in done.cases] == [2, 1]


def test_a_query_left_without_judged_documents_is_not_imported(beir_dir: Path, tmp_path: Path) -> None:
    (beir_dir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tdoc1\t1\nq3\tghost\t1\n")
    done = import_beir(beir_dir, vault_out=tmp_path / "v", output=tmp_path / "es.jsonl")
    assert [c.case["id"] for c in done.cases] == ["q1"]
    assert f"{beir_dir / 'queries.jsonl'}:3: query 'q3' has no judged document in the corpus; not imported" in done.warnings


def _problems(excinfo: pytest.ExceptionInfo[InputError]) -> list[str]:
    return [str(p) for p in excinfo.value.problems]


def test_missing_files_are_all_named(tmp_path: Path) -> None:
    with pytest.raises(InputError) as e:
        import_beir(tmp_path / "nope", vault_out=tmp_path / "v", output=tmp_path / "es.jsonl")
    assert _problems(e) == [f"{tmp_path / 'nope'}: BEIR folder not found (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)"]

    (tmp_path / "d" / "qrels").mkdir(parents=True)
    (tmp_path / "d" / "qrels" / "train.tsv").write_text(QRELS_TRAIN)
    with pytest.raises(InputError) as e:
        import_beir(tmp_path / "d", vault_out=tmp_path / "v", output=tmp_path / "es.jsonl")
    d = tmp_path / "d"
    assert _problems(e) == [
        f"{d / 'corpus.jsonl'}: not found",
        f"{d / 'queries.jsonl'}: not found",
        f"{d / 'qrels' / 'test.tsv'}: --split: not found (split 'test'; splits here: train)",
    ]
    assert not (tmp_path / "v").exists() and not (tmp_path / "es.jsonl").exists()


def test_bad_lines_are_named_by_file_and_line_and_nothing_is_written(beir_dir: Path, tmp_path: Path) -> None:
    corpus, queries, qrels = beir_dir / "corpus.jsonl", beir_dir / "queries.jsonl", beir_dir / "qrels" / "test.tsv"
    _jsonl(corpus, [CORPUS[0], '{"_id": "doc2", "text": ', [1], {"title": "t", "text": "x"}, CORPUS[0], *CORPUS[1:],
                    {"_id": "doc9", "title": 3, "text": "x"}, {"_id": "doc8", "text": None}])
    _jsonl(queries, [QUERIES[0], {"_id": "q3", "text": ""}, QUERIES[0]])
    qrels.write_text(QRELS_TEST + "q1 doc1 1\nq1\tdoc2\thigh\n")
    vault, out = tmp_path / "vault", tmp_path / "es.jsonl"
    with pytest.raises(InputError) as e:
        import_beir(beir_dir, vault_out=vault, output=out)
    assert _problems(e) == [
        f"{qrels}:6: expected 3 tab-separated fields (query-id, corpus-id, score), got 1",
        f"{qrels}:7: score 'high' is not a number",
        f"{queries}:2: text: expected a non-empty string, got ''",
        f"{queries}:3: _id: query id 'q1' duplicates line 1",
    ]
    # the qrels and queries were fine: the corpus problems, all of them
    qrels.write_text(QRELS_TEST)
    _jsonl(queries, QUERIES)
    with pytest.raises(InputError) as e:
        import_beir(beir_dir, vault_out=vault, output=out)
    assert _problems(e) == [
        f"{corpus}:2: not valid JSON (unexpected end of data, column 25)",  # orjson's words (jsonio)
        f"{corpus}:3: expected a JSON object, got list",
        f"{corpus}:4: _id: expected a non-empty string, got None",
        f"{corpus}:5: _id: document id 'doc1' duplicates line 1",
        f"{corpus}:8: title: expected a string, got 3",
        f"{corpus}:9: text: expected a string, got None",
    ]
    assert not vault.exists() and not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".vault")] == []  # temp folder removed


def test_an_occupied_vault_is_refused_and_force_replaces_only_an_import(beir_dir: Path, tmp_path: Path) -> None:
    vault, out = tmp_path / "vault", tmp_path / "es.jsonl"
    import_beir(beir_dir, vault_out=vault, output=out)
    with pytest.raises(BadConfig, match="already exists; pass --force"):
        import_beir(beir_dir, vault_out=vault, output=out)
    with pytest.raises(BadConfig, match="non-empty folder; pass --force"):
        import_beir(beir_dir, vault_out=vault, output=tmp_path / "other.jsonl")
    (beir_dir / "corpus.jsonl").write_text(json.dumps(CORPUS[0]) + "\n")  # doc2 and PMC/77 a are gone
    (beir_dir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tdoc1\t1\n")
    import_beir(beir_dir, vault_out=vault, output=out, force=True)
    assert sorted(p.name for p in vault.iterdir()) == sorted([VAULT_MARKER, "doc1.md"])

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.md").write_text("mine")
    with pytest.raises(BadConfig, match="did not write"):
        import_beir(beir_dir, vault_out=mine, output=tmp_path / "x.jsonl", force=True)
    with pytest.raises(BadConfig, match="inside the vault folder"):
        import_beir(beir_dir, vault_out=tmp_path / "v2", output=tmp_path / "v2" / "es.jsonl")
    assert (mine / "keep.md").read_text() == "mine"


def test_the_plain_converter_points_at_import_beir() -> None:
    assert "beir" in FORMATS
    with pytest.raises(BadConfig, match="import_beir"):
        get_converter("beir")([], None)  # type: ignore[arg-type]


def test_imports_five_thousand_documents(tmp_path: Path) -> None:
    # How long it takes is bench/README.md's "SciFact (BEIR)" row (5,183 documents), not a test.
    root = tmp_path / "big"
    (root / "qrels").mkdir(parents=True)
    with open(root / "corpus.jsonl", "w") as f:
        for i in range(5000):
            f.write(json.dumps({"_id": f"d{i}", "title": f"Doc {i}", "text": "word " * 200}) + "\n")
    _jsonl(root / "queries.jsonl", [{"_id": "q", "text": "word"}])
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\td4999\t1\n")
    done = import_beir(root, vault_out=tmp_path / "v", output=tmp_path / "es.jsonl")
    assert done.n_docs == 5000 and len(list((tmp_path / "v").glob("*.md"))) == 5000
    (case,) = load_eval_set([tmp_path / "es.jsonl"]).cases
    assert [s.rel_path for s in case.gold_supports] == [note_path("d4999")]


def test_cli(beir_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    args = ["import", "--format", "beir", str(beir_dir)]

    res = runner.invoke(main_app, args)
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "evalkit: --vault: --format beir writes one note per corpus document and needs a folder for them: "
        "pass --vault DIR (a new or empty folder)"
    )
    res = runner.invoke(main_app, ["import", "--format", "gno", str(beir_dir), "--split", "train"])
    assert res.exit_code == 2 and "--split is for --format beir, not 'gno'" in res.stderr
    res = runner.invoke(main_app, [*args, str(beir_dir), "--vault", "v"])
    assert res.exit_code == 2 and "takes one BEIR folder, got 2 paths" in res.stderr
    res = runner.invoke(main_app, [*args, "--vault", "v", "--split", "dev"])
    assert res.exit_code == 2 and "--split: not found (split 'dev'; splits here: test, train)" in res.stderr

    res = runner.invoke(main_app, [*args, "--vault", "vault", "--output", "es.jsonl"])
    assert res.exit_code == 0, res.output
    assert res.stderr == ""
    assert res.stdout.splitlines() == [
        "evalkit: wrote 2 cases (test split) to es.jsonl: 3 gold supports; 1 queries without judgments in the split skipped",
        "evalkit: wrote 3 notes to vault; run them with: evalkit run --eval-set es.jsonl --vault vault --retrieval-only",
    ]
    res = runner.invoke(main_app, [*args, "--vault-out", "vault", "--output", "es.jsonl", "--split", "train", "--force"])
    assert res.exit_code == 0, res.output
    assert [json.loads(x)["id"] for x in (tmp_path / "es.jsonl").read_text().splitlines()] == ["q-2/b"]

    (beir_dir / "qrels" / "test.tsv").write_text(QRELS_TEST + "q3\tghost\t1\n")
    res = runner.invoke(main_app, [*args, "--vault", "vault", "--output", "es.jsonl", "--force"])
    assert res.exit_code == 0, res.output
    assert "evalkit: warning: " in res.stderr and "document 'ghost' is not in corpus.jsonl" in res.stderr


def test_a_case_evalkit_rejects_is_named_by_its_queries_line(beir_dir: Path, tmp_path: Path) -> None:
    from evalkit.errors import BadEvalSet
    from evalkit.interop.importers.base import ImportOptions

    with pytest.raises(BadEvalSet) as e:
        import_beir(beir_dir, vault_out=tmp_path / "v", output=tmp_path / "es.jsonl",
                    options=ImportOptions(category="lookup"))
    assert str(e.value.problems[0]).startswith(f"{beir_dir / 'queries.jsonl'}:1: category: unknown category 'lookup'")
    assert not (tmp_path / "v").exists() and not (tmp_path / "es.jsonl").exists()
