"""Seed 001's per-domain golden sets (issue 43 item 4): a file's stem is the domain of its
cases that name none when the run reads several files (a folder's, or several --eval-set
paths) or one file of a `domains/` folder, so the per-domain breakdown is never empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.evalset.load import load_eval_set
from evalkit.run.runner import run

pytestmark = pytest.mark.integration


def _case(cid: str, rel_path: str, **extra: str) -> str:
    import json

    return json.dumps({"id": cid, "question": f"How do I {cid}?", "answerable": True,
                       "gold_supports": [{"rel_path": rel_path}], **extra}) + "\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "cook.md").write_text("# Cooking\n\nTo cook rice, boil it for twenty minutes.\n")
    (vault / "fly.md").write_text("# Flying\n\nTo fly to Lisbon, book the morning flight.\n")
    domains = tmp_path / "eval" / "domains"
    domains.mkdir(parents=True)
    (domains / "food.jsonl").write_text(_case("cook rice", "cook.md") + _case("cook pasta", "cook.md", domain="pasta"))
    (domains / "travel.jsonl").write_text(_case("fly to lisbon", "fly.md"))
    (tmp_path / "eval" / "eval_set.jsonl").write_text(_case("boil rice", "cook.md"))
    return tmp_path


def _domains(project: Path, *eval_sets: Path, run_id: str) -> list[str]:
    result = run({"eval_set": [str(p) for p in eval_sets], "vault": str(project / "vault"), "retrieval_only": True,
                  "k": [5], "results_dir": str(project / "results"), "run_id": run_id})
    assert result.success
    return sorted(result.metrics["by_domain"])


def test_several_eval_set_files_give_a_domain_each(project: Path) -> None:
    domains = project / "eval" / "domains"
    cases = {c.id: c.domain for c in load_eval_set([domains / "food.jsonl", project / "eval" / "eval_set.jsonl"]).cases}
    assert cases == {"cook rice": "food", "cook pasta": "pasta", "boil rice": "eval_set"}  # a case's own domain wins
    assert _domains(project, domains / "food.jsonl", domains / "travel.jsonl", run_id="two-files") == [
        "food", "pasta", "travel"]


def test_one_domain_file_gives_its_domain(project: Path) -> None:
    # seed 001: `bob eval run --golden docs/eval/domains/cdc.jsonl`
    food = project / "eval" / "domains" / "food.jsonl"
    assert {c.id: c.domain for c in load_eval_set([food]).cases} == {"cook rice": "food", "cook pasta": "pasta"}
    assert _domains(project, food, run_id="one-domain") == ["food", "pasta"]


def test_a_lone_eval_set_file_names_no_domain(project: Path) -> None:
    assert [c.domain for c in load_eval_set([project / "eval" / "eval_set.jsonl"]).cases] == [None]
