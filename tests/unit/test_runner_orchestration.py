"""The runner end to end over an in-process Python target (no sockets): order, files,
resume, determinism, and that bad input writes nothing."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from evalkit import run_eval
from evalkit.errors import BadConfig, BadEvalSet, RunNotFound
from evalkit.schema import ResultRecord
from evalkit.store.runs import RunDir

BOT = textwrap.dedent(
    '''
    import asyncio

    CALLS = []

    async def ask(request):
        q = request["question"]
        CALLS.append(q)
        n = int(q.split()[-1])
        # Later cases answer sooner, so completions arrive out of eval-set order.
        await asyncio.sleep(0.002 * (10 - n))
        if n == 4:
            raise RuntimeError("boom")
        chunks = [
            {"chunk_id": f"c{n}-{i}", "rel_path": f"notes/n{(n + i) % 10}.md", "heading_path": "# H",
             "start_line": 1, "end_line": 5, "score_vector": 0.9 - i / 10, "score_lexical": 0.5,
             "score_final": 0.8 - i / 10, "text": f"text {n} {i} " * 30, "rank": i + 1, "token_count": 60}
            for i in range(request["k"])
        ]
        return {
            "answer": "" if n == 6 else f"answer {n} [1]",
            "references": [{k: chunks[0][k] for k in ("chunk_id", "rel_path", "heading_path")}],
            "abstained": n == 9,
            "debug": {"retrieved_chunks": chunks, "timings_ms": {"retrieval": 1.0, "generation": 2.0},
                      "versions": {"index_build_version": "ix", "retriever_version": "rv", "answerer_version": "av"}},
        }
    '''
)


def _eval_set(path: Path, n: int = 10) -> Path:
    lines = []
    for i in range(n):
        case = {
            "id": f"q{i}",
            "question": f"question number {i}",
            "answerable": True,
            "gold_supports": [{"rel_path": f"notes/n{(i + i % 3) % 10}.md", "heading_path": "# H"}],
            "tags": ["even" if i % 2 == 0 else "odd"],
            "category": "factual",
        }
        if i == 9:
            case.update(answerable=False, gold_supports=[])
        lines.append(json.dumps(case))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    bot = tmp_path / "bot.py"
    bot.write_text(BOT)
    es = _eval_set(tmp_path / "es.jsonl")
    common = dict(
        eval_set=str(es), target=f"python:{bot}:ask", retrieval_only=True, results_dir=str(tmp_path / "results"),
        concurrency=4, k=[1, 3],
        max_error_rate=0.1,  # the bot fails q4 on purpose: 1 of 10 cases
    )
    return tmp_path, common


def test_full_run_writes_three_files_in_eval_set_order(env):
    tmp, common = env
    result = run_eval(**common)
    run = RunDir.open(tmp / "results", result.run_id)
    lines = run.results_path.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["test_case_id"] for r in records] == [f"q{i}" for i in range(10)]
    assert [r["case_index"] for r in records] == list(range(10))
    for r in records:
        ResultRecord.model_validate(r)
    by_id = {r["test_case_id"]: r for r in records}
    assert by_id["q4"]["error"]["kind"] == "exception"  # the callable raised
    assert by_id["q6"]["error"]["kind"] == "empty_answer"
    assert by_id["q9"]["abstention"] == {**by_id["q9"]["abstention"], "abstained": True, "method": "target"}

    config = json.loads(run.config_path.read_text())
    assert config["run_id"] == result.run_id and result.run_id.endswith(config["config_hash"][:6])
    assert config["settings"]["k"] == [1, 3] and config["settings"]["concurrency"] == 4
    assert config["judge"] == {"provider": None}
    assert config["versions"]["index_build_version"] == "ix"
    assert config["versions"]["retriever_version"] == "rv+k3+rerank_70_30+folder_off"
    assert config["dataset_version"] and config["hardware"]

    metrics = json.loads(run.metrics_path.read_text())
    agg = metrics["aggregate_metrics"]
    assert metrics["total_tests"] == 10 and metrics["unanswerable_tests"] == 1
    assert set(agg["at_k"]) == {"1", "3"}
    # by hand: 1 exception + 1 empty answer over 10 cases
    assert agg["operational_metrics"]["error_rate"] == 2 / 10
    assert agg["operational_metrics"]["error_kinds"] == {"empty_answer": 1, "exception": 1}
    assert metrics["config_hash"] == config["config_hash"]
    assert agg["judge"] is None
    assert result.success and result.n_cases == 10 and result.gate is None
    assert result.data["k"] == 1 and "recall_at_k" in result.data and "mrr" in result.data


def test_same_config_gives_identical_metrics(env):
    tmp, common = env
    a = run_eval(**{**common, "concurrency": 1})
    b = run_eval(**{**common, "concurrency": 8})

    def strip(m):
        agg = dict(m["aggregate_metrics"])
        agg.pop("latency")
        return agg

    assert a.run_id != b.run_id
    assert strip(a.metrics) == strip(b.metrics)
    assert a.metrics["config_hash"] == b.metrics["config_hash"]
    assert a.metrics["by_tag"].keys() == b.metrics["by_tag"].keys()


def test_resume_after_a_torn_write_runs_each_case_once(env):
    tmp, common = env
    first = run_eval(**common)
    run = RunDir.open(tmp / "results", first.run_id)
    lines = run.results_path.read_bytes().splitlines(keepends=True)
    # Pretend the process died while writing the 5th line.
    run.results_path.write_bytes(b"".join(lines[:4]) + lines[4][:40])
    run.metrics_path.unlink()

    again = run_eval(resume=first.run_id, results_dir=str(tmp / "results"))
    assert again.resumed and again.repaired_tail and again.skipped == 4
    ids = [r["test_case_id"] for r in run.iter_results()]
    assert ids == [f"q{i}" for i in range(10)]
    assert json.loads(run.config_path.read_text())["sessions"][-1]["resumed"] is True

    def strip(m):
        return {k: v for k, v in m["aggregate_metrics"].items() if k not in ("latency",)}

    assert strip(again.metrics) == strip(first.metrics)


def test_resume_refuses_a_different_config(env):
    tmp, common = env
    first = run_eval(**common)
    with pytest.raises(BadConfig) as e:
        run_eval(resume=first.run_id, results_dir=common["results_dir"], k=[5], folder_mode="on")
    text = e.value.render()
    assert "folder_mode: the run used 'off', now 'on'" in text and "k: the run used [1, 3], now [5]" in text


def test_resume_refuses_a_changed_eval_set(env):
    tmp, common = env
    first = run_eval(**common)
    _eval_set(Path(common["eval_set"]), n=11)
    with pytest.raises(BadConfig, match="the eval set changed"):
        run_eval(resume=first.run_id, results_dir=common["results_dir"])


def test_resume_of_unknown_run(env):
    tmp, common = env
    with pytest.raises(RunNotFound):
        run_eval(resume="nope", results_dir=common["results_dir"])


def test_bad_input_writes_nothing(env):
    tmp, common = env
    bad = tmp / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "q"}\n{"id": "a", "question": ""}\nnot json\n')
    with pytest.raises(BadEvalSet) as e:
        run_eval(**{**common, "eval_set": str(bad)})
    assert len(e.value.problems) >= 2
    with pytest.raises(BadConfig, match="no case with id 'zz'"):
        run_eval(**common, ids="q1,zz")
    with pytest.raises(BadConfig):
        run_eval(**{**common, "k": [0]})
    assert not (tmp / "results").exists()


def test_filters_and_explicit_run_id(env):
    tmp, common = env
    result = run_eval(**common, tag=["even"], limit=3, run_id="my-run")
    assert result.run_id == "my-run"
    ids = [r["test_case_id"] for r in RunDir.open(tmp / "results", "my-run").iter_results()]
    assert ids == ["q0", "q2", "q4"]
    with pytest.raises(BadConfig, match="already exists"):
        run_eval(**common, run_id="my-run")


def test_gate_against_a_baseline(env):
    tmp, common = env
    base = run_eval(**common, run_id="base")
    same = run_eval(**common, baseline="base", gate="threshold")  # the aggregates are edited below: the threshold gate
    assert same.gate["passed"] and same.success and not same.gate_failed
    assert json.loads((same.run_dir / "metrics.json").read_text())["gate"]["baseline_run_id"] == "base"
    # Make the baseline look much better than it was: every new run now regresses.
    m = json.loads((base.run_dir / "metrics.json").read_text())
    m["aggregate_metrics"]["recall_at_k_avg"] = 1.0
    m["aggregate_metrics"]["at_k"]["1"]["recall_any"] = 1.0
    (base.run_dir / "metrics.json").write_text(json.dumps(m))
    worse = run_eval(**common, baseline="base", gate="threshold")
    assert not worse.gate["passed"] and worse.gate_failed and not worse.success
    assert worse.to_json()["gate"]["regressions"][0]["metric"] == "recall_at_k_avg"
    allowed = run_eval(**common, baseline="base", allow_regressions=True, gate="threshold")
    assert allowed.success and not allowed.gate_failed and allowed.gate["allowed"]


# The first case answers once 65 later records are in results.jsonl (a minute at most), not
# after a fixed time, which a loaded machine can outlast before 65 records are written.
SLOW_FIRST = textwrap.dedent(
    '''
    import asyncio
    from pathlib import Path

    def written():
        return sum(p.read_bytes().count(b"\\n") for p in Path("r").glob("*/results.jsonl"))  # cwd: the test's

    async def ask(request):
        if request["question"].endswith(" 0"):
            for _ in range(6000):
                if written() >= 65:
                    break
                await asyncio.sleep(0.01)
        return {"answer": "a", "references": [], "abstained": False, "debug": {"retrieved_chunks": []}}
    '''
)


class _Recorder:
    def __init__(self):
        self.order = []
        self.started = None

    def start(self, **kw):
        self.started = kw

    def advance(self, record):
        self.order.append(record["test_case_id"])

    def close(self):
        pass


def test_a_hung_case_holds_back_at_most_the_reorder_cap(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bot = tmp_path / "slow.py"
    bot.write_text(SLOW_FIRST)
    es = tmp_path / "es.jsonl"
    es.write_text("".join(json.dumps({"id": f"q{i:03d}", "question": f"question {i}", "answerable": True}) + "\n" for i in range(100)))
    rec = _Recorder()
    result = run_eval(
        eval_set=str(es), target=f"python:{bot}:ask", retrieval_only=True, results_dir=str(tmp_path / "r"),
        concurrency=4, progress=rec, no_probe=True,  # the probe would ask the hanging case first
    )
    assert rec.started["total"] == 100 and rec.started["done"] == 0
    # Written order: the cap is max(64, 4*4) = 64, so once 65 later records waited they went
    # out without q000; the final file is still in eval-set order.
    assert rec.order.index("q000") >= 65
    assert sorted(rec.order) == [f"q{i:03d}" for i in range(100)]
    ids = [r["test_case_id"] for r in RunDir.open(tmp_path / "r", result.run_id).iter_results()]
    assert ids == [f"q{i:03d}" for i in range(100)]


def test_baseline_on_another_eval_set_or_subset_is_refused_before_running(env):
    # regression: review finding 5 — a filtered run gated silently against a full baseline
    tmp, common = env
    run_eval(**common, run_id="base")
    with pytest.raises(BadConfig) as exc:
        run_eval(**common, run_id="subset", ids=["q0", "q1"], baseline="base")
    assert "case counts differ (10 vs 2)" in str(exc.value)
    assert not (tmp / "results" / "subset").exists()  # nothing was run or written
    forced = run_eval(**common, run_id="subset2", ids=["q0", "q1"], baseline="base", ignore_invariants=True)
    assert forced.gate is not None and forced.gate["invariants"]["ok"] is False


def test_resume_writes_where_the_run_was_found(env):
    # regression: review finding 6 — resume reopened the run under its stored results_dir
    tmp, common = env
    run_eval(**common, run_id="mv")
    moved = tmp / "elsewhere"
    moved.mkdir()
    (tmp / "results" / "mv").rename(moved / "mv")
    results = moved / "mv" / "results.jsonl"
    results.write_text("".join(results.read_text().splitlines(keepends=True)[:4]))  # as if killed after 4
    again = run_eval(**{**common, "results_dir": str(moved)}, resume="mv")
    assert Path(again.run_dir) == moved / "mv" and again.skipped == 4
    ids = [json.loads(line)["test_case_id"] for line in results.read_text().splitlines()]
    assert ids == [f"q{i}" for i in range(10)]
    assert not (tmp / "results" / "mv").exists()


FLAKY_BOT = textwrap.dedent(
    '''
    from pathlib import Path

    def ask(request):
        # Fails while the marker file exists: a server that was down during the first session.
        if Path(__file__).with_name("down").exists() and request["question"].endswith(" 4"):
            raise RuntimeError("server down")
        return {"answer": "ok [1]", "references": [], "abstained": False, "debug": {"retrieved_chunks": []}}
    '''
)


def test_resume_with_retry_errors_replaces_failed_cases(env):
    tmp, common = env
    bot = tmp / "flaky.py"
    bot.write_text(FLAKY_BOT)
    (tmp / "down").touch()
    common = {**common, "target": f"python:{bot}:ask"}
    first = run_eval(**common, run_id="flaky")
    assert first.n_errors == 1
    (tmp / "down").unlink()
    plain = run_eval(**common, resume="flaky")
    assert plain.skipped == 10  # without the flag, a recorded error counts as done
    again = run_eval(**common, resume="flaky", retry_errors=True)
    assert again.skipped == 9 and again.n_errors == 0
    records = [json.loads(line) for line in (tmp / "results" / "flaky" / "results.jsonl").read_text().splitlines()]
    assert [r["test_case_id"] for r in records] == [f"q{i}" for i in range(10)]
    assert records[4]["error"] is None
    with pytest.raises(BadConfig, match="goes with --resume"):
        run_eval(**common, retry_errors=True)


def test_a_target_failing_more_than_max_error_rate_is_not_a_success(env):
    tmp, common = env
    # by hand: q4 raises, 1 of 10 cases = 0.1 > 0.05
    result = run_eval(**{**common, "max_error_rate": 0.05})
    assert result.n_errors == 1 and result.error_rate == 0.1
    assert result.incomplete and not result.success
    assert result.warnings[0]["kind"] == "target_errors" and result.warnings[0]["ids"] == ["q4"]
    # the metrics are still written: the failed case counts as a miss, never dropped
    metrics = json.loads((result.run_dir / "metrics.json").read_text())
    assert metrics["total_tests"] == 10 and metrics["warnings"] == result.warnings
