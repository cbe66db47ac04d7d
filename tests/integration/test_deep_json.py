"""Deeply nested JSON (`[` x 100,000) is bad input, exit 2 with a line, not a crash with exit 70
(issue 29 item 4): in a GNO fixture, a --response-schema, and an eval_sets.lock manifest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEEP = "[" * 100_000


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_a_deep_gno_fixture_is_bad_input(tmp_path: Path) -> None:
    queries = tmp_path / "queries.json"
    queries.write_text(DEEP)
    out = _run(str(ROOT / "scripts/import_cases.py"), "--format", "gno", str(queries), "--output",
               str(tmp_path / "out.jsonl"), cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-500:]
    assert "nested too deeply" in out.stderr and "Traceback" not in out.stderr


def test_a_deep_response_schema_is_bad_input(tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(DEEP)
    out = _run(str(ROOT / "scripts/run_eval.py"), "--eval-set", str(ROOT / "eval_set.jsonl"), "--vault",
               str(ROOT / "sample_vault"), "--response-schema", str(schema), "--results-dir", str(tmp_path / "r"),
               cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-500:]
    assert "nested too deeply" in out.stderr and "Traceback" not in out.stderr


def test_a_deep_lock_manifest_is_bad_input(tmp_path: Path) -> None:
    es = tmp_path / "set.jsonl"
    es.write_bytes((ROOT / "eval_set.jsonl").read_bytes())
    (tmp_path / "eval_sets.lock").write_text(DEEP)
    out = _run(str(ROOT / "scripts/run_eval.py"), "--eval-set", str(es), "--vault", str(ROOT / "sample_vault"),
               "--results-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-500:]
    assert "nested too deeply" in out.stderr and "Traceback" not in out.stderr
