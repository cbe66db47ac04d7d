"""ReplayTarget: logged responses matched to cases; malformed logs rejected up front."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from evalkit.compare.conditions import flatten_config
from evalkit.errors import InputError, TargetError
from evalkit.schema import AskRequest
from evalkit.targets.replay import ReplayTarget

CHUNK = {"chunk_id": "c1", "rel_path": "a.md", "heading_path": "# A", "text": "alpha", "rank": 1}


def write_log(tmp_path: Path, *lines: Any) -> Path:
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def ask(target: ReplayTarget, question: str, case_id: str | None = None, **req: Any) -> Any:
    return asyncio.run(target.ask(AskRequest(question=question, **req), case_id=case_id))


def test_matches_by_id_first(tmp_path: Path) -> None:
    path = write_log(
        tmp_path,
        {"id": "q1", "question": "What is A?", "answer": "by id"},
        {"question": "What is A?", "answer": "by question"},
    )
    target = ReplayTarget(path)
    assert ask(target, "What is A?", case_id="q1").response.answer == "by id"


def test_matches_by_whitespace_normalised_question(tmp_path: Path) -> None:
    path = write_log(tmp_path, {"question": "  What   is\tB? ", "answer": "b", "latency_ms": 12.5})
    result = ask(ReplayTarget(path), "What is B?", case_id="unknown-id")
    assert result.response.answer == "b"
    assert result.logged_total_ms == 12.5


def test_question_match_is_case_sensitive(tmp_path: Path) -> None:
    target = ReplayTarget(write_log(tmp_path, {"question": "What is B?", "answer": "b"}))
    with pytest.raises(TargetError):
        ask(target, "what is b?")


def test_integer_ids_match_string_case_ids(tmp_path: Path) -> None:
    target = ReplayTarget(write_log(tmp_path, {"id": 7, "answer": "seven"}))
    assert ask(target, "anything", case_id="7").response.answer == "seven"


def test_case_without_logged_response(tmp_path: Path) -> None:
    target = ReplayTarget(write_log(tmp_path, {"id": "q1", "answer": "a"}))
    with pytest.raises(TargetError) as e:
        ask(target, "Never logged?", case_id="q2")
    assert e.value.kind == "invalid_response"
    assert e.value.detail == "no logged response for this case"


def test_ambiguous_question_without_id(tmp_path: Path) -> None:
    target = ReplayTarget(write_log(tmp_path, {"question": "Q?", "answer": "1"}, {"question": "Q?", "answer": "2"}))
    with pytest.raises(TargetError) as e:
        ask(target, "Q?")
    assert "2 logged responses share this question (lines 1, 2)" in e.value.detail


def test_flat_debug_sections_and_nested_response(tmp_path: Path) -> None:
    path = write_log(
        tmp_path,
        {"id": "flat", "answer": "f", "references": [], "abstained": False, "retrieved_chunks": [CHUNK],
         "timings_ms": {"retrieval": 4}},
        {"id": "nested", "question": "N?", "response": {"answer": "n", "debug": {"retrieved_chunks": [CHUNK]}}},
    )
    target = ReplayTarget(path)
    flat = ask(target, "x", case_id="flat")
    assert flat.response.debug.retrieved_chunks[0].chunk_id == "c1"
    assert flat.server_timings_ms == {"retrieval": 4.0}
    assert "debug.retrieved_chunks" not in flat.missing_fields
    assert "debug.versions" in flat.missing_fields
    nested = ask(target, "N?")
    assert nested.response.answer == "n"
    # log metadata is not part of the response
    assert "id" not in (nested.response.model_extra or {}) and "question" not in (flat.response.model_extra or {})


def test_malformed_lines_are_all_reported_with_line_numbers(tmp_path: Path) -> None:
    path = write_log(
        tmp_path,
        {"id": "ok", "answer": "fine"},
        '{"id": "broken", "answer": ',
        {"answer": "who am I?"},
        {"id": "no-answer", "references": []},
        {"id": "ok", "answer": "again"},
        "[1, 2]",
        "",
        {"id": "bad-chunk", "answer": "x", "retrieved_chunks": [{"text": "no path"}]},
    )
    with pytest.raises(InputError) as e:
        ReplayTarget(path)
    where = str(path)
    shown = [str(p) for p in e.value.problems]
    assert shown[0].startswith(f"{where}:2: not valid JSON (")
    assert shown[1:] == [
        f"{where}:3: id: needs an `id` or a `question` to match it to a case",
        f"{where}:4: answer: Field required",
        f"{where}:5: id: id 'ok' duplicates line 1",
        f"{where}:6: expected a JSON object, got an array",
        f"{where}:8: debug.retrieved_chunks[0].rel_path: Field required",
    ]


def test_missing_and_empty_logs(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="replay log not found"):
        ReplayTarget(tmp_path / "nope.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(InputError, match="replay log has no responses"):
        ReplayTarget(empty)


def test_describe_has_hash_and_count(tmp_path: Path) -> None:
    path = write_log(tmp_path, {"id": "a", "question": "A?", "answer": "a"}, {"question": "B?", "answer": "b"})
    d = ReplayTarget(path).describe()
    assert d["kind"] == "replay" and d["responses"] == 2 and len(d["sha256"]) == 64
    assert asyncio.run(ReplayTarget(path).index_stats()) is None


# --------------------------------------------------------------------------- replaying a run's records


# What differs between two runs by nature: their names, times and the wall clock.
_RUN_OWN = ("run_id", "timestamp", "config_hash", "run_timing.", "aggregate_metrics.latency.total_ms",
            "aggregate_metrics.latency.phases.judge.")


@pytest.mark.parametrize("flags", [{"retrieval_only": True}, {"store_full_text": True}])
def test_a_replayed_run_scores_as_the_run(tmp_path: Path, flags: dict) -> None:
    """Issue 43: replaying a run's results.jsonl lost the target's abstention (abstention
    accuracy 0.5 -> null under --retrieval-only), its phase timings, versions and index stats.
    Every metric of the replay equals the run's (judged ones too, given --store-full-text so
    the judge sees the same text)."""
    from evalkit.run.api import run_eval
    from tests.support import ROOT

    common = dict(eval_set=str(ROOT / "eval_set.jsonl"), results_dir=str(tmp_path / "results"), no_probe=True, **flags)
    first = run_eval(vault=str(ROOT / "sample_vault"), run_id="first", **common)
    again = run_eval(target=f"replay:{first.run_dir / 'results.jsonl'}", run_id="again", **common)
    a = {k: v for k, v in flatten_config(first.metrics).items() if not k.startswith(_RUN_OWN)}
    b = {k: v for k, v in flatten_config(again.metrics).items() if not k.startswith(_RUN_OWN)}
    assert a["aggregate_metrics.abstention_accuracy"] is not None
    assert a["aggregate_metrics.indexing_coverage.docs_processed"] > 0
    assert {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)} == {}
    recs_a = [json.loads(x) for x in (first.run_dir / "results.jsonl").read_text().splitlines()]
    recs_b = [json.loads(x) for x in (again.run_dir / "results.jsonl").read_text().splitlines()]
    assert [r["abstention"] for r in recs_b] == [r["abstention"] for r in recs_a]
    assert [r["latency"]["total_ms"] for r in recs_b] == [r["latency"]["total_ms"] for r in recs_a]


def test_a_failed_case_replays_as_the_same_failure(tmp_path: Path) -> None:
    record = {"schema_version": 1, "test_case_id": "q1", "question": "What?", "answer": None, "latency": {"total_ms": 5.0},
              "error": {"kind": "timeout", "status": None, "detail": "no answer in 60 s"}}
    with pytest.raises(TargetError) as e:
        ask(ReplayTarget(write_log(tmp_path, record)), "What?", case_id="q1")
    assert e.value.kind == "timeout"
