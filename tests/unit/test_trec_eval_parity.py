"""trec_eval's own test files give evalkit's numbers (issue 43 item 7).

tests/data/trec_eval/ holds, unchanged, files of usnistgov/trec_eval's `test/` folder at commit
f4253652c8efd0d86ddffd0d163cc0a0f813111a (version 10.0), with its LICENSE.md: qrels.test,
qrels.test.with-comments, qrels.rel_level, results.test and the outputs its `make quicktest`
diffs against: out.test (default measures), out.test.a (`-m all_trec`), out.test.aq (`-m
all_trec -q`, per query) and out.test.aql (`-m all_trec -q -l2 qrels.rel_level`).

Every measure evalkit has is compared with trec_eval's printed value, to its last printed
digit (trec_eval prints %6.4f: the strings must be equal), overall and per query:

  trec_eval          evalkit (`score_trec_run`, gain linear)
  P_K                precision@K
  recall_K           recall_frac@K
  success_K          recall_any@K
  ndcg_cut_K         ndcg@K
  map_cut_K          map@K
  map, Rprec,        map, rprec, mrr, ndcg at K = 1000, past every ranking (500
  recip_rank, ndcg   documents a query): trec_eval's uncut measures

Conventions: trec_eval's nDCG gain is rel (evalkit's default is 2^rel - 1: `--gain linear` is
trec_eval's; on qrels.test's binary grades both agree, on qrels.rel_level they do not); trec_eval
has no cut-off for recip_rank and Rprec, so they are compared at K = 1000 only. The same files
are then scored by ranx (a dev dependency), and by pytrec_eval and ir_measures when installed,
at full precision, each given the ranking in trec_eval's order (ranx breaks score ties its own
way, which moves its nDCG@100 on results.test in the 5th digit).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.errors import InputError
from evalkit.interop.trec_run import (
    TREC_METRICS,
    read_trec_run,
    score_trec_run,
    trec_eval_name,
    trec_order,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "trec_eval"
RESULTS = DATA / "results.test"
CUTS = [5, 10, 15, 20, 30, 100, 200, 500, 1000]
KS = [*CUTS, 1, 2, 3]  # success_1 too
FULL = "1000"  # every ranking holds 500 documents: K = 1000 is the uncut ranking
UNCUT = {"map": "map", "rprec": "Rprec", "mrr": "recip_rank", "ndcg": "ndcg"}


def _trec_eval_out(name: str) -> dict[tuple[str, str], str]:
    """(measure, qid or "all") -> the printed value."""
    out = {}
    for line in (DATA / name).read_text().splitlines():
        measure, qid, value = line.split()
        out[(measure, qid)] = value
    return out


def _compare(scores, expected: dict[tuple[str, str], str]) -> int:
    """Assert every measure evalkit has equals trec_eval's printed value; return how many were compared."""
    compared = 0
    diffs = []
    for qid in [*scores.per_query, "all"]:
        values = scores.means if qid == "all" else scores.per_query[qid]
        for k in KS:
            for m in TREC_METRICS:
                if m in ("mrr", "rprec"):
                    continue  # no cut-off in trec_eval: compared uncut below
                name = trec_eval_name(m, k, "linear")
                if (name, qid) in expected:
                    compared += 1
                    if f"{values[str(k)][m]:.4f}" != expected[(name, qid)]:
                        diffs.append((qid, name, values[str(k)][m], expected[(name, qid)]))
        for m, name in UNCUT.items():
            if (name, qid) in expected:
                compared += 1
                if f"{values[FULL][m]:.4f}" != expected[(name, qid)]:
                    diffs.append((qid, name, values[FULL][m], expected[(name, qid)]))
    assert diffs == []
    return compared


def test_every_measure_equals_trec_eval_on_its_test_files() -> None:
    scores = score_trec_run(RESULTS, DATA / "qrels.test", ks=KS, gain="linear")
    assert scores.n_queries == 3
    # P_K, recall_K, ndcg_cut_K, map_cut_K at 9 cut-offs, success_1/5/10, and the four uncut measures
    assert _compare(scores, _trec_eval_out("out.test.a")) == 9 * 4 + 3 + 4
    assert _compare(scores, _trec_eval_out("out.test")) == 9 + 3  # P_K, map, Rprec, recip_rank
    # per query (-q), each of the three queries and the mean
    assert _compare(scores, _trec_eval_out("out.test.aq")) == 4 * (9 * 4 + 3 + 4)


def test_relevance_level_equals_trec_eval_l2() -> None:
    # qrels.rel_level grades 1, 2, 3, 4 (and -1): -l2 makes 1 non-relevant for every measure but
    # nDCG, whose gain is every grade > 0: evalkit's graded-only support.
    scores = score_trec_run(RESULTS, DATA / "qrels.rel_level", ks=KS, gain="linear", relevance_level=2)
    assert _compare(scores, _trec_eval_out("out.test.aql")) == 4 * (9 * 4 + 3 + 4)
    # with grades above 1, the gain matters: evalkit's default 2^rel - 1 is not trec_eval's
    exp = score_trec_run(RESULTS, DATA / "qrels.rel_level", ks=[10], relevance_level=2)
    assert exp.means["10"]["ndcg"] != pytest.approx(scores.means["10"]["ndcg"], abs=1e-4)
    assert exp.means["10"]["map"] == scores.means["10"]["map"]  # the gain is nDCG's alone


def test_comment_lines_are_skipped_as_trec_eval_10_does() -> None:
    # trec_eval's quicktest: qrels.test.with-comments gives out.test exactly; a `#` inside a
    # docno (CR#93E-1860) is data, not a comment.
    plain = score_trec_run(RESULTS, DATA / "qrels.test", ks=KS, gain="linear")
    commented = score_trec_run(RESULTS, DATA / "qrels.test.with-comments", ks=KS, gain="linear")
    assert commented.means == plain.means
    assert _compare(commented, _trec_eval_out("out.test")) == 12


def test_file_order_is_not_scored_trec_eval_order_is(tmp_path: Path) -> None:
    # results.test lists its documents out of score order: read, sorted, and said.
    run = read_trec_run(RESULTS)
    assert run.reordered == ["301", "302", "303"]
    scores = score_trec_run(run, DATA / "qrels.test", ks=[10])
    assert any("not listed in trec_eval's order" in w for w in scores.warnings)
    # ties: score descending, then docno descending (form_res_rels.c comp_sim_docno)
    assert trec_order([("d1", 1.0), ("d3", 2.0), ("d2", 1.0), ("d10", 1.0)]) == ["d3", "d2", "d10", "d1"]
    f = tmp_path / "run.trec"
    f.write_text("# a comment line\nq1 Q0 a 1 1.0 t\nq1 Q0 b 2 1.0 t\n")
    qrels = tmp_path / "qrels"
    qrels.write_text("q1 0 a 1\n")
    got = score_trec_run(f, qrels, ks=[1])
    # a tie: b before a, so the relevant a is at rank 2, whatever the file says
    assert got.per_query["q1"]["1"]["recall_any"] == 0.0
    assert got.reordered == ["q1"]
    f.write_text("q1 Q0 b 1 1.0 t\nq1 Q0 a 2 1.0 t\n")
    again = score_trec_run(f, qrels, ks=[1])
    assert again.reordered == [] and again.warnings == []


def test_topics_without_relevant_documents_count_zero_only_when_asked(tmp_path: Path) -> None:
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 a 1 2 t\nq1 Q0 b 2 1 t\nq2 Q0 c 1 2 t\nq3 Q0 e 1 1 t\n")
    qrels = tmp_path / "qrels"
    # q1: a relevant; q2: judged, nothing relevant (as comment.test's topics); q3: not judged
    qrels.write_text("q1 0 a 1\nq1 0 b 0\nq2 0 c 0\nq2 0 d 0\n")
    skip = score_trec_run(run, qrels, ks=[10])
    assert skip.means["10"]["recall_any"] == 1.0 and skip.n["10"]["recall_any"] == 1
    assert skip.skipped == {"not_judged": 1, "not_in_run": 0, "no_relevant": 1}
    zero = score_trec_run(run, qrels, ks=[10], no_relevant="zero")
    assert zero.means["10"]["recall_any"] == 0.5 and zero.n["10"]["recall_any"] == 2
    assert zero.per_query["q2"]["10"] == dict.fromkeys(TREC_METRICS, 0.0)


def test_duplicate_docno_is_refused_as_trec_eval_does(tmp_path: Path) -> None:
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 a 1 2 t\nq1 Q0 a 2 1 t\nq1 Q0 b 3 x t\n")
    with pytest.raises(InputError) as e:
        read_trec_run(run)
    text = str(e.value)
    assert "listed twice" in text and "not a finite number" in text


def test_score_retrieval_trec_run_cli() -> None:
    from evalkit.cli.score_retrieval import app

    res = CliRunner().invoke(app, ["--trec-run", str(RESULTS), "--qrels", str(DATA / "qrels.test"), "--gain", "linear",
                                   "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout.strip().splitlines()[-1])
    assert data["ks"] == [10, 500]  # 10 and the deepest ranking: the uncut measures
    assert f"{data['trec_eval']['map_cut_500']:.4f}" == "0.1785" and f"{data['trec_eval']['P_10']:.4f}" == "0.3000"
    assert f"{data['trec_eval']['Rprec']:.4f}" == "0.2174"  # at K = 500, the whole ranking
    assert data["trec_eval"]["map"] == data["trec_eval"]["map_cut_500"] and "recip_rank" in data["trec_eval"]
    assert data["ir_measures"]["AP@500"] == data["trec_eval"]["map_cut_500"]
    bad = CliRunner().invoke(app, ["--trec-run", str(RESULTS)])
    assert bad.exit_code == 2
    assert CliRunner().invoke(app, ["--trec-run", str(RESULTS), "--qrels", str(DATA / "qrels.test"),
                                    "--gain", "cubic"]).exit_code == 2


def test_the_docs_example_is_what_the_command_prints() -> None:
    # docs/interop.md, "Scoring a TREC run file": the command shown, run from the repository root
    import shlex

    from evalkit.cli.main import app
    from evalkit.cli.score_retrieval import app as script

    root = DATA.parent.parent.parent
    text = (root / "docs" / "interop.md").read_text()
    block = text.split("<!-- generated-by: tests/unit/test_trec_eval_parity.py -->", 1)[1].split("```console\n", 1)[1].split("```", 1)[0]
    command, *shown = block.rstrip("\n").split("\n")
    args = shlex.split(command.removeprefix("$ "))
    assert args[:2] == ["evalkit", "score"]
    args = [str(root / a) if a.startswith("tests/") else a for a in args[1:]]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines() + res.stdout.splitlines() == shown
    # the seed's script is the same door
    again = CliRunner().invoke(script, args[1:])
    assert again.exit_code == 0 and again.stdout == res.stdout


def test_trec_flags_refuse_what_they_do_not_read() -> None:
    from evalkit.cli.main import app

    trec = ["--trec-run", str(RESULTS), "--qrels", str(DATA / "qrels.test")]
    for extra in (["--retrieval"], ["--primary-k", "3"], ["--classifier", "llm"], ["--run-id", "latest"]):
        res = CliRunner().invoke(app, ["score", *trec, *extra])
        assert res.exit_code == 2 and extra[0] in res.stderr, (extra, res.output)
    for flag in (["--gain", "linear"], ["--no-relevant", "zero"], ["--per-query"], ["--relevance-level", "2"]):
        res = CliRunner().invoke(app, ["score", "--run-id", "latest", *flag])
        assert res.exit_code == 2 and "goes with --trec-run" in res.stderr, (flag, res.output)


# -- the same files through the other tools, at full precision -------------------------------------


def _trec_dicts(qrels_name: str):
    qrels: dict[str, dict[str, int]] = {}
    for line in (DATA / qrels_name).read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        q, _, d, r = line.split()
        qrels.setdefault(q, {})[d] = int(r)
    # Each tool breaks score ties its own way (ranx's nDCG@100 moves in the 5th digit on
    # results.test): the ranking handed over is trec_eval's, as distinct descending scores.
    rankings = read_trec_run(RESULTS).rankings
    run = {q: {d: float(len(docs) - i) for i, d in enumerate(docs)} for q, docs in rankings.items()}
    return qrels, run


@pytest.mark.filterwarnings("ignore:unsafe cast")
@pytest.mark.xdist_group("ranx")
def test_ranx_agrees_at_full_precision() -> None:
    ranx = pytest.importorskip("ranx")
    qrels, run = _trec_dicts("qrels.test")
    ks = [5, 10, 100, 1000]
    ours = score_trec_run(RESULTS, DATA / "qrels.test", ks=ks, gain="linear")
    q, r = ranx.Qrels({k: {d: g for d, g in v.items() if g > 0} for k, v in qrels.items()}), ranx.Run(run)
    names = {"recall_any": "hit_rate", "recall_frac": "recall", "precision": "precision", "mrr": "mrr",
             "ndcg": "ndcg", "map": "map"}
    for k in ks:
        for m, theirs in names.items():
            assert ours.means[str(k)][m] == pytest.approx(ranx.evaluate(q, r, f"{theirs}@{k}"), abs=1e-12), (m, k)
    assert ours.means[FULL]["rprec"] == pytest.approx(ranx.evaluate(q, r, "r-precision"), abs=1e-12)


def test_pytrec_eval_agrees_at_full_precision() -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    qrels, run = _trec_dicts("qrels.test")
    ours = score_trec_run(RESULTS, DATA / "qrels.test", ks=[5, 10, 1000], gain="linear")
    got = pytrec_eval.RelevanceEvaluator(qrels, {"map", "Rprec", "recip_rank", "ndcg", "P", "recall", "ndcg_cut"}).evaluate(run)
    for qid, values in got.items():
        mine = ours.per_query[qid]
        assert mine[FULL]["map"] == pytest.approx(values["map"], abs=1e-12)
        assert mine[FULL]["rprec"] == pytest.approx(values["Rprec"], abs=1e-12)
        assert mine[FULL]["mrr"] == pytest.approx(values["recip_rank"], abs=1e-12)
        assert mine[FULL]["ndcg"] == pytest.approx(values["ndcg"], abs=1e-12)
        for k in (5, 10):
            assert mine[str(k)]["precision"] == pytest.approx(values[f"P_{k}"], abs=1e-12)
            assert mine[str(k)]["recall_frac"] == pytest.approx(values[f"recall_{k}"], abs=1e-12)
            assert mine[str(k)]["ndcg"] == pytest.approx(values[f"ndcg_cut_{k}"], abs=1e-12)


def test_ir_measures_agrees_at_full_precision() -> None:
    ir_measures = pytest.importorskip("ir_measures")
    qrels, run = _trec_dicts("qrels.test")
    ours = score_trec_run(RESULTS, DATA / "qrels.test", ks=[10, 1000], gain="linear")
    measures = [ir_measures.parse_measure(n) for n in ("AP@10", "P@10", "R@10", "nDCG@10", "Success@10", "AP", "Rprec", "RR")]
    got = ir_measures.calc_aggregate(measures, qrels, run)
    by = {str(m): v for m, v in got.items()}
    assert ours.means["10"]["map"] == pytest.approx(by["AP@10"], abs=1e-12)
    assert ours.means["10"]["precision"] == pytest.approx(by["P@10"], abs=1e-12)
    assert ours.means["10"]["recall_frac"] == pytest.approx(by["R@10"], abs=1e-12)
    assert ours.means["10"]["ndcg"] == pytest.approx(by["nDCG@10"], abs=1e-12)
    assert ours.means["10"]["recall_any"] == pytest.approx(by["Success@10"], abs=1e-12)
    assert ours.means[FULL]["map"] == pytest.approx(by["AP"], abs=1e-12)
    assert ours.means[FULL]["rprec"] == pytest.approx(by["Rprec"], abs=1e-12)
    assert ours.means[FULL]["mrr"] == pytest.approx(by["RR"], abs=1e-12)


def test_import_reads_comment_lines_and_a_relevance_level(tmp_path: Path) -> None:
    # trec_eval's qrels.test.with-comments used to exit 2 on its first line ("# comment here")
    from evalkit.cli.import_cases import app

    topics = tmp_path / "topics.tsv"
    topics.write_text("301\tinternational organized crime\n302\tpoliomyelitis\n303\thubble telescope\n")
    out = tmp_path / "eval_set.jsonl"
    res = CliRunner().invoke(app, ["--format", "trec", "--topics", str(topics), "--qrels",
                                   str(DATA / "qrels.test.with-comments"), "--output", str(out)])
    assert res.exit_code == 0, res.output
    cases = [json.loads(line) for line in out.read_text().splitlines()]
    assert [len(c["gold_supports"]) for c in cases] == [474, 77, 10]
    assert any(s["chunk_id"] == "CR#93E-1860" for c in cases for s in c["gold_supports"]) is False  # judged 0
    # -l2 on qrels.rel_level: grades 2 and 4 are supports, grade 1 a graded_only one (nDCG only)
    leveled = tmp_path / "leveled.jsonl"
    res = CliRunner().invoke(app, ["--format", "trec", "--topics", str(topics), "--qrels", str(DATA / "qrels.rel_level"),
                                   "--relevance-level", "2", "--output", str(leveled)])
    assert res.exit_code == 0, res.output
    first = json.loads(leveled.read_text().splitlines()[0])
    graded = [s for s in first["gold_supports"] if s.get("graded_only")]
    assert len(first["gold_supports"]) == 474 and len(graded) == 462
    assert {s["relevance"] for s in graded} == {1.0}
    bad = CliRunner().invoke(app, ["--format", "trec", "--topics", str(topics), "--qrels", str(DATA / "qrels.test"),
                                   "--relevance-level", "0", "--output", str(tmp_path / "x.jsonl")])
    assert bad.exit_code == 2


def test_map_and_rprec_go_through_the_registry_like_the_others() -> None:
    # one registry entry each: the aggregate's means, the headline rows, thresholds, compare's
    # paired @K rows and the verdict's margin all read it
    from evalkit.compare.cases import AT_K_METRICS as COMPARED
    from evalkit.gate.floors import parse_thresholds
    from evalkit.metrics.aggregate import aggregate_records
    from evalkit.metrics.keys import ir_measure_name
    from evalkit.metrics.registry import HEADLINE_KEYS, by_key, label_of
    from evalkit.metrics.retrieval import score_case_retrieval

    for key, name in (("map_avg", "map"), ("rprec_avg", "rprec")):
        m = by_key(key)
        assert m is not None and m.at_k == name and m.direction == "higher" and m.scale == 1.0 and m.margin == 0.05
        assert key in HEADLINE_KEYS and name in COMPARED
    assert label_of("map", 10) == "MAP@10" and label_of("rprec_avg", 5) == "R-precision@5"
    assert ir_measure_name("map", 10) == "AP@10" and ir_measure_name("rprec", 10) is None  # ir_measures' Rprec: uncut
    assert parse_thresholds(["map_avg=0.5", "AP@10=0.3", "rprec@10=0.4"], ks=[10]) == {
        "map_avg": 0.5, "map@10": 0.3, "rprec@10": 0.4}
    case = {"id": "c", "question": "q", "gold_supports": [{"chunk_id": "a"}, {"chunk_id": "b"}]}
    records = [
        {"case_id": "c", "case": case, "retrieval_metrics": score_case_retrieval(
            case, [{"chunk_id": d, "rank": i} for i, d in enumerate(ranking, 1)], [], None, None, [10])}
        for ranking in (["a", "x", "b"], ["x", "x2", "x3"])
    ]
    agg = aggregate_records(records, ks=[10])["aggregate_metrics"]
    # AP of the first: (1/1 + 2/3) / 2; R-precision: 1 of the top 2 / 2; the second scores 0
    assert agg["map_avg"] == pytest.approx((1 + 2 / 3) / 2 / 2) and agg["rprec_avg"] == 0.25
    assert agg["at_k"]["10"]["map"] == agg["map_avg"] and agg["n"]["map_avg"] == 2


def test_per_query_values_are_trec_eval_q(tmp_path: Path) -> None:
    from evalkit.cli.main import app

    args = ["score", "--trec-run", str(RESULTS), "--qrels", str(DATA / "qrels.test"), "--gain", "linear", "--k", "500",
            "--per-query"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    expected = _trec_eval_out("out.test.aq")
    lines = {tuple(line.split("\t")[:2]): line.split("\t")[2] for line in res.stdout.splitlines() if line.count("\t") == 2}
    for qid in ("301", "302", "303"):
        assert lines[("map@500", qid)] == expected[("map", qid)]
        assert lines[("precision@500", qid)] == expected[("P_500", qid)]
    data = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout.strip().splitlines()[-1])
    assert f"{data['per_query']['302']['500']['rprec']:.4f}" == expected[("Rprec", "302")]
