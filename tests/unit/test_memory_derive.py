"""run_eval takes a fresh run's metrics from its records as it writes them (issue 27 item 3),
instead of reading results.jsonl back: metrics.json, summary.md and results.json must be
exactly those of reading the file (derive_run without the pass), on varied records."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import orjson
import pytest

from evalkit.config import build_settings
from evalkit.derive import RecordPass, RunFacts, derive_run
from evalkit.derive.health import RunHealth
from evalkit.derive.summary import write_results_json
from evalkit.store.runs import RunDir

# Answers of every kind a retrieval-only run records: the target failing, an empty answer,
# abstaining, an infinite and a missing timing (JSON has no inf: the file holds null),
# chunks without ids or ranks, duplicates, references, extra fields.
BOT = textwrap.dedent(
    '''
    def ask(request):
        i = int(request["question"].split()[1].rstrip("?"))
        if i % 11 == 3:
            raise RuntimeError("down")
        chunks = []
        for r in range(1, 1 + i % 6):
            chunk = {"rel_path": f"n/{(i + r) % 7}.md", "heading_path": f"# H{r % 3}", "text": "t " * (30 * r),
                     "start_line": r, "end_line": r + 2, "score_final": 1.0 / r, "note": (r, "x")}
            if (i + r) % 5:
                chunk["chunk_id"] = f"id{(i + r) % 9}"
            if i % 4:
                chunk["rank"] = r
            chunks.append(chunk)
        timings = {"retrieval": float("inf") if i % 7 == 1 else 2.5 * i}
        if i % 9 == 2:
            timings["generation"] = 1e300 * 10
        out = {"answer": "" if i % 13 == 5 else f"answer {i} [1]",
               "references": [{"rel_path": c["rel_path"], "heading_path": c["heading_path"]} for c in chunks[:1]],
               "debug": {"retrieved_chunks": chunks, "timings_ms": timings}}
        if i % 3 == 0:
            out["abstained"] = i % 2 == 0
        return out
    '''
)


def _cases(n: int) -> list[dict]:
    cases = []
    for i in range(n):
        case: dict = {"id": f"c{i}", "question": f"case {i}?", "answerable": i % 8 != 0, "tags": [f"t{i % 3}"],
                      "category": ["factual", "reasoning"][i % 2], "difficulty": ["easy", "hard"][i % 2]}
        if case["answerable"] and i % 10 != 1:
            supports = [{"rel_path": f"n/{i % 7}.md", "heading_path": f"# H{i % 3}"}]
            if i % 4 == 0:
                supports.append({"chunk_id": f"id{i % 9}", "relevance": 2})
            if i % 6 == 0:
                supports.append({"rel_path": f"n/{(i + 1) % 7}.md", "start_line": 2, "end_line": 2})
            if i % 12 == 7:
                supports = [{"rel_path": "n/never.md", "heading_path": "# H1"}]  # no chunk comes from there
            case["gold_supports"] = supports
            if len(supports) > 1 and i % 5 == 0:
                case["required_support_groups"] = [[0, 1]]
        if i % 17 == 4:
            case["label_source"] = "auto"
        cases.append(case)
    return cases


def _strip(body: dict) -> dict:
    return {k: v for k, v in body.items() if k != "timestamp"}


@pytest.mark.parametrize("trials", [1, 2])
def test_the_pass_made_while_writing_equals_reading_the_file(tmp_path: Path, trials: int) -> None:
    from evalkit import run_eval

    (tmp_path / "bot.py").write_text(BOT)
    es = tmp_path / "es.jsonl"
    es.write_bytes(b"".join(orjson.dumps(c) + b"\n" for c in _cases(120)))
    result = run_eval(eval_set=str(es), k=[3, 1], target=f"python:{tmp_path / 'bot.py'}:ask", retrieval_only=True,
                      results_dir=str(tmp_path / "results"), run_id="r", no_probe=True, trials=trials, concurrency=4,
                      max_error_rate=1.0, allow_format_mismatch=True)
    assert result.n_cases == 120 * trials
    run = RunDir(tmp_path / "results" / "r")
    metrics = run.read_metrics()
    kinds = {w["kind"] for w in metrics["warnings"]}
    assert {"target_errors", "unreviewed_labels", "gold_never_retrieved"} <= kinds  # the records reach them
    assert metrics["aggregate_metrics"]["latency"]["phases"]["retrieval"]["n"] < 120 * trials  # inf and null timings

    # The same run derived again from results.jsonl, in a copy.
    copy = tmp_path / "copy" / "r"
    shutil.copytree(run.path, copy)
    again = RunDir(copy)
    config = again.read_config()
    again.metrics_path.unlink()
    derive_run(again, RunFacts(
        settings=build_settings({}, dict(config["settings"])), config=config,
        eval_set_commit_hash=metrics["eval_set_commit_hash"], dataset_version=metrics["dataset_version"],
        judge_stats=metrics["aggregate_metrics"]["judge"], session_wall_s=metrics["run_timing"]["session_wall_s"],
    ))
    assert _strip(again.read_metrics()) == _strip(metrics)
    strip_time = lambda text: [x for x in text.splitlines() if "metrics written" not in x]  # noqa: E731
    assert strip_time((copy / "summary.md").read_text()) == strip_time((run.path / "summary.md").read_text())
    body = orjson.loads((copy / "results.json").read_bytes())
    body_run = orjson.loads((run.path / "results.json").read_bytes())
    # results.json's rows came from the pass (spooled); streamed from results.jsonl they are the same.
    write_results_json(again, again.read_metrics(), config)
    body_file = orjson.loads((copy / "results.json").read_bytes())
    for b in (body, body_run, body_file):
        b.pop("generated_at"), b["metrics"].pop("timestamp")
    assert body == body_run == body_file
    assert len(body["cases"]) == 120 * trials


def test_results_json_rows_are_kept_up_to_max_cases_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import evalkit.report.results_json as results_json

    monkeypatch.setattr(results_json, "MAX_CASES", 3)
    s = build_settings({"k": [3]}, {})
    records = [{"test_case_id": f"c{i}", "case": {"id": f"c{i}"}, "retrieved_chunks": []} for i in range(4)]
    small, big = RecordPass(s, rows=True), RecordPass(s, rows=True)
    for rec in records[:3]:
        small.add(rec)
    for rec in records:
        big.add(rec)
    rows = small.rows()
    assert rows is not None and [orjson.loads(r)["test_case_id"] for r in rows] == ["c0", "c1", "c2"]
    assert big.rows() is None  # results.json leaves a bigger run's rows out: none were kept
    small.close(), big.close()


def test_a_record_pass_equals_one_record_at_a_time(tmp_path: Path) -> None:
    """RecordPass fed twice the same records gives the same tables, whichever way it is fed."""
    s = build_settings({"k": [3]}, {})
    records = [
        {"test_case_id": "a", "case": {"id": "a", "answerable": True, "gold_supports": [{"rel_path": "x.md"}]},
         "retrieved_chunks": [{"rel_path": "x.md", "heading_path": "# A", "chunk_id": "1", "rank": 1}],
         "retrieval_metrics": {"at_k": {"3": {"recall_any": 1.0}}}, "missing_fields": ["rank"]},
        {"test_case_id": "b", "case": {"id": "b", "answerable": False}, "error": {"kind": "timeout"},
         "missing_fields": ["chunk_id"]},
    ]
    one, two = RecordPass(s), RecordPass(s)
    for rec in records:
        one.add(rec)
    for rec in orjson.loads(orjson.dumps(records)):
        two.add(rec)
    assert one.n == two.n == 2 and one.missing == two.missing == {"rank", "chunk_id"}
    assert one.table.result() == two.table.result()
    assert one.health.warnings() == two.health.warnings()


def test_supports_of_other_types_are_not_taken_for_equal_ones() -> None:
    """The run warnings keep one object per distinct support; 1 and True are different
    lines (True is no line at all, so that support is the whole file), and an
    unhashable field keeps its support unshared."""
    chunk = {"rel_path": "a.md", "heading_path": "# A", "start_line": 5, "end_line": 6, "chunk_id": "k"}

    def rec(cid: str, support: dict) -> dict:
        return {"test_case_id": cid, "case": {"id": cid, "answerable": True, "gold_supports": [support]},
                "retrieved_chunks": [chunk]}

    for first, second in ((1, True), (True, 1), (1, 1.0)):
        health = RunHealth()
        health.add(rec("span", {"rel_path": "a.md", "start_line": first, "end_line": first}))
        health.add(rec("other", {"rel_path": "a.md", "start_line": second, "end_line": second}))
        never = {w["kind"]: w["ids"] for w in health.warnings()}.get("gold_never_retrieved", [])
        # A span 1-1 misses lines 5-6; a "span" of True is none: the whole file matches.
        expected = [cid for cid, v in (("span", first), ("other", second)) if v is not True]
        assert never == expected, (first, second)

    health = RunHealth()
    health.add(rec("odd", {"rel_path": "a.md", "heading_path": ["# A"]}))  # unhashable: kept, not shared
    health.add(rec("odd2", {"rel_path": "a.md", "heading_path": "# A"}))
    never = {w["kind"]: w["ids"] for w in health.warnings()}.get("gold_never_retrieved", [])
    assert never == ["odd"]  # "['# A']" is no heading of the chunk's
