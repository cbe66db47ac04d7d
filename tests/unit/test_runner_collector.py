"""The ask loop runs the cyclic garbage collector less often (issue 39 item 4: with answers of
real text, young-generation collections were about a tenth of the runner's CPU per case), and
gives the caller's thresholds back when the run ends, or fails."""

from __future__ import annotations

import gc
import textwrap
from pathlib import Path

import pytest

from evalkit.collector import YOUNG_THRESHOLD, fewer_collections
from tests.support import make_case, run_eval_api, write_eval_set


def _bot(tmp_path: Path) -> str:
    """A python: target that notes the collector's thresholds each time it is asked."""
    path = tmp_path / "gc_bot.py"
    path.write_text(textwrap.dedent(f"""
        import gc

        def ask(request):
            with open({str(tmp_path / "seen.txt")!r}, "a") as f:
                f.write(" ".join(map(str, gc.get_threshold())) + "\\n")
            return {{"answer": "ok", "abstained": False, "references": [],
                    "debug": {{"retrieved_chunks": [{{"rel_path": "a.md", "heading_path": "# A", "rank": 1}}]}}}}
    """))
    return f"python:{path}:ask"


def test_the_ask_loop_collects_less_often_and_restores_the_thresholds(tmp_path: Path) -> None:
    es = write_eval_set(tmp_path / "es.jsonl", [make_case(f"c{i}") for i in range(3)])
    before = gc.get_threshold()
    result = run_eval_api(eval_set=es, target=_bot(tmp_path), results_dir=tmp_path / "r", retrieval_only=True,
                          no_probe=True, quiet=True)
    seen = {tuple(map(int, line.split())) for line in (tmp_path / "seen.txt").read_text().splitlines()}
    assert result.n_cases == 3
    # every case asked inside the window; the older generations' thresholds as they were
    assert seen == {(max(before[0], YOUNG_THRESHOLD), *before[1:])}
    assert gc.get_threshold() == before


def test_the_thresholds_come_back_when_the_block_raises() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), fewer_collections():
        assert gc.get_threshold()[0] == max(before[0], YOUNG_THRESHOLD)
        raise RuntimeError("stop")
    assert gc.get_threshold() == before
