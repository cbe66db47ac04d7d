"""`evalkit lock`, and run_eval / the labeler / the importer keeping baselined eval sets
immutable (issue 14 item 6), over the in-process reference chatbot."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app
from evalkit.evalset import lock as lk
from tests.support import bundled_cases, run_eval_api

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_VAULT = ROOT / "sample_vault"
MAIN_SET = ROOT / "eval_set.jsonl"


def _evalkit(*args: object, input: str | None = None):
    return CliRunner().invoke(app, [str(a) for a in args], input=input)


# The runs here: the in-process reference chatbot, retrieval only, five cases.
SAMPLE = {"vault": SAMPLE_VAULT, "retrieval_only": True, "limit": 5}


def _runs(results: Path) -> list[str]:
    return sorted(p.name for p in results.iterdir() if p.is_dir() and not p.is_symlink()) if results.is_dir() else []


def _edit(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    case = json.loads(lines[0])
    case["question"] += " (reworded)"
    path.write_text("\n".join([json.dumps(case), *lines[1:]]) + "\n", encoding="utf-8")


@pytest.fixture()
def v1(tmp_path: Path) -> Path:
    path = tmp_path / "eval_set.v1.jsonl"
    shutil.copy(MAIN_SET, path)
    return path


def test_lock_list_remove(v1: Path, tmp_path: Path) -> None:
    lock = tmp_path / "eval_sets.lock"
    n = len(bundled_cases(v1))  # a conversation's turns are cases

    out = _evalkit("lock", v1, "--run-id", "base")
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith(f"evalkit: locked {v1} in {lock} (sha256 ") and f"{n} cases, run base)" in out.stdout
    assert json.loads(lock.read_text())["eval_sets"]["eval_set.v1.jsonl"]["run_id"] == "base"
    again = _evalkit("lock", v1)
    assert again.exit_code == 0 and again.stdout.startswith(f"evalkit: already locked {v1}")

    listed = _evalkit("lock", "--list", tmp_path)
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.splitlines()[0] == f"{lock}:"
    assert "eval_set.v1.jsonl" in listed.stdout and "run base" in listed.stdout and listed.stdout.rstrip().endswith("ok")

    _edit(v1)
    assert _evalkit("lock", "--list", v1).stdout.rstrip().endswith("changed")
    refused = _evalkit("lock", v1)
    assert refused.exit_code == 2
    (line,) = refused.stderr.splitlines()
    assert line.startswith(f"evalkit: {v1}: changed since it was baselined by run base ({lock}: sha256 ")
    assert f"write the changed cases to {tmp_path / 'eval_set.v2.jsonl'}" in line

    removed = _evalkit("lock", "--remove", v1)
    assert removed.exit_code == 0 and removed.stdout == f"evalkit: unlocked {v1} in {lock}\n"
    assert _evalkit("lock", v1).exit_code == 0  # unlocked: its new content may be locked
    assert _evalkit("lock", "--remove", tmp_path / "other.jsonl").exit_code == 2  # not locked
    assert _evalkit("lock").exit_code == 2  # no PATH
    assert _evalkit("lock", "--list", "--remove", v1).exit_code == 2
    (tmp_path / "empty").mkdir()
    empty = _evalkit("lock", "--list", tmp_path / "empty")
    assert empty.exit_code == 0 and "no eval set locked" in empty.stdout


def test_lock_refuses_an_invalid_eval_set(tmp_path: Path) -> None:
    bad = tmp_path / "bad.v1.jsonl"
    bad.write_text('{"id": "a", "question": "Q?"}\n')
    out = _evalkit("lock", bad)
    assert out.exit_code == 2 and "answerable" in out.stderr
    assert not (tmp_path / "eval_sets.lock").exists()


@pytest.mark.skipif(not any(SAMPLE_VAULT.rglob("*.md")), reason="sample_vault/ has no notes")
def test_a_run_locks_a_versioned_file_and_refuses_it_once_edited(v1: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    result = run_eval_api(eval_set=v1, results_dir=results, **SAMPLE)
    assert result.success and not result.incomplete
    entry = lk.locked(v1)
    assert entry is not None and entry.run_id == result.run_id
    assert entry.sha256 == json.loads((result.run_dir / "metrics.json").read_text())["dataset_version"]
    metrics_before = (result.run_dir / "metrics.json").read_bytes()

    second = run_eval_api(eval_set=v1, results_dir=results, **SAMPLE)  # unchanged: runs, the lock keeps the first run's id
    assert lk.locked(v1) == entry and second.run_id != result.run_id

    _edit(v1)
    runs = _runs(results)
    out = _evalkit("run", "--eval-set", v1, "--vault", SAMPLE_VAULT, "--retrieval-only", "--results-dir", results,
                   "--limit", "5", "--quiet")
    assert out.exit_code == 2, out.output
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"evalkit: {v1}: changed since it was baselined by run {result.run_id}")
    assert str(tmp_path / "eval_set.v2.jsonl") in line
    assert _runs(results) == runs  # nothing written: no new run folder
    assert (result.run_dir / "metrics.json").read_bytes() == metrics_before


@pytest.mark.skipif(not any(SAMPLE_VAULT.rglob("*.md")), reason="sample_vault/ has no notes")
def test_an_unversioned_file_is_not_locked_by_a_run_but_by_gating_against_a_baseline(tmp_path: Path) -> None:
    es = tmp_path / "eval_set.jsonl"
    shutil.copy(MAIN_SET, es)
    results = tmp_path / "results"
    base = run_eval_api(eval_set=es, results_dir=results, **SAMPLE, run_id="base")
    assert base.success
    assert not (tmp_path / "eval_sets.lock").exists()

    gated = run_eval_api(eval_set=es, results_dir=results, **SAMPLE, baseline="base")
    assert gated.gate is not None
    entry = lk.locked(es)
    assert entry is not None and entry.run_id == "base"  # the baseline's id, not the gated run's

    _edit(es)
    out = _evalkit("run", "--eval-set", es, "--vault", SAMPLE_VAULT, "--retrieval-only", "--results-dir", results,
                   "--limit", "5", "--baseline", "base")
    assert out.exit_code == 2
    assert "changed since it was baselined by run base" in out.stderr and str(tmp_path / "eval_set.v2.jsonl") in out.stderr


def test_an_incomplete_run_locks_nothing(tmp_path: Path) -> None:
    # The first call (the probe) answers; every case after it fails: the run is incomplete.
    bot = tmp_path / "bot.py"
    bot.write_text(
        "calls = []\n"
        "def ask(request):\n"
        "    calls.append(1)\n"
        "    if len(calls) > 1:\n"
        "        raise RuntimeError('down')\n"
        "    return {'answer': 'x', 'references': [], 'abstained': False, 'debug': {'retrieved_chunks': []}}\n"
    )
    es = tmp_path / "tiny.v1.jsonl"
    es.write_text("".join(json.dumps({"id": f"c{i}", "question": f"q{i}?", "answerable": False}) + "\n" for i in range(3)))
    from evalkit.run.runner import run

    result = run({"eval_set": [str(es)], "target": f"python:{bot}:ask", "retrieval_only": True,
                  "results_dir": str(tmp_path / "results")})
    assert result.incomplete
    assert lk.locked(es) is None and not (tmp_path / "eval_sets.lock").exists()


def test_the_labeler_and_the_importer_refuse_a_locked_file(v1: Path, tmp_path: Path) -> None:
    assert _evalkit("lock", v1).exit_code == 0
    before = v1.read_bytes()

    label = _evalkit("label", "--accept-top", "2", "--eval-set", v1, "--vault", SAMPLE_VAULT,
                     "--results-dir", tmp_path / "results")
    assert label.exit_code == 2, label.output
    assert f"evalkit: {v1}: baselined (" in label.stderr and f"--output {tmp_path / 'eval_set.v2.jsonl'}" in label.stderr
    # --new refuses before its first question, so no answer is typed in vain (issue 28 item 1).
    new = _evalkit("label", "--new", "--eval-set", v1, "--results-dir", tmp_path / "results",
                   input="How long do I proof the loaf?\ny\n\n\n\n")
    assert new.exit_code == 2 and "baselined" in new.stderr and "question:" not in new.stdout

    fixture = tmp_path / "queries.json"
    fixture.write_text(json.dumps([{"id": "q1", "query": "Where is the starter?", "expected": []}]))
    imported = _evalkit("import", "--format", "gno", fixture, "--output", v1, "--force")
    assert imported.exit_code == 2, imported.output
    assert "baselined" in imported.stderr and str(tmp_path / "eval_set.v2.jsonl") in imported.stderr
    assert v1.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.skipif(not any(SAMPLE_VAULT.rglob("*.md")), reason="sample_vault/ has no notes")
def test_a_baseline_of_other_eval_set_content_is_refused_before_running(tmp_path: Path) -> None:
    # The other half of the rule: a baseline whose dataset_version differs (gate.check_invariants).
    es = tmp_path / "eval_set.jsonl"
    shutil.copy(MAIN_SET, es)
    results = tmp_path / "results"
    assert run_eval_api(eval_set=es, results_dir=results, **SAMPLE, run_id="base").success
    _edit(es)  # same cases, one question reworded: another dataset_version
    runs = _runs(results)
    out = _evalkit("run", "--eval-set", es, "--vault", SAMPLE_VAULT, "--retrieval-only", "--results-dir", results,
                   "--limit", "5", "--baseline", "base")
    assert out.exit_code == 2
    assert "evalkit: --baseline: cannot gate against base: eval sets differ (dataset_version" in out.stderr
    assert _runs(results) == runs and not (tmp_path / "eval_sets.lock").exists()
