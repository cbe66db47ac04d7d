"""Issue 43 item 1: the results database (`<results-dir>/runs.sqlite`, evalkit.store.resultsdb).

Every run indexed into SQLite (the seed's three tables, with more columns), rebuilt from the
run folders by `evalkit index-runs`, kept in step by what changes a run, queried with plain
SQL over a read-only connection (`evalkit query-runs`), read by the trend page when it holds
a run in step with its folder; a failed or killed index write never touches a run, and
`index-runs` repairs it. docs/sharing.md's three queries run here and print what it shows."""

from __future__ import annotations

import os
import random
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app
from evalkit.report.html.trend import trend_view, write_trend_report
from evalkit.store.resultsdb import (
    DB_SCHEMA_VERSION,
    connect_read_only,
    db_path,
    fresh_runs,
    keep_in_step,
    out_of_step,
    rebuild,
)
from evalkit.store.runs import RunDir

ROOT = Path(__file__).resolve().parents[2]
DATASET = "d" * 64
CATEGORIES = ("factual", "multi_hop", "recency")
START = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def write_scored_runs(root: Path, n_runs: int, n_cases: int, *, seed: int = 43, first: int = 0) -> list[str]:
    """`n_runs` run folders as run_eval leaves them (config.json, results.jsonl and a
    metrics.json of the records' means), one hour apart, with the same `n_cases` cases: each
    case has its own chance to be retrieved and its own speed, so cases flip and some are slow.
    Seeded: the same folders every time. Returns the run ids, oldest first."""
    rng = random.Random(seed)
    cases = [(f"case-{c + 1:02d}", rng.uniform(0.2, 0.95), rng.uniform(20, 400)) for c in range(n_cases)]
    ids = []
    for r in range(first, first + n_runs):
        run_id = f"run-{r + 1:03d}"
        at = (START + timedelta(hours=r)).strftime("%Y-%m-%dT%H:%M:%SZ")
        folder = root / run_id
        folder.mkdir(parents=True)
        records = []
        for c, (case_id, p_hit, speed) in enumerate(cases):
            hit = rng.random() < p_hit
            rank = rng.randint(1, 3) if hit else None
            records.append({
                "schema_version": 1, "test_case_id": case_id, "case_index": c,
                "case": {"id": case_id, "question": f"What about topic {c + 1}?", "answerable": True,
                         "category": CATEGORIES[c % 3], "difficulty": "easy", "tags": ["work", f"t{c % 2}"]},
                "question": f"What about topic {c + 1}?", "answer": f"Answer {r}-{c}.",
                "references": [{"rel_path": f"notes/{c}.md", "heading_path": "# A"}],
                "latency": {"total_ms": round(speed * rng.uniform(0.8, 1.25), 1)},
                "retrieval_metrics": {"k": 5, "recall_at_k": float(hit), "mrr": 1 / rank if rank else 0.0,
                                      "precision_at_k": 0.2 if hit else 0.0, "ndcg_at_k": 1 / rank if rank else 0.0,
                                      "at_k": {"5": {"recall_any": float(hit), "mrr": 1 / rank if rank else 0.0}},
                                      "status": "scored"},
                "groundedness": {"score": float(rng.randint(2, 5)), "reasoning": "claims found in the context"},
                "correctness": {"score": float(rng.randint(1, 5)), "reasoning": "key facts"},
                "abstention": {"abstained": False, "hallucinated": None},
                "cost": {"judge_tokens": 0, "judge_cost_usd": 0.0},
                "error": None,
            })
        (folder / "results.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in records))
        config = {"run_id": run_id, "created_at": at, "config_hash": f"{r:064x}", "dataset_version": DATASET,
                  "settings": {"k": [5]}, "target": {"kind": "reference", "params": {"top_k": 5}},
                  "eval_set": {"version": DATASET, "n_cases": n_cases, "paths": ["eval_set.jsonl"]}}
        (folder / "config.json").write_bytes(orjson.dumps(config))
        (folder / "metrics.json").write_bytes(orjson.dumps(_metrics(run_id, at, records)))
        ids.append(run_id)
    return ids


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _cell(records: list[dict[str, Any]]) -> dict[str, Any]:
    hits = [x["retrieval_metrics"]["recall_at_k"] for x in records]
    mrr = [x["retrieval_metrics"]["mrr"] for x in records]
    return {"n_cases": len(records), "recall_at_k_avg": _mean(hits), "mrr_avg": _mean(mrr),
            "groundedness_avg": _mean([x["groundedness"]["score"] for x in records]),
            "n": {"recall_at_k_avg": len(records), "mrr_avg": len(records), "groundedness_avg": len(records)}}


def _metrics(run_id: str, at: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    ms = sorted(x["latency"]["total_ms"] for x in records)
    agg = {**_cell(records), "k": 5, "latency": {"p95_ms": ms[min(len(ms) - 1, int(0.95 * len(ms)))]},
           "cost": {"judge_total_usd": 0.0},
           "at_k": {"5": {"recall_any": _mean([x["retrieval_metrics"]["recall_at_k"] for x in records]),
                          "n": len(records), "n_by_metric": {"recall_any": len(records)}}}}
    by_category = {c: _cell([x for x in records if x["case"]["category"] == c]) for c in CATEGORIES
                   if any(x["case"]["category"] == c for x in records)}
    return {"run_id": run_id, "timestamp": at, "dataset_version": DATASET, "total_tests": len(records),
            "aggregate_metrics": agg, "by_category": by_category}


def evalkit(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def query(results: Path, sql: str) -> list[tuple]:
    with closing(connect_read_only(db_path(results))) as conn:
        return conn.execute(sql).fetchall()


def dump(results: Path) -> dict[str, list[tuple]]:
    """Every row of every table, sorted; `indexed_at` (when) left out."""
    with closing(connect_read_only(db_path(results))) as conn:
        out = {}
        for table in ("schema_version", "evaluation_runs", "test_results", "metrics"):
            cursor = conn.execute(f"SELECT * FROM {table}")
            names = [d[0] for d in cursor.description]
            out[table] = sorted(tuple(v for n, v in zip(names, row) if n != "indexed_at") for row in cursor.fetchall())
        return out


def page(path: Path) -> bytes:
    """A written page without the time it was made at."""
    return re.sub(rb"report made \S+Z", b"report made <now>", path.read_bytes())


def folder_bytes(results: Path) -> dict[str, bytes]:
    return {str(p.relative_to(results)): p.read_bytes() for p in sorted(results.rglob("*"))
            if p.is_file() and not p.name.startswith(db_path(results).name)}


# --------------------------------------------------------------------------- a few hundred runs


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("many")
    write_scored_runs(results, 300, 12)
    return results


def test_a_few_hundred_runs_are_indexed_and_queried_with_plain_sql(many: Path) -> None:
    out = evalkit("index-runs", "--results-dir", str(many), "--json")
    assert out.exit_code == 0, out.output
    said = orjson.loads(out.stdout)
    assert (said["runs"], said["records"], said["skipped"]) == (300, 3600, [])
    assert query(many, "SELECT version FROM schema_version") == [(DB_SCHEMA_VERSION,)]
    assert query(many, "SELECT COUNT(*) FROM evaluation_runs") == [(300,)]
    # the seed's columns are there, by the seed's names
    assert query(many, 'SELECT id, timestamp, config_hash, total_tests, llm_judge_cost FROM evaluation_runs '
                       "WHERE id = 'run-007'") == [("run-007", "2026-03-01T15:00:00Z", f"{6:064x}", 12, 0.0)]
    row = query(many, 'SELECT test_case_id, question, answer, "references", faithfulness_score, retrieval_metrics, '
                      "execution_time_ms, error FROM test_results WHERE run_id = 'run-002' AND test_case_id = 'case-03'")
    record = orjson.loads((many / "run-002" / "results.jsonl").read_bytes().splitlines()[2])
    assert row == [("case-03", record["question"], record["answer"], orjson.dumps(record["references"]).decode(),
                    record["groundedness"]["score"], orjson.dumps(record["retrieval_metrics"]).decode(),
                    record["latency"]["total_ms"], None)]
    # a case's whole history, in time order, with the values its records hold
    history = query(many, "SELECT t.run_id, t.recall_at_k FROM test_results t JOIN evaluation_runs r ON r.id = t.run_id "
                          "WHERE t.test_case_id = 'case-05' ORDER BY r.timestamp")
    assert [r for r, _ in history] == [f"run-{i:03d}" for i in range(1, 301)]
    assert [h for _, h in history] == [
        orjson.loads((many / r / "results.jsonl").read_bytes().splitlines()[4])["retrieval_metrics"]["recall_at_k"]
        for r, _ in history]
    # the metrics table: metrics.json's numbers, overall and per slice, with their n
    metrics = orjson.loads((many / "run-123" / "metrics.json").read_bytes())
    assert query(many, "SELECT metric_value, n FROM metrics WHERE run_id = 'run-123' AND category = 'overall' "
                       "AND metric_name = 'recall_at_k_avg'") == [(metrics["aggregate_metrics"]["recall_at_k_avg"], 12)]
    assert query(many, "SELECT metric_value FROM metrics WHERE run_id = 'run-123' AND category = 'category:recency' "
                       "AND metric_name = 'mrr_avg'") == [(metrics["by_category"]["recency"]["mrr_avg"],)]
    assert query(many, "SELECT metric_value, n FROM metrics WHERE run_id = 'run-123' AND metric_name = 'recall_any@5'") \
        == [(metrics["aggregate_metrics"]["at_k"]["5"]["recall_any"], 12)]
    assert query(many, "SELECT metric_value FROM metrics WHERE run_id = 'run-123' AND metric_name = 'latency.p95_ms'") \
        == [(metrics["aggregate_metrics"]["latency"]["p95_ms"],)]


def test_query_runs_prints_a_table_or_json_and_never_writes(many: Path) -> None:
    if not db_path(many).exists():
        rebuild(many)
    out = evalkit("query-runs", "--results-dir", str(many),
                  "SELECT id, total_tests FROM evaluation_runs ORDER BY timestamp LIMIT 2")
    assert out.exit_code == 0, out.output
    assert out.stdout == "id       total_tests\n-------  -----------\nrun-001           12\nrun-002           12\n"
    out = evalkit("query-runs", "--results-dir", str(many), "--json", "SELECT id, k FROM evaluation_runs LIMIT 1")
    assert orjson.loads(out.stdout) == {"columns": ["id", "k"], "rows": [["run-001", 5]]}
    before = dump(many)
    for sql in ("DELETE FROM test_results", "DROP TABLE metrics", "UPDATE evaluation_runs SET k = 1"):
        out = evalkit("query-runs", "--results-dir", str(many), sql)
        assert out.exit_code == 2 and "readonly database" in out.stderr, out.output
    out = evalkit("query-runs", "--results-dir", str(many), "SELECT nope FROM evaluation_runs")
    assert out.exit_code == 2 and "no such column: nope" in out.stderr
    assert dump(many) == before


def test_without_a_database_query_runs_says_how_to_make_one(tmp_path: Path) -> None:
    out = evalkit("query-runs", "--results-dir", str(tmp_path), "SELECT 1")
    assert out.exit_code == 2
    assert "no results database here; `evalkit index-runs --results-dir" in out.stderr
    assert not db_path(tmp_path).exists()


# --------------------------------------------------------------------------- in step, incrementally


def test_incremental_indexing_equals_a_rebuild(tmp_path: Path) -> None:
    rebuild(tmp_path)  # an empty database: from now on each run is indexed as it is written
    ids = write_scored_runs(tmp_path, 200, 6)
    for run_id in ids:
        assert keep_in_step(RunDir(tmp_path / run_id))
    # one run changed afterwards (a re-scoring rewrote its records and metrics) and indexed again
    changed = tmp_path / "run-050"
    lines = (changed / "results.jsonl").read_bytes().splitlines()[:4]
    (changed / "results.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    (changed / "metrics.json").write_bytes(orjson.dumps({"total_tests": 4, "aggregate_metrics": {"mrr_avg": 0.5}}))
    assert keep_in_step(RunDir(changed))
    incremental = dump(tmp_path)
    assert len(incremental["evaluation_runs"]) == 200 and len(incremental["test_results"]) == 199 * 6 + 4
    rebuild(tmp_path)
    assert dump(tmp_path) == incremental
    with closing(connect_read_only(db_path(tmp_path))) as conn:
        assert out_of_step(tmp_path, conn) == ([], [])


_LEAVE_WAL = """
import os, signal, sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute("PRAGMA wal_autocheckpoint=0")
conn.execute("DELETE FROM test_results")
conn.commit()
os.unlink(sys.argv[1])
os.kill(os.getpid(), signal.SIGKILL)  # its WAL, never checkpointed, stays beside the removed file
"""


def test_a_database_removed_by_hand_is_made_again_without_its_old_wal(tmp_path: Path) -> None:
    write_scored_runs(tmp_path, 3, 2)
    rebuild(tmp_path)
    subprocess.run([sys.executable, "-c", _LEAVE_WAL, str(db_path(tmp_path))], timeout=120)
    assert not db_path(tmp_path).exists() and Path(f"{db_path(tmp_path)}-wal").stat().st_size > 0
    assert rebuild(tmp_path).runs == 3
    assert query(tmp_path, "SELECT COUNT(*) FROM test_results") == [(6,)]


def test_nothing_is_indexed_without_a_database(tmp_path: Path) -> None:
    (run_id,) = write_scored_runs(tmp_path, 1, 3)
    assert not keep_in_step(RunDir(tmp_path / run_id))
    assert not db_path(tmp_path).exists()


def test_runs_that_cannot_be_indexed_are_skipped_and_named(tmp_path: Path) -> None:
    write_scored_runs(tmp_path, 3, 2)
    (tmp_path / "run-002" / "metrics.json").unlink()  # unfinished
    (tmp_path / "run-003" / "results.jsonl").write_text('{"test_case_id": "x"}\n[1, 2\n{"a": 1}\n')  # corrupt
    out = evalkit("index-runs", "--results-dir", str(tmp_path))
    assert out.exit_code == 0, out.output
    assert "1 run(s), 2 case result(s)" in out.stdout and "2 run(s) skipped" in out.stdout
    assert "run run-002 not indexed: no metrics.json yet" in out.stderr
    assert "run run-003 not indexed: corrupt record" in out.stderr
    assert query(tmp_path, "SELECT id FROM evaluation_runs") == [("run-001",)]


def test_query_runs_says_when_the_database_is_behind_its_folders(tmp_path: Path) -> None:
    write_scored_runs(tmp_path, 3, 2)
    rebuild(tmp_path)
    write_scored_runs(tmp_path, 1, 2, first=3)  # made by hand: no command indexed it
    (tmp_path / "run-001" / "metrics.json").write_bytes(orjson.dumps({"total_tests": 2}))
    out = evalkit("query-runs", "--results-dir", str(tmp_path), "SELECT COUNT(*) AS n FROM evaluation_runs")
    assert out.exit_code == 0 and out.stdout.splitlines()[-1].strip() == "3"
    assert "2 run(s) changed or not indexed since the database was made (run-001, run-004)" in out.stderr
    assert "`evalkit index-runs --results-dir" in out.stderr
    shutil.rmtree(tmp_path / "run-002")
    out = evalkit("query-runs", "--results-dir", str(tmp_path), "SELECT 1")
    assert "; 1 indexed run(s) gone from the folder;" in out.stderr
    assert evalkit("index-runs", "--results-dir", str(tmp_path)).exit_code == 0
    out = evalkit("query-runs", "--results-dir", str(tmp_path), "SELECT id FROM evaluation_runs ORDER BY id")
    assert out.stderr == "" and out.stdout.split()[2:] == ["run-001", "run-003", "run-004"]


def test_a_database_of_another_schema_version_is_left_alone_then_rebuilt(tmp_path: Path, caplog) -> None:
    (run_id,) = write_scored_runs(tmp_path, 1, 2)
    with closing(sqlite3.connect(db_path(tmp_path))) as conn:
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO schema_version VALUES (0)")
        conn.commit()
    assert not keep_in_step(RunDir(tmp_path / run_id))
    assert "holds schema version 0, this evalkit writes 1; `evalkit index-runs` rebuilds it" in caplog.text
    assert fresh_runs(tmp_path) == {}  # the trend reads the folders
    assert rebuild(tmp_path).runs == 1
    assert query(tmp_path, "SELECT version FROM schema_version") == [(DB_SCHEMA_VERSION,)]


# --------------------------------------------------------------------------- failures never touch a run


def test_a_failed_index_write_warns_leaves_the_run_intact_and_index_runs_repairs_it(tmp_path: Path, caplog) -> None:
    # a real command that changes a run (score_retrieval --k 3) with a damaged database beside it
    from tests.support import run_eval_api

    results = tmp_path / "results"
    run_eval_api(eval_set=ROOT / "eval_set_sanity.jsonl", results_dir=results, run_id="r1", quiet=True, no_probe=True)
    db_path(results).write_bytes(b"this is not an SQLite database, and is bigger than its header" * 4)
    out = evalkit("score", "--retrieval", "--run-id", "r1", "--results-dir", str(results), "--k", "3")
    assert out.exit_code == 0, out.output
    assert "runs.sqlite: run r1 not indexed: file is not a database; `evalkit index-runs --results-dir" in caplog.text
    metrics = orjson.loads((results / "r1" / "metrics.json").read_bytes())
    assert metrics["ks"] == [5, 3]  # the command did its work
    assert not (results / "r1" / ".derive-pending").exists()
    out = evalkit("index-runs", "--results-dir", str(results))
    assert out.exit_code == 0 and "was not a sound SQLite database; made again" in out.stderr, out.output
    assert query(results, "SELECT id, json_extract(metrics_json, '$.ks') FROM evaluation_runs") == [("r1", "[5,3]")]


_KILL_AT = """
import os, signal, sys
from evalkit.store.resultsdb import rebuild
seen = []
def on_run(run_id):
    seen.append(run_id)
    if len(seen) == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)  # inside that run's transaction, before its commit
rebuild(sys.argv[1], on_run=on_run)
"""


def test_a_killed_index_write_leaves_the_runs_intact_and_index_runs_fixes_it(tmp_path: Path) -> None:
    write_scored_runs(tmp_path, 60, 4)
    before = folder_bytes(tmp_path)
    child = subprocess.run([sys.executable, "-c", _KILL_AT, str(tmp_path), "40"], cwd=ROOT, capture_output=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert folder_bytes(tmp_path) == before  # no run touched
    # the database is sound: the 39 runs committed before the kill, none half-written
    assert query(tmp_path, "SELECT COUNT(*) FROM evaluation_runs") == [(39,)]
    assert query(tmp_path, "SELECT COUNT(*) FROM test_results") == [(39 * 4,)]
    assert query(tmp_path, "SELECT COUNT(*) FROM test_results WHERE run_id = 'run-040'") == [(0,)]
    with closing(connect_read_only(db_path(tmp_path))) as conn:
        behind, gone = out_of_step(tmp_path, conn)
    assert behind == [f"run-{i:03d}" for i in range(40, 61)] and gone == []
    assert len(fresh_runs(tmp_path)) == 39  # the trend takes those from the database, the rest from folders
    out = evalkit("index-runs", "--results-dir", str(tmp_path))
    assert out.exit_code == 0, out.output
    complete = dump(tmp_path)
    assert len(complete["evaluation_runs"]) == 60 and len(complete["test_results"]) == 240


_INDEX_SOME = """
import sys
from pathlib import Path
from evalkit.store.resultsdb import keep_in_step
from evalkit.store.runs import RunDir
root = Path(sys.argv[1])
for run_id in sys.argv[2:]:
    assert keep_in_step(RunDir(root / run_id)), run_id
"""


def test_processes_indexing_at_once_lose_no_run(tmp_path: Path) -> None:
    # WAL and the busy wait: a second writer waits for the first one's transaction, never fails
    rebuild(tmp_path)
    ids = write_scored_runs(tmp_path, 60, 5)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = [subprocess.Popen([sys.executable, "-c", _INDEX_SOME, str(tmp_path), *ids[i::4]], cwd=ROOT, env=env,
                                 stderr=subprocess.PIPE) for i in range(4)]
    for child in children:
        assert child.wait(timeout=300) == 0, child.stderr.read().decode()
        child.stderr.close()
    together = dump(tmp_path)
    assert len(together["evaluation_runs"]) == 60 and len(together["test_results"]) == 300
    rebuild(tmp_path)
    assert dump(tmp_path) == together


# --------------------------------------------------------------------------- commands keep it in step


def test_the_commands_that_change_a_run_keep_its_rows_in_step(tmp_path: Path) -> None:
    from tests.support import run_eval_api

    results = tmp_path / "results"
    results.mkdir()
    assert evalkit("index-runs", "--results-dir", str(results)).exit_code == 0  # the database, empty
    sanity = ROOT / "eval_set_sanity.jsonl"
    n_cases = sum(1 for line in sanity.read_text().splitlines() if line.strip())
    run_eval_api(eval_set=sanity, results_dir=results, run_id="a", quiet=True, no_probe=True)
    run_eval_api(eval_set=sanity, results_dir=results, run_id="b", quiet=True, no_probe=True, k=[3])
    assert query(results, "SELECT id, k, total_tests, n_records FROM evaluation_runs ORDER BY id") == [
        ("a", 5, n_cases, n_cases), ("b", 3, n_cases, n_cases)]
    out = evalkit("score", "--retrieval", "--run-id", "a", "--results-dir", str(results), "--k", "2")
    assert out.exit_code == 0, out.output
    assert query(results, "SELECT json_extract(metrics_json, '$.ks') FROM evaluation_runs WHERE id = 'a'") == [("[5,2]",)]
    assert query(results, "SELECT COUNT(*) FROM metrics WHERE run_id = 'a' AND metric_name = 'recall_any@2' "
                          "AND category = 'overall'") == [(1,)]
    for n in (1, 2):  # two shards, merged: the merged run is derived in a hidden stage, indexed once in place
        run_eval_api(eval_set=sanity, results_dir=results, run_id=f"s{n}", quiet=True, no_probe=True, shard=f"{n}/2")
    out = evalkit("merge", "s1", "s2", "--run-id", "s", "--results-dir", str(results))
    assert out.exit_code == 0, out.output
    out = evalkit("redact", "--run-id", "b", "--results-dir", str(results))
    assert out.exit_code == 0, out.output
    assert query(results, "SELECT id, n_records FROM evaluation_runs ORDER BY id") == [
        ("a", n_cases), ("b", n_cases), ("b-redacted", n_cases), ("s", n_cases), ("s1", n_cases // 2),
        ("s2", n_cases - n_cases // 2)]
    assert not [p for p in results.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp")]
    with closing(connect_read_only(db_path(results))) as conn:
        assert out_of_step(results, conn) == ([], [])
    indexed = dump(results)
    rebuild(results)
    assert dump(results) == indexed
    # the trend page of these real runs: the same from the database as from the folders
    assert len(fresh_runs(results)) == 6
    from_db = page(write_trend_report(results, tmp_path / "db.html"))
    db_path(results).rename(tmp_path / "aside.sqlite")
    assert page(write_trend_report(results, tmp_path / "folders.html")) == from_db


# --------------------------------------------------------------------------- the trend page


def test_the_trend_page_reads_the_database_when_it_holds_a_run_in_step(tmp_path: Path) -> None:
    write_scored_runs(tmp_path, 8, 3)
    from_folders = page(write_trend_report(tmp_path, tmp_path / "a.html"))
    rebuild(tmp_path)
    assert sorted(fresh_runs(tmp_path)) == [f"run-{i:03d}" for i in range(1, 9)]
    assert page(write_trend_report(tmp_path, tmp_path / "b.html")) == from_folders  # the same page, byte for byte
    # Proof that the rows are read: a file changed in place with its stamp kept is not seen...
    path = tmp_path / "run-003" / "metrics.json"
    old, st = path.read_bytes(), path.stat()
    hacked = old.replace(b'"total_tests":3', b'"total_tests":1')
    assert len(hacked) == len(old) and hacked != old
    with open(path, "r+b") as f:
        f.write(hacked)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert next(r for r in trend_view(tmp_path)["runs"] if r["run_id"] == "run-003")["n_cases"] == 3
    # ...and a file written anew (a new stamp) is read from the folder
    path.write_bytes(hacked)
    assert next(r for r in trend_view(tmp_path)["runs"] if r["run_id"] == "run-003")["n_cases"] == 1


def test_a_damaged_database_leaves_the_trend_page_to_the_folders(tmp_path: Path, caplog) -> None:
    write_scored_runs(tmp_path, 3, 2)
    from_folders = page(write_trend_report(tmp_path, tmp_path / "a.html"))
    db_path(tmp_path).write_bytes(b"x" * 4096)
    assert page(write_trend_report(tmp_path, tmp_path / "b.html")) == from_folders
    assert "the run folders are read instead" in caplog.text


# --------------------------------------------------------------------------- docs/sharing.md's queries


def _docs_queries() -> list[tuple[str, str]]:
    """(SQL, output) of each `evalkit query-runs` example of docs/sharing.md's results database
    section, in order."""
    text = (ROOT / "docs" / "sharing.md").read_text(encoding="utf-8")
    section = text[text.index("## The results database"):]
    section = section[: section.find("\n## ", 5) if "\n## " in section[5:] else len(section)]
    pairs = re.findall(r"```bash\n(evalkit query-runs .*?)\n```\n+(?:<!-- .*? -->\n)?```text\n(.*?)```", section,
                       flags=re.S)
    return [(shlex.split(command)[-1], output) for command, output in pairs]


def test_the_docs_queries_print_what_docs_sharing_shows(tmp_path: Path) -> None:
    examples = _docs_queries()
    assert len(examples) == 3  # a case's history, the slowest cases over time, the cases that flipped most
    write_scored_runs(tmp_path, 8, 6)  # what the docs say their examples ran on
    rebuild(tmp_path)
    for sql, shown in examples:
        out = evalkit("query-runs", "--results-dir", str(tmp_path), sql)
        assert out.exit_code == 0, out.output
        assert out.stdout == shown, f"docs/sharing.md shows another output for:\n{sql}\n--- it prints:\n{out.stdout}"
