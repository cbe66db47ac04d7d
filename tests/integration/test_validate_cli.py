"""`evalkit validate` / scripts/validate.py end to end: the issue's four mistakes reported
with file:line:field, anchors checked against a vault or a target's file list, exit codes
0 (clean) / 1 (anchor problems) / 2 (invalid eval set or flags)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app as main_app
from evalkit.cli.validate import app

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_VAULT = ROOT / "sample_vault"
TASKS_VAULT = ROOT.parent / "shared" / "corpora" / "obsidian-tasks" / "vault"

HARBOR = {"rel_path": "work/projects/Harbor.md", "heading_path": "# Harbor > ## Team", "snippets": ["Ravi Menon"]}


def _write(tmp_path: Path, *cases: dict | str) -> Path:
    path = tmp_path / "es.jsonl"
    path.write_text("".join((c if isinstance(c, str) else json.dumps(c)) + "\n" for c in cases), encoding="utf-8")
    return path


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_the_issues_four_mistakes_are_each_reported_with_file_line_field(tmp_path: Path) -> None:
    # regression: issue item 5 — all four were accepted silently
    es = _write(
        tmp_path,
        {"id": "m1", "question": "Who leads Harbor?", "gold_supports": [HARBOR]},
        {"id": "m2", "question": "Who leads Harbor?", "answerable": "yes", "gold_supports": [HARBOR]},
        {"id": "m3", "question": "Who leads Harbor?", "answerable": True, "golde_supports": [HARBOR]},
        {"id": "m4", "question": "Who leads Harbor?", "answerable": True,
         "gold_supports": [{**HARBOR, "rel_path": "work/projects/Harbour.md"}]},
    )
    out = _invoke("--eval-set", str(es), "--vault", str(SAMPLE_VAULT))
    assert out.exit_code == 2, out.output  # the file itself is invalid
    assert out.stdout.splitlines()[:4] == [
        f"{es}:1: answerable: required field is missing: set it to true or false (does the corpus hold the answer?)",
        f"{es}:2: answerable: expected a JSON boolean (true/false), got 'yes'",
        f"{es}:3: golde_supports: unknown field 'golde_supports'; did you mean 'gold_supports'?",
        f"{es}:4: gold_supports[0].rel_path: no file 'work/projects/Harbour.md' in vault {SAMPLE_VAULT}; "
        "did you mean 'work/projects/Harbor.md'?",
    ]


def test_anchor_problems_alone_exit_1(tmp_path: Path) -> None:
    es = _write(
        tmp_path,
        {"id": "ok", "question": "Who leads Harbor?", "answerable": True, "gold_supports": [HARBOR]},
        {"id": "bad", "question": "Who leads Harbor?", "answerable": True,
         "gold_supports": [{**HARBOR, "heading_path": "# Harbor > ## Teams"}, {**HARBOR, "snippets": ["Gus"]}]},
    )
    out = _invoke("--eval-set", str(es), "--vault", str(SAMPLE_VAULT))
    assert out.exit_code == 1, out.output
    lines = out.stdout.splitlines()
    assert lines[0] == (
        f"{es}:2: gold_supports[0].heading_path: no heading chain '# Harbor > ## Teams' in work/projects/Harbor.md; "
        "did you mean '# Harbor > ## Team'?"
    )
    assert lines[1] == f"{es}:2: gold_supports[1].snippets[0]: snippet 'Gus' does not occur in work/projects/Harbor.md"
    assert lines[-1] == f"evalkit: 3 gold anchors of 2 cases checked against vault {SAMPLE_VAULT}: 2 problems"


def test_without_a_corpus_only_the_file_is_checked_and_says_so(tmp_path: Path) -> None:
    es = _write(tmp_path, {"id": "a", "question": "q?", "answerable": True, "gold_supports": [{"rel_path": "nowhere.md"}]})
    out = _invoke("--eval-set", str(es))
    assert out.exit_code == 0, out.output
    assert "anchors not checked: pass --vault PATH or --api-url URL" in out.stdout
    assert out.stdout.splitlines()[-1] == "evalkit: 1 case OK"


def test_bundled_eval_sets_validate_clean_through_the_script() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "validate.py"), "--eval-set", "eval_set.jsonl",
         "--eval-set", "eval_set_sanity.jsonl", "--vault", "sample_vault"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert ": all found" in out.stdout and out.stderr == ""


def test_the_evalkit_command_mounts_validate(tmp_path: Path) -> None:
    es = _write(tmp_path, {"id": "a", "question": "q?", "answerable": 1})
    out = CliRunner().invoke(main_app, ["validate", "--eval-set", str(es)])
    assert out.exit_code == 2 and f"{es}:1: answerable: expected a JSON boolean" in out.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        pytest.param(["--eval-set", "missing.jsonl"], "--eval-set: no such file or folder", id="no-eval-set"),
        pytest.param(["--vault", "no-such-vault"], "vault folder not found", id="no-vault"),
        pytest.param(["--vault", ".", "--api-url", "http://127.0.0.1:9"], "not both", id="vault-and-api-url"),
    ],
)
def test_unusable_input_exits_2_on_stderr(tmp_path: Path, args: list[str], needle: str, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"id": "a", "question": "q?", "answerable": True}).rename(tmp_path / "eval_set.jsonl")
    out = _invoke(*args)
    assert out.exit_code == 2 and needle in out.stderr, out.output


# ---------------------------------------------------------------- --api-url: the target's file list


def test_api_url_checks_files_against_the_reference_servers_list(reference_server: str, reference_vault: Path, tmp_path: Path) -> None:
    real = sorted(p.relative_to(reference_vault).as_posix() for p in reference_vault.rglob("*.md"))[0]
    es = _write(
        tmp_path,
        {"id": "a", "question": "q?", "answerable": True,
         "gold_supports": [{"rel_path": real, "heading_path": "# Not checked without the text"}]},
        {"id": "b", "question": "q?", "answerable": True, "gold_supports": [{"rel_path": "Nowhere/zzz.md"}]},
    )
    out = _invoke("--eval-set", str(es), "--api-url", reference_server)
    assert out.exit_code == 1, out.output
    assert out.stdout.splitlines() == [
        f"{es}:2: gold_supports[0].rel_path: no file 'Nowhere/zzz.md' in target {reference_server}",
        f"evalkit: 2 gold anchors of 2 cases checked against target {reference_server} (file existence only): 1 problem",
    ]


@pytest.mark.parametrize(
    ("stats", "needle"),
    [
        pytest.param({"docs_processed": 1}, "does not list its files (no `files` in /api/v1/index/stats)", id="no-files"),
        pytest.param(None, "serves no /api/v1/index/stats", id="no-stats"),
    ],
)
def test_api_url_without_a_file_list_says_anchors_were_not_checked(fault_server, tmp_path: Path, stats, needle) -> None:  # noqa: F811
    srv = fault_server(index_stats=stats)
    es = _write(tmp_path, {"id": "a", "question": "q?", "answerable": True, "gold_supports": [{"rel_path": "x.md"}]})
    out = _invoke("--eval-set", str(es), "--api-url", srv.base_url)
    assert out.exit_code == 0, out.output
    assert f"evalkit: anchors not checked: target {srv.base_url} {needle}" in out.stdout


# ---------------------------------------------------------------- a real corpus nobody on the team wrote


@pytest.mark.skipif(not TASKS_VAULT.is_dir(), reason="shared corpora not present (../shared/corpora)")
def test_anchors_against_the_obsidian_tasks_docs(tmp_path: Path) -> None:
    urgency = "Advanced/Urgency.md"
    es = _write(
        tmp_path,
        # correct anchors: a deep heading with "?" and digits, a file name with an apostrophe
        {"id": "ok-1", "question": "Why is every urgency 1.95?", "answerable": True, "gold_supports": [
            {"rel_path": urgency, "heading_path": "# Urgency > ## Common Questions > ### Why do all my tasks have urgency score 1.95?",
             "snippets": ["the user's Tasks data is incorrect"]},
            {"rel_path": "Reference/Status Collections/SlRvb's Alternate Checkboxes.md",
             "heading_path": "# SlRvb's Alternate Checkboxes > ## Supported statuses"}]},
        # a heading renamed since labeling ("status" -> "state")
        {"id": "renamed", "question": "Does urgency look at status?", "answerable": True, "gold_supports": [
            {"rel_path": urgency,
             "heading_path": "# Urgency > ## Limitations of the Urgency Score > ### Urgency score ignores task state"}]},
        # "# Manually testing views" sits inside an HTML comment: no heading for the chunker
        {"id": "comment", "question": "How are views tested?", "answerable": True, "gold_supports": [
            {"rel_path": "Queries/Views.md", "heading_path": "# Manually testing views"}]},
    )
    out = _invoke("--eval-set", str(es), "--vault", str(TASKS_VAULT))
    assert out.exit_code == 1, out.output
    lines = out.stdout.splitlines()
    assert lines[0] == (
        f"{es}:2: gold_supports[0].heading_path: no heading chain "
        "'# Urgency > ## Limitations of the Urgency Score > ### Urgency score ignores task state' in Advanced/Urgency.md; "
        "did you mean '# Urgency > ## Limitations of the Urgency Score > ### Urgency score ignores task status'?"
    )
    assert lines[1].startswith(f"{es}:3: gold_supports[0].heading_path: no heading chain '# Manually testing views'")
    assert lines[2] == f"evalkit: 4 gold anchors of 3 cases checked against vault {TASKS_VAULT}: 2 problems"
