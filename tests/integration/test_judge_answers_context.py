"""judge_answers on runs that run_eval made in process: cut (200-char) chunk text is re-read
from the vault config.json records, a changed vault leaves chunks cut and the re-judge is
refused without --allow-truncated-context, and a --store-full-text run needs nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalkit.cli.judge_answers import app as judge_app
from tests.support import run_eval_cli, write_eval_set

pytestmark = pytest.mark.integration

# Each answer sentence sits past the first 200 characters of its chunk, so a judge that
# reads only the stored prefix finds it unsupported.
SERVER = """# Server

The web server is the front door of the whole deployment and every request passes through it before reaching the application workers, the cache layer or the background queue that handles slow jobs.
The server listens on port 8443 for encrypted traffic and redirects plain requests from port 8080.
Operators rotate the TLS certificate every ninety days with the renew script in the tools folder.
"""
DB = """# Database

The primary database cluster holds every customer record, every invoice and every audit event, and it is replicated synchronously to a standby node in the second availability zone for safety.
The database runs PostgreSQL 16 with logical replication to the analytics warehouse.
Backups are taken every six hours and restored weekly in a drill.
"""
CASES = [
    {"id": "q1", "question": "Which port does the server listen on for encrypted traffic?", "answerable": True,
     "expected_key_facts": ["port 8443"], "gold_supports": [{"rel_path": "ops/server.md", "heading_path": "# Server"}]},
    {"id": "q2", "question": "Which PostgreSQL version does the database run?", "answerable": True,
     "expected_key_facts": ["PostgreSQL 16"], "gold_supports": [{"rel_path": "ops/db.md", "heading_path": "# Database"}]},
]


@pytest.fixture
def project(tmp_path: Path) -> dict[str, Path]:
    vault = tmp_path / "vault"
    (vault / "ops").mkdir(parents=True)
    (vault / "ops" / "server.md").write_text(SERVER)
    (vault / "ops" / "db.md").write_text(DB)
    eval_set = write_eval_set(tmp_path / "eval_set.jsonl", CASES)
    return {"vault": vault, "eval_set": eval_set, "results": tmp_path / "results"}


def _run_eval(p: dict[str, Path], run_id: str, *args: str) -> None:
    res = run_eval_cli(*args, eval_set=p["eval_set"], vault=p["vault"], results_dir=p["results"], run_id=run_id,
                       quiet=True)
    assert res.exit_code == 0, res.output


def _judge(p: dict[str, Path], run_id: str, *args: str) -> Any:
    return CliRunner().invoke(judge_app, ["--run-id", run_id, "--results-dir", str(p["results"]), *args], catch_exceptions=False)


def _records(p: dict[str, Path], run_id: str) -> dict[str, dict]:
    lines = (p["results"] / run_id / "results.jsonl").read_text().splitlines()
    return {r["test_case_id"]: r for r in map(json.loads, lines)}


def _scores(recs: dict[str, dict]) -> dict[str, tuple]:
    return {cid: (r["groundedness"]["score"], r["correctness"]["score"]) for cid, r in recs.items()}


def test_retrieval_only_reference_run_is_judged_on_the_recorded_vaults_full_text(project):
    # regression: issue item 6, 51 of 59 cases were judged on 200-char text (groundedness 3.63, not 4.22)
    _run_eval(project, "judged")  # the heuristic judges during the run, on full chunk text
    _run_eval(project, "retrieval-only", "--retrieval-only")
    stored = _records(project, "retrieval-only")
    assert all(c["text_truncated"] for r in stored.values() for c in r["retrieved_chunks"])

    res = _judge(project, "retrieval-only", "--quiet", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["warnings"] == []
    assert out["context"]["origin"] == "config.json" and out["context"]["source"] == "reference_chunk_ids"
    assert out["context"]["cases_judged_on_cut_text"] == 0 and out["context"]["chunks_recovered"] > 0
    recs = _records(project, "retrieval-only")
    assert all(r["judge_input"]["context_was_truncated"] is False for r in recs.values())
    # by construction: the same heuristic on the same full text gives the in-run scores
    assert _scores(recs) == _scores(_records(project, "judged"))


def test_a_changed_vault_leaves_chunks_cut_and_the_rejudge_is_refused(project):
    _run_eval(project, "ro", "--retrieval-only")
    before = (project["results"] / "ro" / "results.jsonl").read_text()
    # Edited after the run: the server note's chunk ids no longer match.
    (project["vault"] / "ops" / "server.md").write_text(SERVER.replace("ninety", "sixty"))

    res = _judge(project, "ro", "--quiet")
    assert res.exit_code == 2
    line = res.stderr.strip()
    assert len(line.splitlines()) == 1
    assert "1 of 2 cases to judge hold chunk text cut to 200 characters that could not be re-read" in line
    assert "no longer in the run's vault" in line and "--vault PATH" in line and "--allow-truncated-context" in line
    assert (project["results"] / "ro" / "results.jsonl").read_text() == before

    res = _judge(project, "ro", "--quiet", "--json", "--allow-truncated-context")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["context"]["cases_judged_on_cut_text"] == 1
    assert out["warnings"][0].startswith("1 of 2 cases are judged on truncated (200-char) context")
    recs = _records(project, "ro")
    assert recs["q1"]["judge_input"]["context_was_truncated"] is True
    assert recs["q2"]["judge_input"]["context_was_truncated"] is False
    metrics = json.loads((project["results"] / "ro" / "metrics.json").read_text())
    assert metrics["aggregate_metrics"]["judge"]["context"]["cases_judged_on_cut_text"] == 1


def test_missing_recorded_vault_is_refused_and_vault_flag_fixes_it(project, tmp_path):
    _run_eval(project, "ro", "--retrieval-only")
    moved = tmp_path / "moved"
    shutil.move(project["vault"], moved)
    res = _judge(project, "ro", "--quiet")
    assert res.exit_code == 2 and "2 of 2 cases" in res.stderr and "is not there" in res.stderr
    res = _judge(project, "ro", "--quiet", "--json", "--vault", str(moved))
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["context"]["origin"] == "--vault" and out["context"]["cases_judged_on_cut_text"] == 0


def test_store_full_text_run_needs_no_vault(project):
    _run_eval(project, "judged")
    _run_eval(project, "full-text", "--retrieval-only", "--store-full-text")
    shutil.rmtree(project["vault"])
    res = _judge(project, "full-text", "--quiet", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["warnings"] == [] and out["context"]["cases_with_cut_text"] == 0
    assert _scores(_records(project, "full-text")) == _scores(_records(project, "judged"))


def test_vault_flag_that_is_not_a_folder_exits_2(project, tmp_path):
    _run_eval(project, "ro", "--retrieval-only")
    res = _judge(project, "ro", "--vault", str(tmp_path / "nope"))
    assert res.exit_code == 2 and "--vault: vault folder not found" in res.stderr


def test_an_answer_stored_cut_is_not_rejudged_without_leave(project):
    # An answer over the 20,000-character storage cap is judged whole in the run but stored
    # cut; re-judging would judge the prefix only, so it is refused unless allowed.
    _run_eval(project, "cut", "--store-full-text")
    path = project["results"] / "cut" / "results.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    answered = next(r for r in recs if (r.get("answer") or "").strip() and not r.get("error"))
    answered["answer_truncated"] = True  # as records.py marks an answer it cut
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = _judge(project, "cut", "--quiet")
    assert res.exit_code == 2, res.output
    assert "hold an answer stored cut" in res.stderr and answered["test_case_id"] in res.stderr
    ok = _judge(project, "cut", "--quiet", "--allow-truncated-context")
    assert ok.exit_code == 0, ok.output
    assert "judged on an answer stored cut" in ok.stderr
