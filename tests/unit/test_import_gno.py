"""`evalkit import --format gno`: seed 002's fixtures (queries.json, ask-cases.json) -> eval set.

Built from seed 002's own examples: its queries.json lines and its ASK_CASES. The nDCG of
an imported case is checked against seed 002's ndcgAtK, transcribed line for line.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app as main_app
from evalkit.errors import BadConfig, BadEvalSet, InputError
from evalkit.evalset.load import load_eval_set
from evalkit.interop.importers import FORMATS, get_converter, import_cases
from evalkit.interop.importers.base import ImportOptions
from evalkit.interop.importers.docids import load_docid_map
from evalkit.interop.importers.output import write_eval_set
from evalkit.metrics.retrieval import score_case_retrieval

# Seed 002, "Test Data Format": evals/fixtures/queries.json, verbatim (tests/data/gno).
SEED_QUERIES = (Path(__file__).parents[1] / "data" / "gno" / "queries.json").read_text(encoding="utf-8")

# Seed 002, ask.eval.ts: the AskCase items of ASK_CASES, as an ask-cases.json fixture.
SEED_ASK_CASES = [
    {"question": "What is the authentication strategy?", "expectedTopics": ["OAuth", "JWT", "session", "tokens"]},
    {"question": "How do I deploy to production?", "expectedTopics": ["build", "deploy", "environment", "CI/CD"]},
]


def _gno_ndcg_at_k(output: list[str], expected: list[dict], k: int) -> float:
    """Seed 002's ndcgAtK scorer (evals/scorers/ir-metrics.ts), transcribed line for line."""
    if not expected:
        return 1.0
    relevance_map = {e["docid"]: e["relevance"] for e in expected}
    dcg = sum((2 ** relevance_map.get(d, 0) - 1) / math.log2(i + 2) for i, d in enumerate(output[:k]))
    ideal = sorted(expected, key=lambda e: -e["relevance"])[:k]
    idcg = sum((2 ** e["relevance"] - 1) / math.log2(i + 2) for i, e in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 1.0


def _gno_recall_at_k(output: list[str], expected: list[str], k: int) -> float:
    """Seed 002's recallAtK scorer, transcribed."""
    if not expected:
        return 1.0
    top = output[:k]
    return sum(1 for d in expected if d in top) / len(expected)


@pytest.fixture
def queries(tmp_path: Path) -> Path:
    p = tmp_path / "queries.json"
    p.write_text(SEED_QUERIES, encoding="utf-8")
    return p


def test_seed_queries_json_without_a_map(queries: Path) -> None:
    cases = [c.case for c in import_cases("gno", [queries])]
    assert cases[0] == {
        "id": "q1",
        "question": "termination clause",
        "answerable": True,
        "category": "factual",
        "language": "en",
        "tags": ["collection:contracts"],
        "gold_supports": [
            {"chunk_id": "#a1b2c3", "relevance": 3},
            {"chunk_id": "#d4e5f6", "relevance": 2},
            # judged but not in relevantDocs: nDCG only
            {"chunk_id": "#g7h8i9", "relevance": 1, "graded_only": True},
        ],
        "collection": "contracts",
    }
    assert cases[1]["language"] == "de" and cases[1]["notes"] == "German query over mixed DE/EN corpus"
    assert cases[1]["gold_supports"] == [{"chunk_id": "#a1b2c3", "relevance": 3}]


def test_seed_ask_cases(tmp_path: Path) -> None:
    p = tmp_path / "ask-cases.json"
    p.write_text(json.dumps(SEED_ASK_CASES))
    cases = [c.case for c in import_cases("gno", [p], ImportOptions(category="general", tags=("gno", "ask")))]
    assert cases[0] == {
        "id": "ask-cases-1",
        "question": "What is the authentication strategy?",
        "answerable": True,
        "category": "general",
        "tags": ["gno", "ask"],
        "expected_topics": ["OAuth", "JWT", "session", "tokens"],
        "gold_supports": [],
    }
    assert cases[1]["id"] == "ask-cases-2"


def test_docid_map_tsv_and_json(tmp_path: Path, queries: Path) -> None:
    tsv = tmp_path / "map.tsv"
    tsv.write_text("docid\trel_path\theading_path\n#a1b2c3\tcontracts/termination.md\n"
                   "#d4e5f6\tcontracts/notice.md\t# Notice > ## Period\n\n#g7h8i9\tcontracts/misc.md\n")
    js = tmp_path / "map.json"
    js.write_text(json.dumps({
        "#a1b2c3": "contracts/termination.md",
        "#d4e5f6": {"rel_path": "contracts/notice.md", "heading_path": "# Notice > ## Period"},
        "#g7h8i9": {"rel_path": "contracts/misc.md"},
    }))
    expected = [
        {"rel_path": "contracts/termination.md", "heading_path": "", "relevance": 3},
        {"rel_path": "contracts/notice.md", "heading_path": "# Notice > ## Period", "relevance": 2},
        {"rel_path": "contracts/misc.md", "heading_path": "", "relevance": 1, "graded_only": True},
    ]
    for path in (tsv, js):
        cases = import_cases("gno", [queries], ImportOptions(docid_map=load_docid_map(path)))
        assert cases[0].case["gold_supports"] == expected, path


def test_docid_map_errors(tmp_path: Path, queries: Path) -> None:
    partial = tmp_path / "partial.tsv"
    partial.write_text("#a1b2c3\ta.md\n#d4e5f6\tb.md\n")
    with pytest.raises(InputError) as e:
        import_cases("gno", [queries], ImportOptions(docid_map=load_docid_map(partial)))
    assert str(e.value) == f"{queries}: [0].judgments[2].docid: docid '#g7h8i9' is not in the --docid-map file"

    same = tmp_path / "same.tsv"
    same.write_text("#a1b2c3\ta.md\n#d4e5f6\ta.md\n#g7h8i9\tc.md\n")
    with pytest.raises(InputError, match=r"\[0\]\.relevantDocs\[1\]: maps to the same location as relevantDocs\[0\]"):
        import_cases("gno", [queries], ImportOptions(docid_map=load_docid_map(same)))

    bad_tsv = tmp_path / "bad.tsv"
    bad_tsv.write_text("#a\ta.md\n#b\n#a\tb.md\n")
    with pytest.raises(BadConfig) as e:
        load_docid_map(bad_tsv)
    assert [str(p) for p in e.value.problems] == [
        f"{bad_tsv}:2: expected docid<TAB>rel_path[<TAB>heading_path], got 1 columns",
        f"{bad_tsv}:3: docid '#a' is mapped twice",
    ]
    bad_json = tmp_path / "bad.json"
    bad_json.write_text(json.dumps({"#a": {"path": "a.md"}, "#b": 3, "#c": ""}))
    with pytest.raises(BadConfig) as e:
        load_docid_map(bad_json)
    assert [p.field for p in e.value.problems] == ["#a", "#b", "#c"]


def test_relevance_of_unjudged_relevant_docs(tmp_path: Path) -> None:
    p = tmp_path / "q.json"
    p.write_text(json.dumps([
        # judged elsewhere but not this doc: 002's ndcgAtK gives it 0 -> relevance 0 (recall only)
        {"id": "a", "query": "x", "relevantDocs": ["#1", "#2"], "judgments": [{"docid": "#1", "relevance": 2}]},
        # no judgments at all: binary relevance
        {"id": "b", "query": "y", "relevantDocs": ["#1"]},
        # judged only, no relevantDocs: every support is graded-only
        {"id": "c", "query": "z", "judgments": [{"docid": "#1", "relevance": 1}]},
    ]))
    a, b, c = (x.case["gold_supports"] for x in import_cases("gno", [p]))
    assert a == [{"chunk_id": "#1", "relevance": 2}, {"chunk_id": "#2", "relevance": 0}]
    assert b == [{"chunk_id": "#1", "relevance": 1}]
    assert c == [{"chunk_id": "#1", "relevance": 1, "graded_only": True}]


def test_errors_name_file_item_and_field(tmp_path: Path, queries: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_text(json.dumps([
        {"id": "a", "query": "x", "relevantDocs": ["#1", "#1"], "judgments": [{"docid": "#1", "relevance": -1}]},
        {"id": "b", "query": "", "judgments": [{"docid": "#2", "relevance": 1}, {"docid": "#2", "relevance": 2}]},
        {"id": "c", "text": "no query"},
        "not an object",
        {"id": "q1", "query": "same id as the seed's q1", "language": 7},
    ]))
    with pytest.raises(InputError) as e:
        import_cases("gno", [queries, p])
    assert [str(x) for x in e.value.problems] == [
        f"{p}: [0].relevantDocs[1]: docid '#1' is listed twice",
        f"{p}: [0].judgments[0].relevance: expected a number >= 0, got -1",
        f"{p}: [1].query: expected a non-empty string, got ''",
        f"{p}: [1].judgments[1].docid: docid '#2' is judged twice",
        f"{p}: [2]: expected a `query` (queries.json) or a `question` (ask-cases.json) field",
        f"{p}: [3]: expected a JSON object, got str",
        f"{p}: [4].language: expected a language code, got 7",
    ]
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps([{"id": "q1", "query": "again"}]))
    with pytest.raises(InputError, match=r"dup\.json: \[0\]\.id: id 'q1' duplicates .*queries\.json\[0\]"):
        import_cases("gno", [queries, dup])
    not_list = tmp_path / "obj.json"
    not_list.write_text("{}")
    with pytest.raises(InputError, match="expected a JSON array"):
        import_cases("gno", [not_list])
    with pytest.raises(BadConfig, match="unknown format 'xml'; expected one of .*gno, hindsight"):
        import_cases("xml", [queries])


def test_imported_ndcg_and_recall_equal_seed_002_scorers(tmp_path: Path) -> None:
    # Random fixtures in seed 002's shape, random rankings of distinct docids: evalkit's
    # ndcg@K of the imported case equals 002's ndcgAtK, and recall_frac@K its recallAtK.
    rng = random.Random(2)
    pool = [f"#d{i}" for i in range(10)]
    items = []
    for q in range(300):
        judged = rng.sample(pool, rng.randint(1, 6))
        judgments = [{"docid": d, "relevance": rng.choice([0, 1, 2, 3])} for d in judged]
        relevant = rng.sample(judged, rng.randint(1, len(judged)))
        if rng.random() < 0.3:  # a relevant doc nobody judged
            relevant.append(next(d for d in pool if d not in judged))
        items.append({"id": f"r{q}", "query": f"query {q}", "relevantDocs": relevant, "judgments": judgments})
    p = tmp_path / "random.json"
    p.write_text(json.dumps(items))
    checked = 0
    for item, imported in zip(items, import_cases("gno", [p])):
        output = rng.sample(pool, rng.randint(0, 10))
        chunks = [{"chunk_id": d, "rank": i + 1} for i, d in enumerate(output)]
        rm = score_case_retrieval(imported.case, chunks, [], None, "off", [5, 10])
        for k in (5, 10):
            expected_ndcg = _gno_ndcg_at_k(output, item["judgments"], k)
            got = rm["at_k"][str(k)]["ndcg"]
            if got is None:
                # every grade 0: 002 returns 1 by convention, evalkit says "not applicable"
                assert all(j["relevance"] == 0 for j in item["judgments"])
            else:
                assert got == pytest.approx(expected_ndcg, abs=1e-12), (item, output, k)
                checked += 1
            assert rm["at_k"][str(k)]["recall_frac"] == pytest.approx(_gno_recall_at_k(output, item["relevantDocs"], k), abs=1e-15)
    assert checked > 400


def test_write_validates_with_the_loader_and_refuses_to_overwrite(tmp_path: Path, queries: Path) -> None:
    out = tmp_path / "eval_set.jsonl"
    cases = import_cases("gno", [queries])
    write_eval_set(cases, out, extra_categories=[])
    loaded = load_eval_set([out], [])
    assert [c.id for c in loaded.cases] == ["q1", "q2"]
    assert loaded.cases[0].gold_supports[2].graded_only is True
    with pytest.raises(BadConfig, match="already exists; pass --force"):
        write_eval_set(cases, out)
    write_eval_set(cases, out, force=True, extra_categories=[])

    # A case evalkit's loader rejects is reported against the fixture item; nothing is written.
    bad = import_cases("gno", [queries], ImportOptions(category="contracts"))
    with pytest.raises(BadEvalSet) as e:
        write_eval_set(bad, tmp_path / "new.jsonl", extra_categories=[])
    assert str(e.value.problems[0]).startswith(f"{queries}: [0] -> category: unknown category 'contracts'")
    assert not (tmp_path / "new.jsonl").exists()
    assert [f.name for f in tmp_path.iterdir() if f.name.startswith(".")] == []


def test_cli(tmp_path: Path, queries: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ask = tmp_path / "ask-cases.json"
    ask.write_text(json.dumps(SEED_ASK_CASES))
    runner = CliRunner()
    res = runner.invoke(main_app, ["import", "--format", "gno", str(queries), str(ask), "--tag", "gno"])
    assert res.exit_code == 0, res.output
    assert "wrote 4 cases to eval_set.jsonl: 3 gold supports, 1 graded-only" in res.output
    lines = [json.loads(x) for x in (tmp_path / "eval_set.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == ["q1", "q2", "ask-cases-1", "ask-cases-2"]
    assert all("gno" in x["tags"] for x in lines)

    res = runner.invoke(main_app, ["import", "--format", "gno", str(queries)])
    assert res.exit_code == 2 and "already exists; pass --force" in res.output
    res = runner.invoke(main_app, ["import", "--format", "nope", str(queries), "--force"])
    assert res.exit_code == 2 and "unknown format 'nope'" in res.output


def test_registry_is_lazy_and_names_functions() -> None:
    assert set(FORMATS) >= {"gno"}
    assert callable(get_converter("gno"))
