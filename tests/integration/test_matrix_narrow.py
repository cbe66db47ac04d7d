"""Issue 28: "matrix tables are unreadable piped at 80 columns". Before, `run_eval.py --matrix`
piped at COLUMNS=80 printed the 10-column table squeezed into 80 columns: preset names,
run ids, Recall@5 and the significance column were cut to `pres…`, `2026…`, `Reca…`,
`sign…`, `+0.1…` (checked with this test's command before the fix). Now the same run prints
a compact table that keeps every number."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BOT = f"python:{REPO / 'tests' / 'integration' / 'matrix_bot.py'}:ask"


def test_matrix_piped_at_80_columns_fits_and_keeps_the_numbers(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run(
        [sys.executable, "scripts/run_eval.py", "--eval-set", str(REPO / "eval_set.jsonl"), "--target", BOT,
         "--retrieval-only", "--k", "5", "--results-dir", str(tmp_path / "results"), "--run-id", "mx",
         "--matrix", "bm25_k1=10,1.2", "--expect-order", "10<=1.2:ndcg@5"],
        cwd=REPO, capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 80, proc.stdout
    assert "…" not in proc.stdout
    # Measured on the bundled 66 cases (59 questions, 7 conversation turns): nDCG@5 0.589 with
    # k1 = 10, 0.675 with k1 = 1.2 (the default), significant after Holm; Recall@5 0.862, 0.879.
    assert lines[0] == "config matrix mx: runs mx-<preset>"
    assert lines[1].split() == ["preset", "n", "Recall@5", "MRR@5", "nDCG@5", "p50/p95", "ms", "vs", "prev."]
    first, second = lines[3].split(), lines[4].split()
    assert first[:6] == ["10", "66", "0.862", "0.614", "0.589", first[5]] and first[6:] == ["–"]
    assert second[:5] == ["1.2", "66", "0.879", "0.726", "0.675"] and second[6:] == ["▲", "+0.086"]
    assert "expect-order 10<=1.2:ndcg@5: holds" in proc.stdout
