"""run_eval.py --matrix / --matrix-file / --expect-order end to end on the reference chatbot.

The reference chatbot reads only `options.abstain_threshold`, so the runs go through
tests/integration/matrix_bot.py, a `--target python:` wrapper that builds the reference
chatbot with the request's BM25 parameters. On the bundled 59 cases (nDCG@5, measured):
  bad     bm25_k1=10, bm25_b=1   0.498   deliberately worse: significant vs default (p adj. < 0.01)
  default k1=1.2, b=0.75         0.650
  tuned   bm25_b=0               0.696   better, but not distinguishable from default after Holm
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support import run_eval_cli

REPO = Path(__file__).resolve().parents[2]
BOT = f"python:{REPO / 'tests' / 'integration' / 'matrix_bot.py'}:ask"
MATRIX_TOML = """\
[presets.bad]
params = {bm25_k1 = 10, bm25_b = 1}

[presets.default]
params = {}

[presets.tuned]
params = {bm25_b = 0}
latency_budget_ms = 5000
"""


def _run(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    result = run_eval_cli(*args, eval_set=REPO / "eval_set.jsonl", target=BOT, retrieval_only=True, k=[5, 10],
                          results_dir=tmp_path / "results", env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def matrix_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    tmp = tmp_path_factory.mktemp("matrix")
    (tmp / "m.toml").write_text(MATRIX_TOML, encoding="utf-8")
    code, out, _ = _run(tmp, "--matrix-file", str(tmp / "m.toml"), "--run-id", "mx", "--expect-order", "bad<=default<=tuned:ndcg@5")
    return tmp, code, out


def test_presets_become_sibling_runs_with_one_table(matrix_run: tuple[Path, int, str]) -> None:
    tmp, code, out = matrix_run
    assert code == 0, out
    results = tmp / "results"
    expected = {"bad": {"bm25_k1": 10, "bm25_b": 1}, "default": {}, "tuned": {"bm25_b": 0}}
    for name, params in expected.items():
        config = json.loads((results / f"mx-{name}" / "config.json").read_text())
        assert (results / f"mx-{name}" / "metrics.json").is_file()
        assert (config["settings"].get("params") or {}) == params
    assert "mx-bad" in out and "mx-default" in out and "mx-tuned" in out
    assert "▲ significant" in out  # default vs bad
    assert "≈" in out  # tuned vs default
    assert "expect-order bad<=default<=tuned:ndcg@5: holds" in out


def test_matrix_json_records_presets_runs_table_and_verdict(matrix_run: tuple[Path, int, str]) -> None:
    tmp, _, _ = matrix_run
    doc = json.loads((tmp / "results" / "mx.matrix.json").read_text())
    assert [p["name"] for p in doc["presets"]] == ["bad", "default", "tuned"]
    assert doc["presets"][2]["flags"] == {"latency_budget_ms": 5000}
    rows = {r["preset"]: r for r in doc["rows"]}
    assert [r["run_id"] for r in doc["rows"]] == ["mx-bad", "mx-default", "mx-tuned"]
    assert all(r["n"] == 66 for r in doc["rows"])  # 59 questions and 7 conversation turns
    assert rows["bad"]["metric_value"] < rows["default"]["metric_value"] < rows["tuned"]["metric_value"]
    assert rows["default"]["vs_previous"]["significant"] is True
    assert rows["tuned"]["vs_previous"]["significant"] is False
    assert rows["bad"]["latency_p50_ms"] is not None and rows["bad"]["cost_usd"] == 0.0
    pairs = doc["order"]["pairs"]
    assert doc["order"]["passed"] is True and doc["ok"] is True
    assert [p["verdict"] for p in pairs] == ["holds", "holds"]
    assert pairs[0]["delta"] == pytest.approx(rows["default"]["metric_value"] - rows["bad"]["metric_value"])
    tuned = json.loads((tmp / "results" / "mx-tuned" / "metrics.json").read_text())
    assert tuned["aggregate_metrics"]["within_budget_rate"] == 1.0


def test_significant_inversion_exits_1(tmp_path: Path) -> None:
    code, out, err = _run(tmp_path, "--matrix", "bm25_k1=1.2,10", "--run-id", "inv", "--expect-order", "1.2<=10:ndcg@5")
    assert code == 1, out + err
    assert "1.2 <= 10: violated" in out
    assert "expect-order 1.2<=10:ndcg@5 violated" in err
    doc = json.loads((tmp_path / "results" / "inv.matrix.json").read_text())
    assert doc["order"]["passed"] is False and doc["order"]["pairs"][0]["significant"] is True


def test_non_significant_inversion_passes(tmp_path: Path) -> None:
    code, out, err = _run(tmp_path, "--matrix", "bm25_b=0,0.75", "--run-id", "nd", "--expect-order", "0<=0.75", "--quiet", "--json")
    assert code == 0, out + err
    doc = json.loads(out.strip().splitlines()[-1])
    (pair,) = doc["order"]["pairs"]
    assert pair["delta"] < 0 and pair["significant"] is False
    assert pair["verdict"] == "not distinguishable"


def test_presets_compared_on_answer_quality(tmp_path: Path) -> None:
    # Seed 002's model presets judged for answer quality (the offline heuristic here): the
    # table's runs carry answer_quality_avg and --expect-order tests it with compare_runs.
    result = run_eval_cli(eval_set=REPO / "eval_set.jsonl", target=BOT, answer_quality=True, k=5,
                          results_dir=tmp_path / "results", matrix="bm25_k1=1.2,10", run_id="aq",
                          expect_order="10<=1.2:answer_quality_avg", quiet=True, json=True)
    doc = json.loads(result.stdout.strip().splitlines()[-1])
    for name in ("1.2", "10"):
        metrics = json.loads((tmp_path / "results" / f"aq-{name}" / "metrics.json").read_text())
        assert metrics["aggregate_metrics"]["n"]["answer_quality_avg"] > 0
    (pair,) = doc["order"]["pairs"]
    assert doc["order"]["metric"] == "answer_quality_avg" and pair["delta"] is not None
    # Measured: 0.632 (k1 = 10) <= 0.659 (k1 = 1.2); the order holds and the exit code says so.
    assert pair["value_a"] < pair["value_b"] and doc["order"]["passed"] and result.exit_code == 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--matrix", "bm25_b=0,1", "--expect-order", "0<=2"], "unknown preset(s) '2'"),
        (["--matrix", "bm25_b=0,1", "--expect-order", "0<=1:ndcg@20"], "ndcg@20: the runs measure K = 5, 10"),
        (["--matrix", "bm25_b=0,1", "--expect-order", "0<=1:nDCG"], "unknown metric"),
        (["--matrix", "bm25_b=0,1", "--resume", "x"], "no run of matrix 'x'"),
        (["--expect-order", "a<=b"], "needs --matrix"),
        (["--answer-quality"], "needs a judge"),
        (["--matrix", "bm25_b"], "expected KEY=V1,V2"),
    ],
)
def test_bad_input_exits_2_before_anything_runs(tmp_path: Path, args: list[str], needle: str) -> None:
    code, out, err = _run(tmp_path, *args)
    assert code == 2, out + err
    assert needle in err
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


def test_a_stopped_matrix_is_finished_with_resume(matrix_run: tuple[Path, int, str], tmp_path: Path) -> None:
    # Issue 38: a matrix killed in a preset could not be finished ("run ... exists already").
    # Here, as a kill leaves it: `default` stopped after 20 cases, `tuned` not begun.
    done, _, _ = matrix_run
    results = tmp_path / "results"
    results.mkdir()
    for preset in ("bad", "default"):
        src, dst = done / "results" / f"mx-{preset}", results / f"mx-{preset}"
        dst.mkdir()
        (dst / "config.json").write_bytes((src / "config.json").read_bytes())
        lines = (src / "results.jsonl").read_bytes().splitlines(keepends=True)
        (dst / "results.jsonl").write_bytes(b"".join(lines if preset == "bad" else lines[:20]))
    (tmp_path / "m.toml").write_text(MATRIX_TOML, encoding="utf-8")
    matrix = ["--matrix-file", str(tmp_path / "m.toml"), "--expect-order", "bad<=default<=tuned:ndcg@5"]

    code, _, err = _run(tmp_path, *matrix, "--run-id", "mx")
    assert code == 2 and "finish the matrix with --resume mx" in err
    code, _, err = _run(tmp_path, *matrix, "--resume", "mx")
    assert code == 0, err
    for preset in ("bad", "default", "tuned"):
        ids = [json.loads(line)["test_case_id"] for line in (results / f"mx-{preset}" / "results.jsonl").read_bytes().splitlines()]
        assert len(ids) == len(set(ids)) == 66, preset
    # The same table as the matrix that was never stopped (its runs' scores are deterministic).
    mine, theirs = (json.loads((d / "mx.matrix.json").read_text()) for d in (results, done / "results"))
    assert [r["values"] for r in mine["rows"]] == [r["values"] for r in theirs["rows"]]
    assert mine["order"]["pairs"] == theirs["order"]["pairs"]
    # Resuming a finished matrix makes the same table again.
    code, _, err = _run(tmp_path, *matrix, "--resume", "mx")
    assert code == 0, err
    assert json.loads((results / "mx.matrix.json").read_text())["rows"] == mine["rows"]


def test_resume_refuses_a_preset_whose_settings_changed(matrix_run: tuple[Path, int, str], tmp_path: Path) -> None:
    done, _, _ = matrix_run
    results = tmp_path / "results"
    results.mkdir()
    dst = results / "mx-bad"
    dst.mkdir()
    (dst / "config.json").write_bytes((done / "results" / "mx-bad" / "config.json").read_bytes())
    (tmp_path / "m.toml").write_text(MATRIX_TOML.replace("bm25_k1 = 10", "bm25_k1 = 9"), encoding="utf-8")
    code, _, err = _run(tmp_path, "--matrix-file", str(tmp_path / "m.toml"), "--resume", "mx")
    assert code == 2 and "cannot resume mx-bad: the result-affecting config differs" in err, err
    assert sorted(p.name for p in results.iterdir()) == ["mx-bad"]
