"""TREC export/import (issue 15 item 1): ranx on the exported files gives evalkit's numbers.

A retrieval-only run of the reference chatbot over sample_vault is exported; ranx reads
the files back (`kind="trec"`), so the file formats are checked too. Correspondence
(tests/unit/test_metrics_reference.py): ranx recall = recall_frac, hit_rate = recall_any,
mrr = mrr, ndcg_burges = ndcg (gain 2^rel - 1; plain ndcg too when grades are binary),
precision = precision (unit chunk only: unit anchor credits each support once).
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from evalkit.errors import BadConfig, InputError
from evalkit.interop.importers import import_cases
from evalkit.interop.importers.base import ImportOptions
from evalkit.interop.importers.docids import load_docid_map
from evalkit.interop.trec import export_trec, trec_docid
from evalkit.metrics.retrieval import score_case_retrieval
from tests.support import bundled_cases, run_eval_api, write_run

ranx = pytest.importorskip("ranx")
pytestmark = [pytest.mark.filterwarnings("ignore:unsafe cast"), pytest.mark.xdist_group("ranx")]  # numba, inside ranx

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict]:
    results = tmp_path_factory.mktemp("trec") / "results"
    r = run_eval_api(vault=ROOT / "sample_vault", eval_set=ROOT / "eval_set.jsonl", retrieval_only=True, k=[10],
                     results_dir=results, run_id="r1")
    metrics = orjson.loads((r.run_dir / "metrics.json").read_bytes())
    return results, "r1", metrics["aggregate_metrics"]["at_k"]["10"]


def _ranx(out: Path, names: list[str]) -> dict[str, float]:
    qrels = ranx.Qrels.from_file(str(out / "qrels.trec"), kind="trec")
    run = ranx.Run.from_file(str(out / "run.trec"), kind="trec")
    assert set(qrels.keys()) == set(run.keys())
    return ranx.evaluate(qrels, run, names)


def test_anchor_export_reproduces_recall_mrr_ndcg(sample_run, tmp_path: Path) -> None:
    results, run_id, ours = sample_run
    res = export_trec(run_id, tmp_path, unit="anchor", results_dir=results)
    # 51 answerable single questions and 7 conversation turns (eval_set.jsonl), 8 unanswerable
    assert res.n_queries == ours["n"] == 58 and res.excluded == {"unanswerable": 8, "unlabeled": 0, "no_relevant": 0}
    got = _ranx(tmp_path, ["recall@10", "hit_rate@10", "mrr@10", "ndcg_burges@10", "ndcg@10", "precision@10", "map@10",
                           "r-precision"])
    assert got["map@10"] == pytest.approx(ours["map"], abs=1e-9)
    assert got["r-precision"] == pytest.approx(ours["rprec"], abs=1e-9)  # run.trec holds the top 10: rprec@10
    assert got["recall@10"] == pytest.approx(ours["recall_frac"], abs=1e-9)
    assert got["hit_rate@10"] == pytest.approx(ours["recall_any"], abs=1e-9)
    assert got["mrr@10"] == pytest.approx(ours["mrr"], abs=1e-9)
    assert got["ndcg_burges@10"] == pytest.approx(ours["ndcg"], abs=1e-9)
    # ranx's plain ndcg (and trec_eval's ndcg_cut) use gain = rel: one support of eval_set.jsonl has grade 2.
    assert got["ndcg@10"] != pytest.approx(ours["ndcg"], abs=1e-9)
    # Precision is the one metric unit anchor does not keep: two chunks of one gold section
    # are two hits for evalkit, one relevant document for TREC. The export says so.
    assert got["precision@10"] < ours["precision"]
    assert res.differs["precision"] > 0
    assert {m: res.differs[m] for m in ("recall_frac", "recall_any", "mrr", "ndcg", "map", "rprec")} == dict.fromkeys(
        ("recall_frac", "recall_any", "mrr", "ndcg", "map", "rprec"), 0)


def test_chunk_export_reproduces_precision_and_mrr(sample_run, tmp_path: Path) -> None:
    results, run_id, ours = sample_run
    res = export_trec(run_id, tmp_path, unit="chunk", results_dir=results)
    got = _ranx(tmp_path, ["precision@10", "mrr@10"])
    assert got["precision@10"] == pytest.approx(ours["precision"], abs=1e-9)
    assert got["mrr@10"] == pytest.approx(ours["mrr"], abs=1e-9)
    assert res.differs == {"precision": 0, "mrr": 0} and res.warnings == []


def test_run_file_order_survives_trec_evals_sort(sample_run, tmp_path: Path) -> None:
    # trec_eval sorts by score desc, then docid desc: the synthetic scores must decide alone.
    results, run_id, _ = sample_run
    export_trec(run_id, tmp_path, results_dir=results, tag="my run")
    by_q: dict[str, list[list[str]]] = {}
    for line in (tmp_path / "run.trec").read_text().splitlines():
        cols = line.split(" ")
        assert len(cols) == 6 and cols[1] == "Q0" and cols[5] == "my%20run"
        by_q.setdefault(cols[0], []).append(cols)
    for rows in by_q.values():
        assert [int(r[3]) for r in rows] == list(range(1, len(rows) + 1))
        resorted = sorted(rows, key=lambda r: (-float(r[4]), [-ord(ch) for ch in r[2]]))
        assert resorted == rows
    for line in (tmp_path / "qrels.trec").read_text().splitlines():
        qid, it, docid, rel = line.split(" ")
        assert it == "0" and docid.startswith("g") and int(rel) > 0


def test_note_export_round_trips_through_import(sample_run, tmp_path: Path) -> None:
    results, run_id, _ = sample_run
    res = export_trec(run_id, tmp_path, unit="note", results_dir=results)
    cases = import_cases("trec", [res.topics_path, res.qrels_path],
                         ImportOptions(docid_map=load_docid_map(res.docids_path)))
    original = {c["id"]: c for c in bundled_cases()}  # a conversation's turns are cases of their own
    exported = [c for c in original.values() if c.get("answerable", True) and c.get("gold_supports")]
    assert [c.case["id"] for c in cases] == [c["id"] for c in exported]
    for c in cases:
        o = original[c.case["id"]]
        assert c.case["question"] == " ".join(o["question"].split())
        assert {s["rel_path"] for s in c.case["gold_supports"]} == {s["rel_path"] for s in o["gold_supports"]}
        best: dict[str, float] = {}
        for s in o["gold_supports"]:
            best[s["rel_path"]] = max(best.get(s["rel_path"], 0.0), float(s.get("relevance", 1.0)))
        assert {s["rel_path"]: s["relevance"] for s in c.case["gold_supports"]} == best
        assert all(s["heading_path"] == "" for s in c.case["gold_supports"])  # the whole note


# --------------------------------------------------------------------------- hand-built runs


def _chunk(cid: str, rel_path: str, rank: int, heading: str = "# H") -> dict:
    return {"chunk_id": cid, "rel_path": rel_path, "heading_path": heading, "rank": rank, "text": "t"}


def _hand_run(root: Path, records: list[dict], *, k: int = 5, trials: int = 1, **settings: object) -> Path:
    cfg = {"settings": {"k": [k], **settings}, "hashed": {"trials": trials}}
    return write_run(root / "results", "h1", records, config=cfg)


GRADED = {"id": "q1", "question": "graded?", "answerable": True, "gold_supports": [
    {"chunk_id": "a", "relevance": 2}, {"chunk_id": "b", "relevance": 1}, {"chunk_id": "z", "relevance": 3}]}
ONE_CHUNK_TWO_SUPPORTS = {"id": "q2", "question": "two sections", "answerable": True, "gold_supports": [
    {"rel_path": "n.md", "heading_path": "# H"}, {"rel_path": "n.md", "heading_path": ""}]}


def test_graded_chunk_ids_reproduce_every_metric_and_round_trip(tmp_path: Path) -> None:
    chunks = [_chunk("x", "x.md", 1), _chunk("b", "b.md", 2), _chunk("a", "a.md", 3), _chunk("b", "b.md", 4)]
    records = [
        {"test_case_id": "q1", "case": GRADED, "retrieved_chunks": chunks},
        {"test_case_id": "q3", "case": {"id": "q3", "question": "error", "gold_supports": [{"chunk_id": "a"}]},
         "retrieved_chunks": []},
        {"test_case_id": "u", "case": {"id": "u", "question": "no", "answerable": False}, "retrieved_chunks": chunks},
        {"test_case_id": "l", "case": {"id": "l", "question": "unlabeled"}, "retrieved_chunks": chunks},
    ]
    results = _hand_run(tmp_path, records)
    ours = [score_case_retrieval(r["case"], r["retrieved_chunks"], [], None, None, [5])["at_k"]["5"] for r in records[:2]]
    for unit in ("anchor", "chunk"):
        out = tmp_path / unit
        res = export_trec("h1", out, unit=unit, results_dir=results)
        assert res.excluded == {"unanswerable": 1, "unlabeled": 1, "no_relevant": 0}
        got = _ranx(out, ["recall@5", "precision@5", "mrr@5", "ndcg_burges@5"])
        mean = lambda m: sum(o[m] for o in ours) / 2  # noqa: E731
        assert got["recall@5"] == pytest.approx(mean("recall_frac"), abs=1e-9)
        assert got["mrr@5"] == pytest.approx(mean("mrr"), abs=1e-9)
        assert got["ndcg_burges@5"] == pytest.approx(mean("ndcg"), abs=1e-9)
        assert got["precision@5"] == pytest.approx(mean("precision"), abs=1e-9)  # the repeat of b earns nothing
        assert "q3 Q0 evalkit-empty 1 0 h1" in (out / "run.trec").read_text()
    # chunk unit: the qrels are the gold chunk ids, grades kept -> the same supports back.
    cases = import_cases("trec", [tmp_path / "chunk" / "topics.tsv", tmp_path / "chunk" / "qrels.trec"])
    assert [c.case["gold_supports"] for c in cases] == [
        [{"chunk_id": "a", "relevance": 2.0}, {"chunk_id": "b", "relevance": 1.0}, {"chunk_id": "z", "relevance": 3.0}],
        [{"chunk_id": "a", "relevance": 1.0}],
    ]


def test_a_chunk_matching_two_supports_is_counted_as_a_difference(tmp_path: Path) -> None:
    records = [{"test_case_id": "q2", "case": ONE_CHUNK_TWO_SUPPORTS, "retrieved_chunks": [_chunk("c", "n.md", 1)]}]
    res = export_trec("h1", tmp_path / "o", results_dir=_hand_run(tmp_path, records))
    assert res.differs["recall_frac"] == 1 and res.differs["ndcg"] == 0
    assert any("recall_frac: 1" in w for w in res.warnings)


def test_trials_get_one_query_per_answer(tmp_path: Path) -> None:
    case = {"id": "q 1", "question": "q", "gold_supports": [{"chunk_id": "a"}]}
    records = [{"test_case_id": "q 1", "trial": t, "case": case, "retrieved_chunks": [_chunk("a", "a.md", 1)]} for t in (1, 2)]
    res = export_trec("h1", tmp_path / "o", unit="chunk", results_dir=_hand_run(tmp_path, records, trials=2))
    assert (tmp_path / "o" / "qrels.trec").read_text() == "q%201#1 0 a 1\nq%201#2 0 a 1\n"
    assert res.n_queries == 2 and trec_docid("a b%") == "a%20b%25"


def test_snippets_on_cut_text_are_refused_like_score_retrieval(tmp_path: Path) -> None:
    case = {"id": "q", "question": "q", "gold_supports": [{"chunk_id": "a", "snippets": ["t"]}]}
    results = _hand_run(tmp_path, [{"test_case_id": "q", "case": case, "retrieved_chunks": []}], require_snippets=True)
    with pytest.raises(BadConfig, match="--allow-truncated-text"):
        export_trec("h1", tmp_path / "o", results_dir=results)
    assert export_trec("h1", tmp_path / "o", results_dir=results, allow_truncated_text=True).n_queries == 1
    with pytest.raises(InputError, match="larger than"):
        export_trec("h1", tmp_path / "o", results_dir=results, k=6)
    with pytest.raises(BadConfig, match="unknown unit"):
        export_trec("h1", tmp_path / "o", results_dir=results, unit="doc")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- import formats


def test_import_reads_sgml_jsonl_and_beir_qrels(tmp_path: Path) -> None:
    sgml = tmp_path / "topics.txt"
    sgml.write_text("<top>\n<num> Number: 401\n<title> foreign minorities, Germany\n<desc> Description:\nWhat?\n</top>\n"
                    "<top>\n<num> Number: 402\n<title> behavioral genetics\n</top>\n")
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("401 0 D1 1\n401 0 D2 0\n401 0 D1 2\n403 0 D9 1\n")
    cases = import_cases("trec", [sgml, qrels], ImportOptions(tags=("trec",)))
    assert [(c.case["id"], c.case["question"]) for c in cases] == [("401", "foreign minorities, Germany"), ("402", "behavioral genetics")]
    assert cases[0].case["gold_supports"] == [{"chunk_id": "D1", "relevance": 2.0}] and cases[0].case["tags"] == ["trec"]
    assert cases[1].case["gold_supports"] == []
    assert any("no relevant judgment (402)" in w for w in cases[0].warnings)
    assert any("not in the topics (403)" in w for w in cases[0].warnings)

    jsonl = tmp_path / "queries.jsonl"
    jsonl.write_text('{"_id": "7", "text": "What is BM25?"}\n')
    beir = tmp_path / "test.tsv"
    beir.write_text("query-id\tcorpus-id\tscore\n7\tdoc-3\t1\n")
    [case] = import_cases("trec", [jsonl, beir])
    assert case.case["gold_supports"] == [{"chunk_id": "doc-3", "relevance": 1.0}]

    bad = tmp_path / "bad.tsv"
    bad.write_text("1\tok\nno tab here\n")
    with pytest.raises(InputError, match="qid<TAB>text"):
        import_cases("trec", [bad, qrels])


# --------------------------------------------------------------------------- CLI


def test_cli_export_latest_and_import(sample_run, tmp_path: Path) -> None:
    from evalkit.cli.main import app

    results, _, _ = sample_run
    runner = CliRunner()
    out = runner.invoke(app, ["export", "--run-id", "latest", "--results-dir", str(results), "--unit", "note",
                              "--output", str(tmp_path / "x"), "--json"])
    assert out.exit_code == 0, out.output
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["run_id"] == "r1" and got["n_queries"] == 58 and got["files"]["docids"].endswith("docids.tsv")
    es = tmp_path / "es.jsonl"
    out = runner.invoke(app, ["import", "--format", "trec", "--topics", str(tmp_path / "x" / "topics.tsv"),
                              "--qrels", str(tmp_path / "x" / "qrels.trec"),
                              "--docid-map", str(tmp_path / "x" / "docids.tsv"), "--output", str(es)])
    assert out.exit_code == 0, out.output
    assert "wrote 58 cases" in out.stdout and len(es.read_text().splitlines()) == 58


@pytest.mark.parametrize("args, message", [
    (["export", "--run-id", "r1", "--unit", "doc"], "unknown unit"),
    (["export", "--run-id", "r1", "--format", "csv"], "unknown format"),
    (["export", "--run-id", "nope"], "no run"),
    (["import", "--format", "trec", "--topics", "t.tsv"], "--qrels"),
    (["import", "--format", "gno", "--topics", "t.tsv"], "--format trec"),
])
def test_cli_refusals_exit_2(sample_run, args: list[str], message: str) -> None:
    from evalkit.cli.main import app

    results, _, _ = sample_run
    extra = ["--results-dir", str(results)] if args[0] == "export" else []
    out = CliRunner().invoke(app, [*args, *extra])
    assert out.exit_code == 2, out.output
    assert message in out.output
