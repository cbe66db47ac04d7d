"""MTRAG's human ratings -> a run folder with per-annotator grades (issue 42, item 1).

The real file (../shared/corpora/mtrag/human_evaluations.json, SOURCE.md there; skipped
when absent): the annotators' agreement evalkit reports equals krippendorff's and
statsmodels' computed here straight from the JSON, without evalkit's code."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evalkit.errors import InputError
from evalkit.interop.importers.mtrag_ratings import GRADE_OF, import_ratings, rated_run
from evalkit.judges import grades
from evalkit.store.runs import RunDir

pytestmark = pytest.mark.integration

RATINGS = Path(__file__).resolve().parents[2].parent / "shared" / "corpora" / "mtrag" / "human_evaluations.json"


def _tiny(tmp_path: Path) -> Path:
    data = {
        "documents": [{"document_id": "d-0-5", "text": "Passage text."}],
        "tasks": [{"task_id": "c1<::>2", "input": [{"speaker": "user", "text": "Hi?"}, {"speaker": "agent", "text": "Yes."},
                                                  {"speaker": "user", "text": "And then?"}],
                   "contexts": [{"document_id": "d-0-5"}], "targets": [{"text": "Then this."}],
                   "Answerability": ["ANSWERABLE"], "Collection": "govt"}],
        "evaluations": [{"task_id": "c1<::>2", "model_id": "m", "model_response": "Then this [1].", "annotations": {
            "faithfulness": {"a1": {"value": "4", "timestamp": 0}, "a2": {"value": "2", "timestamp": 0}},
            "completeness": {"a1": {"value": "3", "timestamp": 0}},
            "naturalness": {"a2": {"value": "1", "timestamp": 0}}}}],
    }
    path = tmp_path / "ratings.json"
    path.write_text(json.dumps(data))
    return path


def test_mapping_and_run_folder(tmp_path: Path):
    folder = import_ratings(_tiny(tmp_path), tmp_path / "results", "m")
    run = RunDir.open(tmp_path / "results", folder.name)
    (rec,) = run.read_results()
    assert rec["test_case_id"] == "c1#2" and rec["question"] == "And then?"  # `evalkit import --format mtrag`'s turn id
    assert rec["history"] == [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Yes."}]
    assert rec["retrieved_chunks"][0]["text"] == "Passage text."
    by = grades.read_grades(run)["c1#2"]
    # faithfulness -> groundedness, completeness -> correctness, Yes 4 -> 5, Mostly Yes 3 -> 4, Mostly No 2 -> 2
    assert by["mtrag:a1"]["groundedness"] == 5 and by["mtrag:a1"]["correctness"] == 4
    assert by["mtrag:a2"]["groundedness"] == 2 and by["mtrag:a2"].get("correctness") is None
    assert by["mtrag:a2"]["source"]["ratings"] == {"faithfulness": 2, "naturalness": 1}
    assert by["mtrag:a1"]["answer_sha256"] == grades.graded_item(rec)["answer_sha256"]
    with pytest.raises(InputError, match="exists"):
        import_ratings(_tiny(tmp_path), tmp_path / "results", "m")
    with pytest.raises(InputError, match="no answer of model 'x'; the file has m"):
        rated_run(_tiny(tmp_path), "x")


@pytest.mark.skipif(not RATINGS.is_file(), reason=f"MTRAG ratings not found at {RATINGS}")
@pytest.mark.parametrize("model", ["reference", "gpt-4o", "llama-3.1-405b-instruct"])
def test_annotator_agreement_equals_an_independent_computation(tmp_path: Path, model: str):
    kd = pytest.importorskip("krippendorff")
    ir = pytest.importorskip("statsmodels.stats.inter_rater")
    folder = import_ratings(RATINGS, tmp_path, model)
    agree = grades.agreement(RunDir.open(tmp_path, folder.name))

    data = json.loads(RATINGS.read_text())
    evaluations = [e for e in data["evaluations"] if e["model_id"] == model]
    assert len(evaluations) == 119
    for aspect, kind in (("faithfulness", "groundedness"), ("completeness", "correctness")):
        raters = sorted({a for e in evaluations for a in e["annotations"].get(aspect, {})})
        # raters × answers, MTRAG's own 1-4 values, NaN where an annotator did not rate
        raw = np.array([[float(e["annotations"].get(aspect, {}).get(r, {}).get("value", "nan")) for e in evaluations]
                        for r in raters])
        mapped = np.vectorize(lambda v: np.nan if np.isnan(v) else float(GRADE_OF[int(v)]))(raw)
        h = agree[kind]["humans"]
        pairable = int((np.sum(~np.isnan(raw), axis=0) >= 2).sum())
        assert h["n_cases"] == pairable and h["n_graders"] == len(raters)
        # reference: krippendorff.alpha; ordinal alpha depends only on order, so MTRAG's values give the same
        assert h["alpha_ordinal"] == pytest.approx(kd.alpha(reliability_data=raw, level_of_measurement="ordinal"), abs=1e-12)
        assert h["alpha_interval"] == pytest.approx(kd.alpha(reliability_data=mapped, level_of_measurement="interval"),
                                                    abs=1e-12)
        # reference: statsmodels' Fleiss' kappa over the answers all three annotators rated
        full = [col[~np.isnan(col)].astype(int) for col in raw.T if np.sum(~np.isnan(col)) == 3]
        table, _ = ir.aggregate_raters(np.array(full), n_cat=None)
        assert (h["fleiss_raters"], h["fleiss_n"]) == (3, len(full))
        assert h["fleiss_kappa"] == pytest.approx(ir.fleiss_kappa(table, method="fleiss"), abs=1e-12)


def test_evalkit_import_format_mtrag_ratings(tmp_path: Path):
    from typer.testing import CliRunner

    from evalkit.cli.main import app

    src, results = _tiny(tmp_path), tmp_path / "results"
    done = CliRunner().invoke(app, ["import", "--format", "mtrag-ratings", str(src), "--model", "m", "--results-dir", str(results)])
    assert done.exit_code == 0, done.output
    assert "wrote the run mtrag-m" in done.output and "evalkit judge --run-id mtrag-m" in done.output
    assert len(grades.read_grades(RunDir.open(results, "mtrag-m"))["c1#2"]) == 2
    again = CliRunner().invoke(app, ["import", "--format", "mtrag-ratings", str(src), "--model", "m", "--results-dir", str(results)])
    assert again.exit_code == 2 and "give --force" in again.output
    assert CliRunner().invoke(app, ["import", "--format", "mtrag-ratings", str(src), "--model", "m", "--results-dir",
                                    str(results), "--force"]).exit_code == 0
    bad = CliRunner().invoke(app, ["import", "--format", "mtrag-ratings", str(src), "--results-dir", str(results)])
    assert bad.exit_code == 2 and "--model" in bad.output
