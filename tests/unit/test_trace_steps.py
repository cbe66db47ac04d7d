"""Issue 43 (seed 002 "Tracing"): a target's `debug.traces` steps are kept in results.jsonl,
cut like chunk text, secrets never stored, and replayed with the run."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

BOT = textwrap.dedent(
    """
    def ask(request):
        chunk = {"chunk_id": "c1", "rel_path": "a.md", "heading_path": "# A", "text": "text", "rank": 1}
        traces = [
            {"name": "bm25", "input": {"query": request["question"], "limit": 50},
             "output": {"count": 12, "top": "x" * 300}, "start": 1.0, "end": 2.0},
            {"name": "llm", "input": {"prompt": "p", "api_key": "abc123"}, "output": "Bearer sk-live-0123456789abcdef"},
        ]
        return {"answer": "an answer", "references": [], "abstained": False,
                "debug": {"retrieved_chunks": [chunk], "traces": traces}}
    """
)


def _run(tmp_path: Path, **flags: object) -> list[dict]:
    from evalkit.run.api import run_eval

    (tmp_path / "bot.py").write_text(BOT, encoding="utf-8")
    case = {"id": "q1", "question": "What is A?", "answerable": True,
            "gold_supports": [{"rel_path": "a.md", "heading_path": "# A"}]}
    (tmp_path / "es.jsonl").write_text(json.dumps(case) + "\n", encoding="utf-8")
    result = run_eval(eval_set=str(tmp_path / "es.jsonl"), target=f"python:{tmp_path / 'bot.py'}:ask",
                      retrieval_only=True, results_dir=str(tmp_path / "results"), no_probe=True, run_id="traced", **flags)
    return [json.loads(x) for x in (result.run_dir / "results.jsonl").read_text().splitlines()]


def test_trace_steps_are_kept_cut_and_without_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (record,) = _run(tmp_path)
    assert record["traces"] == [
        {"name": "bm25", "input": {"query": "What is A?", "limit": 50}, "output": {"count": 12, "top": "x" * 200}},
        {"name": "llm", "input": {"prompt": "p", "api_key": "***"}, "output": "Bearer ***"},
    ]
    assert record["traces_dropped"] == 0


def test_store_full_text_keeps_trace_text_whole_but_not_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (record,) = _run(tmp_path, store_full_text=True)
    assert record["traces"][0]["output"]["top"] == "x" * 300
    assert record["traces"][1]["input"]["api_key"] == "***"
    assert "sk-live" not in json.dumps(record)


def test_trace_steps_are_bounded_like_references() -> None:
    from evalkit.run.records import stored_traces

    assert stored_traces(None, False) == ([], 0)
    steps = [{"name": str(i)} for i in range(101)] + ["not a step"]
    kept, dropped = stored_traces(steps, False)
    assert len(kept) == 100 and dropped == 2
    assert kept[0] == {"name": "0", "input": None, "output": None}


def test_a_replayed_run_keeps_its_trace_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.run.api import run_eval

    monkeypatch.chdir(tmp_path)
    (record,) = _run(tmp_path)
    log = tmp_path / "results" / "traced" / "results.jsonl"
    again = run_eval(eval_set=str(tmp_path / "es.jsonl"), target=f"replay:{log}", retrieval_only=True,
                     results_dir=str(tmp_path / "again"), no_probe=True)
    (replayed,) = [json.loads(x) for x in (again.run_dir / "results.jsonl").read_text().splitlines()]
    assert replayed["traces"] == record["traces"]


def test_the_run_report_shows_a_cases_trace_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.report.html.run import write_run_report
    from tests.unit.test_html_run_scale import _detail, _page_data

    monkeypatch.chdir(tmp_path)
    _run(tmp_path)
    html = write_run_report("traced", results_dir=tmp_path / "results").read_text(encoding="utf-8")
    rows, blocks = _page_data(html)
    assert _detail(rows, blocks, 0)["traces"] == [
        ["bm25", '{"query":"What is A?","limit":50}', '{"count":12,"top":"' + "x" * 200 + '"}'],
        ["llm", '{"prompt":"p","api_key":"***"}', "Bearer ***"],
    ]
    import evalkit.report.html as html_pkg

    assert "trace steps (" in (Path(html_pkg.__file__).parent / "static" / "cases.js").read_text(encoding="utf-8")
