"""Issue 28: "`score_retrieval --k 1 --k 3 --k 10` silently rewrites the run's primary K, and
later comparisons print `Holm over 0 test(s) … K measured by one run only`."

--k now only adds cut-offs; the primary K (headline names, slices, gate, compare_runs' shared
K) stays the run's unless --primary-k names another, and the output says which K is primary.
Before the fix, the re-scoring below made K=1 primary and compare_runs tested at K=10 only.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from evalkit import compare_runs, run_eval, score_retrieval
from evalkit.errors import BadConfig
from tests.integration.test_score_scripts import BOT, CASES, _write_set

pytestmark = pytest.mark.integration

# Run b's bot: q1 retrieves its gold first (a at rank 2), q5 no longer finds it (a at rank 3).
BOT_B = BOT.replace('"q1": ([("x", "n/x.md", "# X"), ("ab", "n/a.md", "# A > ## B")',
                    '"q1": ([("ab", "n/a.md", "# A > ## B"), ("x", "n/x.md", "# X")').replace(
    '("c", "n/c.md", "# C")], "No.", True)', '("s", "n/s.md", "# S")], "No.", True)')


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Runs a and b of the 8 cases, both made with --k 5 --k 10 (primary K 5, 10 chunks asked)."""
    assert BOT_B != BOT and BOT_B.count("n/s.md") == 1
    es = _write_set(tmp_path / "es.jsonl", CASES)
    for run_id, source in (("a", BOT), ("b", BOT_B)):
        (tmp_path / f"bot_{run_id}.py").write_text(textwrap.dedent(source))
        run_eval(eval_set=str(es), k=[5, 10], target=f"python:{tmp_path / f'bot_{run_id}.py'}:ask", retrieval_only=True,
                 results_dir=str(tmp_path / "results"), run_id=run_id, no_probe=True)
    return tmp_path / "results"


def _metrics(results: Path, run_id: str) -> dict:
    return orjson.loads((results / run_id / "metrics.json").read_bytes())


def _flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps long lines at the terminal's width


def _score(results: Path, *args: str):
    from evalkit.cli.score_retrieval import app

    return CliRunner().invoke(app, ["--run-id", "a", "--results-dir", str(results), *args])


def test_extra_k_keep_the_primary_k_and_compare_runs_still_tests_at_it(runs: Path) -> None:
    before = _metrics(runs, "a")["aggregate_metrics"]
    res = _score(runs, "--k", "1", "--k", "3", "--k", "10")
    assert res.exit_code == 0, res.output
    assert "primary K: 5 (the run's, kept; --primary-k K makes another K primary); other K: 1, 3, 10" in _flat(res.stdout)
    m = _metrics(runs, "a")
    agg = m["aggregate_metrics"]
    assert m["ks"] == [5, 1, 3, 10] and agg["k"] == 5
    # the primary K's numbers are the run's own; the new cut-offs are added beside them
    for key in ("recall_at_k_avg", "mrr_avg", "ndcg_at_k_avg", "precision_at_k_avg", "recall_frac_avg"):
        assert agg[key] == before[key], key
    assert agg["at_k"]["5"] == before["at_k"]["5"] and agg["at_k"]["10"] == before["at_k"]["10"]
    # by hand: at K=1 only q2 (cz) and q8 (e) match, of 5 labelled cases
    assert agg["at_k"]["1"]["recall_any"] == 2 / 5 and agg["at_k"]["3"]["recall_any"] == 4 / 5

    c = compare_runs("a", "b", results_dir=runs, resamples=500)
    assert c.ks["primary"] == 5 and c.ks["compared"] == [5, 10] and c.ks["only_a"] == [1, 3]
    # the paired tests run at K=5 (8 cases are too few for any to enter the Holm family)
    # by hand: MRR@5 changes for q1 (1/2 -> 1) and q5 (1/3 -> 0), Recall@5 for q5 only (1 -> 0)
    at5 = {r.metric: r for r in c.deltas if r.scope == "overall" and r.k == 5}
    assert at5["mrr"].p_value is not None and at5["mrr"].n == 5 and at5["mrr"].n_changed == 2
    assert at5["recall_any"].p_value is not None and at5["recall_any"].n_changed == 1


def test_primary_k_is_changed_only_when_asked_and_then_stays(runs: Path) -> None:
    res = _score(runs, "--primary-k", "3")
    assert res.exit_code == 0, res.output
    assert "primary K: 3 (changed from 5 by --primary-k); other K: 5, 10" in _flat(res.stdout)
    assert _metrics(runs, "a")["ks"] == [3, 5, 10] and _metrics(runs, "a")["aggregate_metrics"]["k"] == 3
    # a later --k keeps the K chosen, not the first --k
    later = score_retrieval("a", ks=[1], results_dir=runs)
    assert later.metrics["ks"] == [3, 1] and later.metrics["retrieval_scoring"]["primary_k_from"] == "--primary-k"
    assert _score(runs, "--primary-k", "5").exit_code == 0  # and back to the run's own
    assert _metrics(runs, "a")["retrieval_scoring"]["primary_k_from"] == "config.json"
    res = _score(runs, "--primary-k", "20")
    assert res.exit_code == 2
    assert "--primary-k: K=20 is larger than the K=10 the run asked its target for" in _flat(res.stderr)
    assert "use --primary-k 10 or less" in _flat(res.stderr)
    with pytest.raises(BadConfig, match="use --primary-k 10 or less"):
        score_retrieval("a", primary_k=11, results_dir=runs)


def test_a_primary_k_an_older_score_retrieval_changed_silently_goes_back_to_the_run_s(runs: Path) -> None:
    # As the first --k of an older evalkit left it: K=1 primary, and no record that anyone asked.
    score_retrieval("a", ks=[3], primary_k=1, results_dir=runs)
    path = runs / "a" / "metrics.json"
    m = _metrics(runs, "a")
    del m["retrieval_scoring"]["primary_k_from"]
    path.write_bytes(orjson.dumps(m))
    res = _score(runs, "--k", "3")
    assert res.exit_code == 0, res.output
    assert "primary K: 5 (the run's; metrics.json had 1, from the first --k of an older score_retrieval); " \
           "other K: 3" in _flat(res.stdout)
    assert _metrics(runs, "a")["ks"] == [5, 3]
