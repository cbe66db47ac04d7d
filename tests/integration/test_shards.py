"""Sharded runs and `evalkit merge` (issue 15 item 5): a 200-case run split into 4 shards,
run separately (one killed mid-run and resumed), merged, equals the unsharded run's
metrics exactly (timing aside); overlapping, incomplete, unfinished or mismatched shards are
refused with a message naming what is wrong; --shard-from-env reads the batch engines' index.
Shards count from 1 (issue 28 item 9); runs stored when they counted from 0 still resume, re-run
and merge."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

from evalkit.errors import BadConfig
from evalkit.evalset.shard import ENV_SOURCES, Shard, parse_shard, shard_from_env, shard_of
from evalkit.run.merge import merge_runs
from tests.support import bundled_cases, run_eval_api, run_eval_cli, start_run_eval_script, write_eval_set

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
N_CASES = 200

# Deterministic: what a question gets depends on its number alone (the delay only slows it,
# so that a subprocess run can be killed part way).
BOT = textwrap.dedent(
    '''
    import os, time

    def ask(request):
        delay = float(os.environ.get("SHARD_BOT_DELAY", "0"))
        if delay:
            time.sleep(delay)
        n = int(request["question"].split()[-1])
        if n % 11 == 0:
            return {"answer": "I don't know.", "abstained": True, "references": [], "debug": {"retrieved_chunks": []}}
        gold = f"notes/n{n}.md"
        ranking = ["notes/other.md", "notes/x.md", gold] if n % 3 == 0 else [gold, "notes/other.md"] if n % 3 == 1 else ["notes/x.md"]
        chunks = [{"chunk_id": f"{n}-{r}", "rel_path": p, "heading_path": "# H", "text": "t", "rank": r + 1,
                   "score_final": 1.0 / (r + 1)} for r, p in enumerate(ranking)]
        return {"answer": f"It is in [1] ({n}).", "abstained": False,
                "references": [{"rel_path": ranking[0], "heading_path": "# H"}],
                "debug": {"retrieved_chunks": chunks}}
    '''
)


def _case(n: int) -> dict:
    case = {"id": f"c{n:03d}", "question": f"question number {n}", "answerable": n % 11 != 0,
            "category": ["factual", "reasoning", "multi_hop"][n % 3], "tags": [f"t{n % 4}"], "difficulty": ["easy", "hard"][n % 2]}
    if n % 11:
        case["gold_supports"] = [{"rel_path": f"notes/n{n}.md"}]
    return case


@pytest.fixture
def setup(tmp_path: Path) -> dict:
    (tmp_path / "bot.py").write_text(BOT)
    es = write_eval_set(tmp_path / "es.jsonl", [_case(n) for n in range(N_CASES)])
    target = f"python:{tmp_path / 'bot.py'}:ask"
    # Every run here, sharded or not, in process or in a child, starts from these settings.
    run = dict(eval_set=es, target=target, k=[1, 3], retrieval_only=True, results_dir=tmp_path / "results",
               concurrency=2, quiet=True, retries=0)
    return {"eval_set": str(es), "target": target, "results": tmp_path / "results", "run": run}


def _run(setup: dict, **kw):
    return run_eval_api(**{**setup["run"], **kw})


def _comparable(metrics: dict) -> dict:
    """metrics.json without what a clock or a session measured."""
    agg = {k: v for k, v in metrics["aggregate_metrics"].items() if k not in ("latency", "judge")}
    body = {k: v for k, v in metrics.items() if k not in ("run_id", "timestamp", "run_timing", "aggregate_metrics")}
    return {**body, "aggregate_metrics": _strip_latency(agg)}


def _strip_latency(obj):
    if isinstance(obj, dict):
        return {k: _strip_latency(v) for k, v in obj.items() if "latency" not in k and not k.endswith("_ms")}
    if isinstance(obj, list):
        return [_strip_latency(x) for x in obj]
    return obj


def _records(run_dir: Path) -> list[dict]:
    return [orjson.loads(line) for line in (run_dir / "results.jsonl").read_bytes().splitlines()]


def _start_shard(setup: dict, shard: str, run_id: str) -> subprocess.Popen:
    return start_run_eval_script(**setup["run"], run_id=run_id, shard=shard, env={"SHARD_BOT_DELAY": "0.03"})


def _kill_after(proc: subprocess.Popen, path: Path, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if path.exists() and path.read_bytes().count(b"\n") >= n:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)
                return
            if proc.poll() is not None:
                raise AssertionError(f"shard ended early ({proc.returncode}): {proc.stderr.read()}")
            time.sleep(0.02)
        raise AssertionError(f"{path} never reached {n} lines")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_four_shards_one_killed_and_resumed_merge_to_the_unsharded_run(setup: dict) -> None:
    whole = _run(setup, run_id="whole")
    ids = []
    for i in range(1, 5):
        if i == 3:  # killed mid-run (SIGKILL), then resumed like any run
            proc = _start_shard(setup, "3/4", "s3")
            _kill_after(proc, setup["results"] / "s3" / "results.jsonl", 5)
            assert not (setup["results"] / "s3" / "metrics.json").exists()
            with pytest.raises(BadConfig, match=r"shard 3/4 \(run s3\) is unfinished: no metrics.json"):
                merge_runs(["s1", "s2", "s3"], run_id="early", results_dir=setup["results"])
            result = _run(setup, resume="s3", run_id=None, eval_set=None, target=None, k=None, retrieval_only=None)
            assert result.resumed and result.skipped >= 5
        else:
            result = _run(setup, run_id=f"s{i}", shard=f"{i}/4")
        ids.append(result.run_id)
    configs = [json.loads((setup["results"] / r / "config.json").read_text()) for r in ids]
    whole_config = json.loads((whole.run_dir / "config.json").read_text())
    # One config_hash for all shards and the unsharded run: the shard is recorded, not hashed.
    assert {c["config_hash"] for c in configs} == {whole_config["config_hash"]}
    assert [c["shard"]["index"] for c in configs] == [0, 1, 2, 3]  # sha256 mod 4, as ever
    assert [c["shard"]["number"] for c in configs] == [1, 2, 3, 4]
    assert [c["settings"]["shard"] for c in configs] == ["1/4", "2/4", "3/4", "4/4"]
    assert sum(c["shard"]["n_cases"] for c in configs) == N_CASES
    assert "shard" not in whole_config["hashed"] and "shard" not in whole_config

    merged = merge_runs(ids, run_id="merged", results_dir=setup["results"])
    assert merged.n_records == N_CASES and merged.merged_from == ids
    # Record by record, in eval-set order: the unsharded run's records (timing aside).
    a, b = _records(whole.run_dir), _records(merged.run_dir)
    assert [r["test_case_id"] for r in b] == [f"c{n:03d}" for n in range(N_CASES)]
    assert [_strip_latency(r) for r in a] == [_strip_latency(r) for r in b]
    whole_m = json.loads((whole.run_dir / "metrics.json").read_text())
    merged_m = json.loads((merged.run_dir / "metrics.json").read_text())
    assert _comparable(merged_m) == _comparable(whole_m)
    for slices in ("by_category", "by_tag", "by_difficulty", "by_answerable"):
        assert merged_m[slices] and _strip_latency(merged_m[slices]) == _strip_latency(whole_m[slices]), slices
    assert merged_m["aggregate_metrics"]["recall_at_k_avg"] == whole_m["aggregate_metrics"]["recall_at_k_avg"]
    # No one clock measured the merged run: its wall time is null, each shard's is listed.
    assert merged_m["aggregate_metrics"]["latency"]["total_ms"] is None
    assert [s["run_id"] for s in merged_m["run_timing"]["shards"]] == ids
    assert [(s["index"], s["number"]) for s in merged_m["run_timing"]["shards"]] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    cfg = json.loads((merged.run_dir / "config.json").read_text())
    assert cfg["merged_from"] == ids and "shard" not in cfg and cfg["config_hash"] == whole_config["config_hash"]
    assert cfg["settings"]["shard"] is None and cfg["eval_set"]["n_selected"] == N_CASES
    assert (setup["results"] / "latest").resolve().name == "merged"
    assert (merged.run_dir / "summary.md").exists()

    # Refused, with what is wrong said: overlap, incomplete, a non-shard.
    with pytest.raises(BadConfig, match=r"shard 2/4 given 2 times \(runs s2, s2\)"):
        merge_runs(["s1", "s2", "s2", "s3", "s4"], run_id="m2", results_dir=setup["results"])
    with pytest.raises(BadConfig, match=r"1 of 4 shards missing: 4/4"):
        merge_runs(["s1", "s2", "s3"], run_id="m3", results_dir=setup["results"])
    with pytest.raises(BadConfig, match=r"run whole is not a shard"):
        merge_runs(["whole", *ids], run_id="m4", results_dir=setup["results"])
    assert not any((setup["results"] / m).exists() for m in ("m2", "m3", "m4"))

    # Another config (K differs): refused on config_hash.
    other = _run(setup, run_id="k5", shard="4/4", k=[5])
    with pytest.raises(BadConfig, match="differ in config_hash") as e:
        merge_runs([*ids[:3], other.run_id], run_id="m5", results_dir=setup["results"])
    assert "s1, s2, s3" in str(e.value) and "k5" in str(e.value)


def test_empty_shards_run_and_merge(setup: dict) -> None:
    chosen = "c000,c001,c002"
    whole = _run(setup, run_id="whole3", ids=chosen)
    counts = Counter(shard_of(f"c{n:03d}", 4) for n in range(3))
    ids = []
    for i in range(1, 5):
        r = _run(setup, shard=f"{i}/4", ids=chosen)  # default run id: <time>-<hash>-shard-i-of-4
        assert r.run_id.endswith(f"-shard-{i}-of-4") and r.n_cases == counts.get(i - 1, 0)
        ids.append(r.run_id)
    assert 0 in [counts.get(i, 0) for i in range(4)]  # 3 cases, 4 shards: one at least is empty
    merged = merge_runs(ids, run_id="merged3", results_dir=setup["results"])
    assert _comparable(merged.metrics) == _comparable(json.loads((whole.run_dir / "metrics.json").read_text()))


def test_resume_refuses_another_shard(setup: dict) -> None:
    _run(setup, run_id="a", shard="1/8", ids="c000,c001")
    with pytest.raises(BadConfig, match="it ran shard 1/8, not 2/8"):
        _run(setup, resume="a", shard="2/8", run_id=None)


def test_shard_assignment_is_stable_and_balanced() -> None:
    ids = [f"case-{n}" for n in range(4000)]
    assert [shard_of(i, 4) for i in ids] == [shard_of(i, 4) for i in ids]
    # Known values: sha256("c000")[:8] mod 4, fixed forever (a change would reshuffle every sharded run).
    import hashlib

    assert shard_of("c000", 4) == int.from_bytes(hashlib.sha256(b"c000").digest()[:8], "big") % 4
    counts = Counter(shard_of(i, 4) for i in ids)
    assert set(counts) == {0, 1, 2, 3} and all(900 <= c <= 1100 for c in counts.values())
    assert parse_shard("4/4") == Shard(3, 4)  # shards count from 1: the fourth of four is index 3
    for bad, msg in (("0/4", "count from 1"), ("5/4", "out of range"), ("1", "I/N"), ("-1/4", "out of range"),
                     ("1/0", "at least 1")):
        with pytest.raises(BadConfig, match=msg):
            parse_shard(bad)


def _clear_shard_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for source in ENV_SOURCES:
        for name in (source.index, source.count, source.only_with):
            if name:
                monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("SLURM_ARRAY_TASK_MIN", raising=False)


def test_shard_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear_shard_env(monkeypatch)
    with pytest.raises(BadConfig, match="no shard index in the environment"):
        shard_from_env(4)
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "2")
    assert shard_from_env(4) == Shard(2, 4) and str(shard_from_env(4)) == "3/4"  # 0-based job 2: shard 3/4
    with pytest.raises(BadConfig, match="no shard count: pass --shard-count"):
        shard_from_env()
    monkeypatch.delenv("JOB_COMPLETION_INDEX")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "4")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "1")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "4")
    assert str(shard_from_env()) == "4/4"  # array 1-4: task 4 is shard 4/4
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "5")
    with pytest.raises(BadConfig, match="out of range"):
        shard_from_env()


def test_cli_shard_from_env_and_merge(setup: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from evalkit.cli.main import app

    runner = CliRunner()
    base = dict(eval_set=setup["eval_set"], target=setup["target"], k=1, retrieval_only=True,
                results_dir=setup["results"], quiet=True, ids="c000,c001,c002,c003,c004,c005")

    def run(**settings: object):
        return run_eval_cli("run", app=app, **base, **settings)

    _clear_shard_env(monkeypatch)
    out = run(run_id="x", shard_from_env=True, shard_count=2)
    assert out.exit_code == 2 and "no shard index in the environment" in out.output
    out = run(run_id="x", shard="1/2", shard_from_env=True)
    assert out.exit_code == 2 and "not both" in out.output
    out = run(run_id="x", shard="3/2")
    assert out.exit_code == 2 and "shard 3 is out of range for 2 shards: 1/2 .. 2/2" in out.output
    out = run(run_id="x", shard="0/2")  # 0-based habit: refused, with the fix
    assert out.exit_code == 2 and not (setup["results"] / "x").exists()
    assert ("--shard: shards count from 1, like Playwright's and Jest's --shard (1/2 .. 2/2); 0/2 was probably "
            "meant as the first: --shard 1/2") in out.output
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "0")
    assert run(run_id="k0", shard_from_env=True, shard_count=2).exit_code == 0
    monkeypatch.delenv("JOB_COMPLETION_INDEX")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
    assert run(run_id="k1", shard_from_env=True).exit_code == 0
    assert json.loads((setup["results"] / "k0" / "config.json").read_text())["settings"]["shard"] == "1/2"
    assert json.loads((setup["results"] / "k1" / "config.json").read_text())["shard"]["index"] == 1
    assert json.loads((setup["results"] / "k1" / "config.json").read_text())["settings"]["shard"] == "2/2"
    out = runner.invoke(app, ["merge", "k0", "--run-id", "km", "--results-dir", str(setup["results"])])
    assert out.exit_code == 2 and "1 of 2 shards missing: 2/2" in out.output
    out = runner.invoke(app, ["merge", "k0", "k1", "--run-id", "km", "--results-dir", str(setup["results"]), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output.strip().splitlines()[-1])["merged_from"] == ["k0", "k1"]


def test_github_actions_example_runs_locally(setup: dict, tmp_path: Path) -> None:
    """The example workflow's shard and merge commands, run here with a loop over the matrix."""
    import yaml

    workflow = yaml.safe_load((ROOT / "docs" / "examples" / "github-actions-shards.yml").read_text())
    jobs = workflow["jobs"]
    shards = jobs["eval-shard"]["strategy"]["matrix"]["shard"]
    shard_cmds = [s["run"] for s in jobs["eval-shard"]["steps"] if "run" in s and "--shard" in s["run"]]
    merge_cmds = [s["run"] for s in jobs["merge"]["steps"] if "run" in s and "merge" in s["run"]]
    assert len(shard_cmds) == 1 and len(merge_cmds) == 1
    env = {**os.environ, "EVAL_SET": setup["eval_set"], "RESULTS_DIR": str(setup["results"]),
           "TARGET": setup["target"], "SHARD_COUNT": str(len(shards)),
           # the `evalkit` beside this Python, as in an activated venv (pytest may be run as venv/bin/pytest)
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}

    def sh(cmd: str, **subs: str) -> None:
        for key, value in subs.items():
            cmd = cmd.replace("${{ " + key + " }}", value)
        assert "${{" not in cmd, cmd
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{cmd}\n{done.stderr}"

    for i in shards:
        sh(shard_cmds[0], **{"matrix.shard": str(i), "github.run_id": "42", "strategy.job-total": str(len(shards))})
    sh(merge_cmds[0], **{"github.run_id": "42", "strategy.job-total": str(len(shards))})
    config = json.loads((setup["results"] / "ci-42" / "config.json").read_text())
    assert config["merged_from"] == [f"ci-42-shard-{i}" for i in shards]
    assert len(_records(setup["results"] / "ci-42")) == N_CASES


def _as_stored_before_issue_28(run_dir: Path) -> None:
    """Rewrite a shard run's config.json as run_eval wrote it when shards counted from 0:
    `settings.shard` the 0-based spec, the `shard` block without `number` (its `index` was
    already the 0-based sha256 mod N)."""
    path = run_dir / "config.json"
    config = json.loads(path.read_text())
    block = config["shard"]
    del block["number"]
    config["settings"]["shard"] = f"{block['index']}/{block['count']}"
    path.write_text(json.dumps(config, indent=2))


def test_runs_stored_with_0_based_shards_resume_rerun_and_merge(setup: dict) -> None:
    # regression: issue 28 item 9. A run folder made before shards counted from 1 says "2/4" for
    # index 2 in settings.shard, which now reads as index 1: resume and repro must take the shard
    # from the block, and merge accept such folders, beside new ones too.
    from evalkit.run.repro import repro_stored

    chosen = ",".join(f"c{n:03d}" for n in range(40))
    whole = _run(setup, run_id="whole40", ids=chosen)
    runs = {i: _run(setup, run_id=f"old{i}", shard=f"{i + 1}/4", ids=chosen) for i in range(4)}
    for i in (0, 1, 2):  # shard 4/4 (index 3) stays new: old and new folders merge together
        _as_stored_before_issue_28(runs[i].run_dir)
    assert json.loads((runs[2].run_dir / "config.json").read_text())["settings"]["shard"] == "2/4"

    # Old shard index 2 killed part way (last 3 records gone, no metrics.json), then resumed.
    path = runs[2].run_dir / "results.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) > 3
    path.write_bytes(b"".join(lines[:-3]))
    (runs[2].run_dir / "metrics.json").unlink()
    with pytest.raises(BadConfig, match=r"shard 3/4 \(run old2\) is unfinished"):  # said 1-based
        merge_runs([f"old{i}" for i in range(4)], run_id="early40", results_dir=setup["results"])
    resumed = _run(setup, resume="old2", run_id=None, eval_set=None, target=None, k=None, retrieval_only=None, ids=None)
    assert resumed.resumed and resumed.skipped == len(lines) - 3
    assert {shard_of(r["test_case_id"], 4) for r in _records(runs[2].run_dir)} == {2}
    assert len(_records(runs[2].run_dir)) == len(lines)
    # Asking for the shard it ran, as users now number it, is no change; another one is refused.
    with pytest.raises(BadConfig, match="it ran shard 3/4, not 2/4"):
        _run(setup, resume="old2", shard="2/4", run_id=None, eval_set=None, target=None, k=None, retrieval_only=None,
             ids=None)

    # A re-run of an old shard runs the same cases (its block's shard, 3/4 now).
    again = repro_stored("old2", results_dir=setup["results"])
    assert again.reproducible
    rerun_config = json.loads((again.second.run_dir / "config.json").read_text())
    assert rerun_config["shard"]["index"] == 2 and rerun_config["settings"]["shard"] == "3/4"

    # Merged, with messages in users' numbering, equal to the unsharded run.
    with pytest.raises(BadConfig, match=r"shard 1/4 given 2 times \(runs old0, old0\)"):
        merge_runs(["old0", "old0", "old1", "old2", "old3"], run_id="m40", results_dir=setup["results"])
    with pytest.raises(BadConfig, match=r"1 of 4 shards missing: 1/4"):
        merge_runs(["old1", "old2", "old3"], run_id="m40", results_dir=setup["results"])
    merged = merge_runs([f"old{i}" for i in range(4)], run_id="merged40", results_dir=setup["results"])
    assert _comparable(merged.metrics) == _comparable(json.loads((whole.run_dir / "metrics.json").read_text()))
    cfg = json.loads((merged.run_dir / "config.json").read_text())
    assert [(x["index"], x["number"]) for x in cfg["shard_runs"]] == [(0, 1), (1, 2), (2, 3), (3, 4)]


SHIPPED = ROOT / "eval_set.jsonl"


def _shipped_run(results: Path, *extra: str):
    """`evalkit run` of the shipped eval set against the in-process reference chatbot over
    sample_vault/, judged by the offline heuristic judge."""
    from evalkit.cli.main import app

    return run_eval_cli("run", *extra, app=app, eval_set=SHIPPED, vault=ROOT / "sample_vault", results_dir=results,
                        quiet=True)


def _shipped_ids() -> tuple[list[str], list[str]]:
    """The shipped eval set's case ids, and those of its acknowledge_both cases."""
    cases = bundled_cases(SHIPPED)  # a conversation's turns are cases (`id#n`)
    return [c["id"] for c in cases], [c["id"] for c in cases if c.get("recency_conflict_rule") == "acknowledge_both"]


def test_the_shipped_eval_set_in_three_shards_merges(tmp_path: Path) -> None:
    # regression: issue 36 item 9. Only the shard holding the acknowledge_both case named the
    # conflict judge's prompt version in its hashed config, so `merge` exited 2 ("the shards
    # differ in config_hash").
    from typer.testing import CliRunner

    from evalkit.cli.main import app

    ids, conflict_ids = _shipped_ids()
    assert conflict_ids and len({shard_of(i, 3) for i in conflict_ids}) < 3  # a shard holds none: the bug's case
    results = tmp_path / "results"
    shards = [f"shipped-{i}" for i in (1, 2, 3)]
    for i, run_id in enumerate(shards, 1):
        out = _shipped_run(results, "--shard", f"{i}/3", "--run-id", run_id)
        assert out.exit_code == 0, out.output
    out = _shipped_run(results, "--run-id", "whole")
    assert out.exit_code == 0, out.output
    out = CliRunner().invoke(app, ["merge", *shards, "--run-id", "merged", "--results-dir", str(results)])
    assert out.exit_code == 0, out.output

    # Every case once, in eval-set order; one hashed config for the shards, the merge and the unsharded run.
    assert [r["test_case_id"] for r in _records(results / "merged")] == ids
    configs = {r: json.loads((results / r / "config.json").read_text()) for r in [*shards, "merged", "whole"]}
    assert len({json.dumps(c["hashed"], sort_keys=True) for c in configs.values()}) == 1
    assert len({c["config_hash"] for c in configs.values()}) == 1
    assert "conflict" in configs["whole"]["hashed"]["judge"]["prompt_version"]
    merged_m = json.loads((results / "merged" / "metrics.json").read_text())
    whole_m = json.loads((results / "whole" / "metrics.json").read_text())
    assert _comparable(merged_m) == _comparable(whole_m)


def test_a_shard_stored_before_issue_36_resumes_with_the_judge_it_recorded(tmp_path: Path) -> None:
    # A shard without an acknowledge_both case, run before issue 36, hashed a judge without
    # the conflict prompt: it resumes as it was (merging it with newer shards is refused).
    from evalkit.store.runs import config_hash

    _, conflict_ids = _shipped_ids()
    number = next(i for i in (1, 2, 3) if all(shard_of(c, 3) != i - 1 for c in conflict_ids))
    results = tmp_path / "results"
    out = _shipped_run(results, "--shard", f"{number}/3", "--run-id", "old")
    assert out.exit_code == 0, out.output
    run_dir = results / "old"
    config = json.loads((run_dir / "config.json").read_text())
    for judge in (config["hashed"]["judge"], config["judge"]):
        del judge["prompt_version"]["conflict"]
    config["config_hash"] = old_hash = config_hash(config["hashed"])
    (run_dir / "config.json").write_text(json.dumps(config, indent=2))
    lines = (run_dir / "results.jsonl").read_bytes().splitlines(keepends=True)
    (run_dir / "results.jsonl").write_bytes(b"".join(lines[:-3]))  # killed part way
    (run_dir / "metrics.json").unlink()

    result = run_eval_api(resume="old", results_dir=results, quiet=True)
    assert result.resumed and result.skipped == len(lines) - 3
    assert len(_records(run_dir)) == len(lines)
    config = json.loads((run_dir / "config.json").read_text())
    assert config["config_hash"] == old_hash and "conflict" not in config["hashed"]["judge"]["prompt_version"]
