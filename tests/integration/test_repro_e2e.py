"""The reproducibility check end to end (issue 14 item 4): `evalkit run --repro` and
`evalkit repro --run-id ID` over the in-process reference chatbot and over a python
target that is not deterministic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app
from tests.support import bundled_cases

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_VAULT = ROOT / "sample_vault"
MAIN_SET = ROOT / "eval_set.jsonl"
needs_sample = pytest.mark.skipif(not (SAMPLE_VAULT.is_dir() and MAIN_SET.is_file()), reason="sample_vault/ not there yet")

FALLBACK_SET = [
    {"id": "t1", "question": "How often should I water tomato plants?", "answerable": True,
     "gold_supports": [{"rel_path": "Garden/Tomatoes.md", "heading_path": "# Tomatoes > ## Watering"}]},
    {"id": "t2", "question": "At what temperature do I bake sourdough?", "answerable": True,
     "gold_supports": [{"rel_path": "Kitchen/Bread.md", "heading_path": "# Sourdough bread"}]},
    {"id": "t3", "question": "What is the capital of Mars?", "answerable": False},
]


@pytest.fixture(scope="module")
def eval_set(reference_vault: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if reference_vault == SAMPLE_VAULT and MAIN_SET.is_file():
        return MAIN_SET
    path = tmp_path_factory.mktemp("es") / "eval_set.jsonl"
    path.write_text("\n".join(json.dumps(c) for c in FALLBACK_SET) + "\n")
    return path


def _invoke(args: list[str]):
    return CliRunner().invoke(app, args, catch_exceptions=False)


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def _n_cases(eval_set: Path) -> int:
    return len(bundled_cases(eval_set))  # a conversation's turns are cases


def test_the_reference_chatbot_twice_is_reproducible(reference_vault, eval_set, tmp_path):
    out = _invoke(["run", "--eval-set", str(eval_set), "--vault", str(reference_vault), "--retrieval-only", "--repro",
                   "--results-dir", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    payload = _last_json(out.stdout)
    repro = payload["repro"]
    run_a = payload["run_id"]
    assert repro["reproducible"] is True and repro["differences"] == []
    assert (repro["run_a"], repro["run_b"]) == (run_a, f"{run_a}-repro")
    assert repro["n_cases"] == _n_cases(eval_set)
    assert f"repro: PASS — {repro['n_cases']} cases, 0 differences (tolerance 0)" in out.stderr
    # `latest` stays the checked run, not its by-product
    assert (tmp_path / "latest").resolve().name == run_a

    config_a = json.loads((tmp_path / run_a / "config.json").read_text())
    config_b = json.loads((tmp_path / f"{run_a}-repro" / "config.json").read_text())
    assert config_a["reproducibility"] == {
        "seed": None, "top_k": 5, "ks": [5], "tie_break": "score_final desc, chunk_id asc", "timestamps": "UTC",
        "judge_temperature": None, "target_deterministic": True,
    }
    assert config_a["target"]["tie_break"] == "score_final desc, chunk_id asc"
    # recorded, not hashed: the same config has the same hash, with or without the block
    assert "reproducibility" not in config_a["hashed"] and config_a["config_hash"] == config_b["config_hash"]


def test_the_reference_chatbot_with_a_judge_and_two_ks(reference_vault, eval_set, tmp_path):
    out = _invoke(["run", "--eval-set", str(eval_set), "--vault", str(reference_vault), "--k", "3", "--k", "10",
                   "--seed", "7", "--repro", "--limit", "6", "--results-dir", str(tmp_path), "--quiet"])
    assert out.exit_code == 0, out.output
    assert out.stdout.strip().splitlines()[-1].startswith("repro: PASS — ")
    (config,) = [json.loads(p.read_text()) for p in tmp_path.glob("*/config.json")
                 if not p.parent.is_symlink() and not p.parent.name.endswith("-repro")]
    knobs = config["reproducibility"]
    assert (knobs["seed"], knobs["top_k"], knobs["ks"]) == (7, 10, [3, 10])
    assert knobs["judge_temperature"] is None  # the offline heuristic judge does not sample


@needs_sample
def test_a_nondeterministic_target_fails_naming_a_case(tmp_path):
    first_case = json.loads(MAIN_SET.read_text().splitlines()[0])["id"]
    args = ["run", "--eval-set", str(MAIN_SET), "--target", "python:tests.integration.flaky_bot:ask", "--retrieval-only",
            "--limit", "4", "--results-dir", str(tmp_path), "--repro"]
    out = _invoke([*args, "--run-id", "flaky"])
    assert out.exit_code == 1, out.output
    verdict = out.stdout.strip().splitlines()[-1]
    assert verdict.startswith("repro: FAIL — 4 of 4 cases differ (tolerance 0): ") and first_case in verdict
    # the scores moved (by 0.001 per earlier ask), the ranking and the metrics did not
    table = out.stdout[out.stdout.index("repro: run A flaky, run B flaky-repro"):]
    assert first_case in table and "ranking retrieved_chunks.1.score_final" in table
    assert "metric " not in table
    config = json.loads((tmp_path / "flaky" / "config.json").read_text())
    assert config["reproducibility"]["tie_break"] is None and config["reproducibility"]["target_deterministic"] is None

    # the same drift within --tolerance passes
    tolerant = _invoke([*args, "--run-id", "tolerant", "--tolerance", "0.5"])
    assert tolerant.exit_code == 0, tolerant.output
    assert "repro: PASS — 4 cases, 0 differences (tolerance 0.5)" in tolerant.stdout


@needs_sample
def test_an_incomplete_first_run_stops_before_the_second(tmp_path):
    out = _invoke(["run", "--eval-set", str(MAIN_SET), "--target", "python:tests.integration.flaky_bot:broken",
                   "--retrieval-only", "--no-probe", "--limit", "2", "--results-dir", str(tmp_path), "--repro",
                   "--run-id", "down"])
    assert out.exit_code == 3, out.output
    assert "incomplete run" in out.stderr and "no second run" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink()) == ["down"]


def test_evalkit_repro_reruns_a_stored_run(reference_vault, eval_set, tmp_path, monkeypatch):
    base = ["--eval-set", str(eval_set), "--vault", str(reference_vault), "--results-dir", str(tmp_path)]
    assert _invoke(["run", *base, "--retrieval-only", "--run-id", "base", "--quiet"]).exit_code == 0
    # an in-process run is re-run in process: EVAL_API_URL (an API run_eval would ask instead) is refused
    monkeypatch.setenv("EVAL_API_URL", "http://127.0.0.1:9")
    refused = _invoke(["repro", "--run-id", "base", "--results-dir", str(tmp_path)])
    assert refused.exit_code == 2 and "EVAL_API_URL is set, but run base ran the in-process" in refused.stderr
    monkeypatch.delenv("EVAL_API_URL")
    again = ["repro", "--run-id", "latest", "--results-dir", str(tmp_path), "--json"]
    first = _invoke(again)
    assert first.exit_code == 0, first.output
    report = _last_json(first.stdout)
    assert (report["run_a"], report["run_b"], report["reproducible"]) == ("base", "base-repro-1", True)
    assert report["n_cases"] == _n_cases(eval_set) and report["notes"] == []
    assert "repro: PASS" in first.stderr
    # `latest` is where it was before the check (issue 28 item 4: it never moves back to an old
    # run, nor on to the check's by-product), so a second check makes the next re-run
    assert (tmp_path / "latest").resolve().name == "base"
    second = _invoke(again)
    assert second.exit_code == 0 and _last_json(second.stdout)["run_b"] == "base-repro-2"
    # a newer run, then a check of the old one: latest stays the newer run
    assert _invoke(["run", *base, "--retrieval-only", "--run-id", "newer", "--quiet"]).exit_code == 0
    assert _invoke(["repro", "--run-id", "base", "--results-dir", str(tmp_path)]).exit_code == 0
    assert (tmp_path / "latest").resolve().name == "newer"
    rerun = json.loads((tmp_path / "base-repro-1" / "config.json").read_text())
    stored = json.loads((tmp_path / "base" / "config.json").read_text())
    assert rerun["config_hash"] == stored["config_hash"] and rerun["target"]["kind"] == "reference"


def test_evalkit_repro_refuses_a_changed_eval_set(reference_vault, eval_set, tmp_path):
    cases = tmp_path / "set.jsonl"
    lines = eval_set.read_text().splitlines()
    cases.write_text("\n".join(lines[:3]) + "\n")
    results = tmp_path / "results"
    run = ["run", "--eval-set", str(cases), "--vault", str(reference_vault), "--retrieval-only", "--results-dir", str(results)]
    assert _invoke([*run, "--run-id", "r", "--quiet"]).exit_code == 0
    recorded = json.loads((results / "r" / "config.json").read_text())["dataset_version"]
    cases.write_text("\n".join(lines[:2]) + "\n")
    out = _invoke(["repro", "--run-id", "r", "--results-dir", str(results)])
    assert out.exit_code == 2, out.output
    assert "the eval set changed" in out.stderr and recorded in out.stderr
    assert sorted(p.name for p in results.iterdir() if p.is_dir() and not p.is_symlink()) == ["r"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        pytest.param(["--repro", "--baseline", "b"], "--baseline: cannot be combined with --repro", id="baseline"),
        pytest.param(["--repro", "--resume", "b"], "--resume: cannot be combined with --repro", id="resume"),
        pytest.param(["--repro", "--threshold", "0.5"], "--threshold: cannot be combined with --repro", id="threshold"),
        pytest.param(["--repro", "--matrix", "folder_mode=off,on"], "--matrix: cannot be combined with --repro", id="matrix"),
        pytest.param(["--tolerance", "0.1"], "--tolerance: goes with --repro", id="tolerance-alone"),
    ],
)
def test_repro_refuses_other_run_modes(reference_vault, eval_set, tmp_path, extra, message):
    out = _invoke(["run", "--eval-set", str(eval_set), "--vault", str(reference_vault), "--retrieval-only",
                   "--results-dir", str(tmp_path), *extra])
    assert out.exit_code == 2, out.output
    assert message in out.stderr
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # nothing ran


def test_over_http_the_tie_break_is_unknown_and_a_stored_run_reruns(reference_server, eval_set, tmp_path):
    base = ["--eval-set", str(eval_set), "--api-url", reference_server, "--retrieval-only", "--results-dir", str(tmp_path)]
    out = _invoke(["run", *base, "--repro", "--run-id", "h", "--limit", "5", "--quiet"])
    assert out.exit_code == 0, out.output
    knobs = json.loads((tmp_path / "h" / "config.json").read_text())["reproducibility"]
    # the served chatbot breaks ties like the in-process one, but an HTTP target declares nothing
    assert knobs["tie_break"] is None and knobs["target_deterministic"] is None
    again = _invoke(["repro", "--run-id", "h", "--results-dir", str(tmp_path), "--api-url", reference_server, "-q"])
    assert again.exit_code == 0, again.output
    assert again.stdout.strip() == "repro: PASS — 5 cases, 0 differences (tolerance 0)"
