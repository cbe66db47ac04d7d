"""Issue 43 (seed 002 `cache: true`): the task cache answers a second run from SQLite, asking
the target nothing, with identical records; another --param misses."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from evalkit.compare.conditions import flatten_config

BOT = textwrap.dedent(
    """
    import os

    def ask(request):
        with open(os.environ["CALLS_FILE"], "a") as f:
            f.write(request["question"] + "\\n")
        chunk = {"chunk_id": "c1", "rel_path": "a.md", "heading_path": "# A", "text": "alpha " * 60, "rank": 1}
        abstain = "Mars" in request["question"]
        return {"answer": "" if abstain else "A is alpha [1] " + str(request["options"].get("depth")),
                "references": [] if abstain else [{"rel_path": "a.md", "heading_path": "# A"}],
                "abstained": abstain, "abstain_reason": "no_relevant_context" if abstain else None,
                "debug": {"retrieved_chunks": [chunk], "timings_ms": {"retrieval": 1.5},
                          "traces": [{"name": "bm25", "input": request["question"], "output": 1}]}}
    """
)


def _write(tmp_path: Path) -> Path:
    (tmp_path / "bot.py").write_text(BOT, encoding="utf-8")
    cases = [{"id": "q1", "question": "What is A?", "answerable": True,
              "gold_supports": [{"rel_path": "a.md", "heading_path": "# A"}]},
             {"id": "q2", "question": "What is the capital of Mars?", "answerable": False},
             {"id": "q3", "question": "And A again?", "answerable": True,
              "gold_supports": [{"rel_path": "b.md", "heading_path": "# B"}]}]
    es = tmp_path / "es.jsonl"
    es.write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    return es


def _calls(tmp_path: Path) -> int:
    f = tmp_path / "calls.txt"
    return len(f.read_text().splitlines()) if f.exists() else 0


# The run's own, and the latency (a cached answer's is the stored one, marked).
def _same(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in ("latency", "latency_budget")}


def test_a_second_run_asks_nothing_and_records_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.run.api import run_eval

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CALLS_FILE", str(tmp_path / "calls.txt"))
    es = _write(tmp_path)
    common = dict(eval_set=str(es), target=f"python:{tmp_path / 'bot.py'}:ask", results_dir=str(tmp_path / "results"),
                  no_probe=True, task_cache=str(tmp_path / "task.sqlite"), params={"depth": 2})
    first = run_eval(run_id="first", **common)
    assert _calls(tmp_path) == 3
    second = run_eval(run_id="second", **common)
    assert _calls(tmp_path) == 3  # not asked once more

    recs = [[json.loads(x) for x in (r.run_dir / "results.jsonl").read_text().splitlines()] for r in (first, second)]
    assert [_same(r) for r in recs[1]] == [_same(r) for r in recs[0]]
    assert all(r["latency"].get("cached") is True for r in recs[1])
    assert all("cached" not in r["latency"] for r in recs[0])
    assert [r["latency"]["retrieval_ms"] for r in recs[1]] == [r["latency"]["retrieval_ms"] for r in recs[0]]
    skip = ("run_id", "timestamp", "run_timing.", "aggregate_metrics.latency")
    flat = [{k: v for k, v in flatten_config(r.metrics).items() if not k.startswith(skip)} for r in (first, second)]
    assert flat[1] == flat[0]
    assert first.metrics["aggregate_metrics"]["abstention_accuracy"] is not None

    configs = [json.loads((r.run_dir / "config.json").read_text()) for r in (first, second)]
    assert configs[0]["sessions"][-1]["task_cache"]["misses"] == 3
    assert configs[1]["sessions"][-1]["task_cache"] == {**configs[0]["sessions"][-1]["task_cache"], "hits": 3,
                                                        "misses": 0, "stored": 0}

    # Another --param is another answer: asked again.
    run_eval(run_id="third", **{**common, "params": {"depth": 3}})
    assert _calls(tmp_path) == 6


def test_a_damaged_task_cache_is_moved_aside_and_the_run_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.run.api import run_eval

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CALLS_FILE", str(tmp_path / "calls.txt"))
    es = _write(tmp_path)
    (tmp_path / "task.sqlite").write_bytes(b"not a database" * 100)
    run_eval(eval_set=str(es), target=f"python:{tmp_path / 'bot.py'}:ask", results_dir=str(tmp_path / "results"),
             no_probe=True, task_cache=str(tmp_path / "task.sqlite"), retrieval_only=True)
    assert _calls(tmp_path) == 3
    assert list(tmp_path.glob("task.sqlite.corrupt-*"))


def test_trials_are_refused_with_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.errors import BadConfig
    from evalkit.run.api import run_eval

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CALLS_FILE", str(tmp_path / "calls.txt"))
    es = _write(tmp_path)
    with pytest.raises(BadConfig, match="--trials"):
        run_eval(eval_set=str(es), target=f"python:{tmp_path / 'bot.py'}:ask", results_dir=str(tmp_path / "results"),
                 no_probe=True, task_cache=str(tmp_path / "task.sqlite"), trials=2, retrieval_only=True)
    assert _calls(tmp_path) == 0


def test_an_edited_note_misses_for_the_reference_chatbot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from evalkit.run.api import run_eval
    from tests.support import ROOT

    monkeypatch.chdir(tmp_path)
    vault = tmp_path / "notes"
    shutil.copytree(ROOT / "sample_vault", vault)
    (line,) = [x for x in (ROOT / "eval_set.jsonl").read_text(encoding="utf-8").splitlines() if '"sv-002"' in x]
    (tmp_path / "es.jsonl").write_text(line + "\n", encoding="utf-8")
    common = dict(eval_set=str(tmp_path / "es.jsonl"), vault=str(vault), results_dir=str(tmp_path / "results"),
                  no_probe=True, retrieval_only=True, task_cache=str(tmp_path / "task.sqlite"))

    def counts(run_id: str) -> dict:
        result = run_eval(run_id=run_id, **common)
        return json.loads((result.run_dir / "config.json").read_text())["sessions"][-1]["task_cache"]

    assert counts("a")["misses"] == 1 and counts("b")["hits"] == 1
    note = vault / "personal" / "recipes" / "Sourdough.md"
    note.write_text(note.read_text(encoding="utf-8") + "\nGus got a new jar.\n", encoding="utf-8")
    assert counts("c")["misses"] == 1
