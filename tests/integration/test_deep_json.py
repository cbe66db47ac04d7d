"""Deeply nested JSON (`[` x 100,000) is bad input, exit 2 with one line naming the file, not a
crash with exit 70 (issue 29 item 4): in a GNO fixture, a --response-schema, and an
eval_sets.lock manifest. And a bad byte is said on its own line through the real CLI (issue 29
item 7): line 2001 of a BEIR corpus, line 3 of a Hindsight fixture. All read by `evalkit.jsonio`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import run_eval_script

ROOT = Path(__file__).resolve().parents[2]
DEEP = "[" * 100_000


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def _one_line(out: subprocess.CompletedProcess, path: Path, message: str) -> None:
    """Exit 2, and stderr is exactly one line: the file (and line), then the message."""
    assert out.returncode == 2, out.stderr[-500:]
    assert out.stderr.splitlines() == [f"evalkit: {path}{message}"], out.stderr[-500:]


def test_a_deep_gno_fixture_is_bad_input(tmp_path: Path) -> None:
    queries = tmp_path / "queries.json"
    queries.write_text(DEEP)
    out = _run(str(ROOT / "scripts/import_cases.py"), "--format", "gno", str(queries), "--output",
               str(tmp_path / "out.jsonl"), cwd=tmp_path)
    _one_line(out, queries, ": JSON nested too deeply: more than 64 levels of arrays and objects")


def test_a_deep_response_schema_is_bad_input(tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(DEEP)
    out = run_eval_script(eval_set=ROOT / "eval_set.jsonl", vault=ROOT / "sample_vault", response_schema=schema,
                          results_dir=tmp_path / "r", cwd=tmp_path)
    _one_line(out, schema, ": --response-schema: JSON nested too deeply: more than 64 levels of arrays and objects")


def test_a_deep_lock_manifest_is_bad_input(tmp_path: Path) -> None:
    es = tmp_path / "set.jsonl"
    es.write_bytes((ROOT / "eval_set.jsonl").read_bytes())
    (tmp_path / "eval_sets.lock").write_text(DEEP)
    out = run_eval_script(eval_set=es, vault=ROOT / "sample_vault", results_dir=tmp_path / "r", cwd=tmp_path)
    _one_line(out, tmp_path / "eval_sets.lock",
              ": JSON nested too deeply: more than 64 levels of arrays and objects; restore it from git")


def test_a_bad_byte_on_line_2001_of_a_beir_corpus_is_said_on_line_2001(tmp_path: Path) -> None:
    # regression: issue 29, a text-mode reader decoded ahead and blamed line 1950
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    docs = [b'{"_id": "d%d", "title": "T", "text": "caf\xc3\xa9 %d"}\n' % (i, i) for i in range(1, 4001)]
    docs[2000] = b'{"_id": "d2001", "title": "T", "text": "caf\xe9"}\n'  # latin-1 e-acute: byte 44
    (beir / "corpus.jsonl").write_bytes(b"".join(docs))
    (beir / "queries.jsonl").write_text('{"_id": "q1", "text": "Which cafe?"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    out = _run(str(ROOT / "scripts/import_cases.py"), "--format", "beir", str(beir), "--vault", str(tmp_path / "v"),
               "--output", str(tmp_path / "out.jsonl"), cwd=tmp_path)
    _one_line(out, beir / "corpus.jsonl", ":2001: not UTF-8 (invalid continuation byte: byte 0xe9 at byte 44 of the line)")
    assert not (tmp_path / "v").exists() and not (tmp_path / "out.jsonl").exists()


def test_a_bad_byte_on_line_3_of_a_hindsight_fixture_is_said_on_line_3(tmp_path: Path) -> None:
    line = b'{"id": "c%d", "query": "q?", "seedFacts": [{"content": "caf%s"}], "expected": {"mustInclude": ["caf"]}}\n'
    fixture = tmp_path / "h.jsonl"
    fixture.write_bytes(line % (1, b"\xc3\xa9") + line % (2, b"e") + line % (3, b"\xe9") + line % (4, b"e"))
    out = _run(str(ROOT / "scripts/import_cases.py"), "--format", "hindsight", str(fixture), "--vault-out",
               str(tmp_path / "v"), "--output", str(tmp_path / "out.jsonl"), cwd=tmp_path)
    _one_line(out, fixture, ":3: not UTF-8 (invalid continuation byte: byte 0xe9 at byte 59 of the line)")
