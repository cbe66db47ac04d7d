"""`evalkit merge` is atomic (issue 29 item 6): the merged run is built in a hidden staging
folder beside the destination and renamed into place at the end, so a merge that fails or is
killed part way leaves no run folder under the destination id, nothing `list_runs` or
`latest` would show, and the next merge removes what a killed one left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

import evalkit.derive
from evalkit.cli.merge import app as merge_app
from evalkit.errors import BadConfig
from evalkit.run.merge import merge_runs
from evalkit.store.atomic import remove_stale_stages
from evalkit.store.runs import DERIVE_PENDING, RunDir, latest_run_id, list_runs
from tests.support import make_case, run_eval_api, write_eval_set

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
N_CASES = 12
SHARDS = ["s1", "s2"]

BOT = textwrap.dedent(
    '''
    def ask(request):
        n = int(request["question"].split()[-1])
        gold = f"notes/n{n}.md"
        ranking = [gold, "notes/x.md"] if n % 2 else ["notes/x.md", gold]
        chunks = [{"chunk_id": f"{n}-{r}", "rel_path": p, "heading_path": "# H", "text": "t", "rank": r + 1,
                   "score_final": 1.0 / (r + 1)} for r, p in enumerate(ranking)]
        return {"answer": f"It is in [1] ({n}).", "abstained": False,
                "references": [{"rel_path": ranking[0], "heading_path": "# H"}], "debug": {"retrieved_chunks": chunks}}
    '''
)

# evalkit merge with the derive step replaced by a SIGKILL of the process itself: killed after
# the merged results.jsonl and config.json were written, before metrics.json.
KILLED_MERGE = """
import os, signal, sys
import evalkit.derive

evalkit.derive.derive_run = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
from evalkit.run.merge import merge_runs

merge_runs(sys.argv[2:], run_id="merged", results_dir=sys.argv[1])
"""


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Two finished shard runs (s1, s2) of a 12-case retrieval-only run."""
    (tmp_path / "bot.py").write_text(BOT)
    es = write_eval_set(tmp_path / "es.jsonl", [
        make_case(f"c{n:02d}", question=f"question number {n}", gold_supports=[{"rel_path": f"notes/n{n}.md"}])
        for n in range(N_CASES)])
    results = tmp_path / "results"
    for i, run_id in enumerate(SHARDS, start=1):  # shards count from 1 (issue 28)
        run_eval_api(eval_set=es, target=f"python:{tmp_path / 'bot.py'}:ask", k=[1, 3], retrieval_only=True,
                     results_dir=results, concurrency=1, quiet=True, retries=0, shard=f"{i}/{len(SHARDS)}",
                     run_id=run_id)
    assert latest_run_id(results) == "s2"
    return results


def _hidden(results: Path) -> list[str]:
    return sorted(p.name for p in results.iterdir() if p.name.startswith(".") and p.is_dir())


def _assert_no_merged_run(results: Path) -> None:
    assert not (results / "merged").exists()
    assert sorted(list_runs(results)) == SHARDS  # no half-made run listed, under any name
    assert latest_run_id(results) == "s2"


def _assert_merged(results: Path) -> None:
    run = RunDir.open(results, "merged")
    metrics = run.read_metrics()
    assert metrics["run_id"] == "merged" and metrics["total_tests"] == N_CASES
    assert sorted(p.name for p in run.path.iterdir()) == [
        "config.json", "metrics.json", "results.json", "results.jsonl", "summary.md"]
    assert not (run.path / DERIVE_PENDING).exists()
    assert sorted(list_runs(results)) == ["merged", *SHARDS]
    assert latest_run_id(results) == "merged"
    assert _hidden(results) == []


def test_a_merge_that_fails_part_way_leaves_no_run(results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    staged: list[Path] = []

    def fail(run: RunDir, *args, **kwargs):
        # The merged records and config.json are written by now, in the staging folder.
        assert (run.path / "results.jsonl").stat().st_size > 0 and (run.path / "config.json").exists()
        assert run.run_id == "merged" and run.path.parent.parent == results
        assert run.path.parent.name.startswith(".merged.") and "merged" not in list_runs(results)
        staged.append(run.path.parent)
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(evalkit.derive, "derive_run", fail)
    with pytest.raises(RuntimeError, match="disk on fire"):
        merge_runs(SHARDS, run_id="merged", results_dir=results)
    assert staged and not staged[0].exists()  # removed on the way out
    _assert_no_merged_run(results)
    monkeypatch.undo()
    merge_runs(SHARDS, run_id="merged", results_dir=results)
    _assert_merged(results)


def test_a_killed_merge_is_never_a_run_and_the_next_merge_removes_it(results: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", KILLED_MERGE, str(results), *SHARDS], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    (left,) = _hidden(results)
    assert left.startswith(".merged.") and left.endswith(".stage.tmp")
    assert sorted(os.listdir(results / left / "merged")) == ["config.json", "results.jsonl"]  # killed part way
    _assert_no_merged_run(results)
    with pytest.raises(BadConfig, match="not a valid run id"):
        RunDir.open(results, left)
    # The next merge (the CLI, as a user reruns it) removes the leftover and succeeds.
    res = CliRunner().invoke(merge_app, [*SHARDS, "--run-id", "merged", "--results-dir", str(results)])
    assert res.exit_code == 0, res.output
    _assert_merged(results)


def test_a_merge_never_removes_a_live_merges_staging_folder(results: Path) -> None:
    live = results / ".other.k3j9x2ab.stage.tmp"
    (live / "other").mkdir(parents=True)
    code = (
        "import fcntl, os, sys\n"
        f"fd = os.open({str(live)!r}, os.O_RDONLY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "sys.stdin.read()\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        merge_runs(SHARDS, run_id="merged", results_dir=results)
        assert (live / "other").is_dir()  # another merge is building it: not ours to remove
    finally:
        holder.communicate("")
    assert remove_stale_stages(results) == [live]  # its process is gone: debris now
    _assert_merged(results)


def test_a_taken_destination_is_refused_before_anything_is_written(results: Path) -> None:
    merge_runs(SHARDS, run_id="merged", results_dir=results)
    before = sorted(os.listdir(results / "merged"))
    with pytest.raises(BadConfig, match="already exists"):
        merge_runs(SHARDS, run_id="merged", results_dir=results)
    assert sorted(os.listdir(results / "merged")) == before
    assert _hidden(results) == []
