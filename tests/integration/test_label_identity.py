"""Issue 36 item 5, end to end: labels are part of a run's identity.

Two runs ask the same three cases. Run b is then re-scored with a relabelled copy of the eval
set (q2's gold support moved to another section). Before, metrics.json, results.json and
summary.md kept the old dataset_version and compare_runs said nothing, so the label change
went into the retrieval deltas unnoticed. Now every output shows the relabelled file's
version, compare names the label change (both versions, the run re-scored and the file), and
`--allow-label-change` accepts it with a warning; another eval set stays "eval sets differ".
"""

from __future__ import annotations

import hashlib
import json
import re
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli.main import app

pytestmark = pytest.mark.integration

CASES = [
    {"id": "q1", "question": "How do I water tomatoes?", "answerable": True,
     "gold_supports": [{"rel_path": "garden/tomatoes.md", "heading_path": "# Tomatoes > ## Watering"}]},
    {"id": "q2", "question": "When do I prune tomatoes?", "answerable": True,
     "gold_supports": [{"rel_path": "garden/tomatoes.md", "heading_path": "# Tomatoes > ## Pruning"}]},
    {"id": "q3", "question": "How hot should the oven be for bread?", "answerable": True,
     "gold_supports": [{"rel_path": "kitchen/bread.md", "heading_path": "# Bread"}]},
]

BOT = textwrap.dedent(
    '''
    _NOTES = {
        "water": ("garden/tomatoes.md", "# Tomatoes > ## Watering"),
        "prune": ("garden/tomatoes.md", "# Tomatoes > ## Pruning"),
        "oven": ("kitchen/bread.md", "# Bread"),
    }

    def ask(request):
        hits = [v for key, v in _NOTES.items() if key in request["question"]]
        chunks = [{"chunk_id": f"{p}#{h}", "rel_path": p, "heading_path": h, "text": h, "rank": i + 1}
                  for i, (p, h) in enumerate(hits)]
        refs = [{k: c[k] for k in ("chunk_id", "rel_path", "heading_path")} for c in chunks]
        return {"answer": "See [1].", "references": refs, "abstained": False, "debug": {"retrieved_chunks": chunks}}
    '''
)


def _invoke(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def _write(path: Path, cases: list[dict]) -> Path:
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("labels")
    es = _write(root / "cases.jsonl", CASES)
    relabelled = [dict(c) for c in CASES]
    relabelled[1] = {**CASES[1], "gold_supports": [{"rel_path": "garden/tomatoes.md", "heading_path": "# Tomatoes > ## Watering"}]}
    other = [dict(c) for c in CASES]
    other[0] = {**CASES[0], "question": "How often do I water tomatoes?"}
    (root / "bot.py").write_text(BOT)
    results = root / "results"
    for run_id in ("a", "b"):
        res = _invoke("run", "--eval-set", es, "--target", f"python:{root / 'bot.py'}:ask", "--retrieval-only",
                      "--no-probe", "--results-dir", results, "--run-id", run_id, "--quiet")
        assert res.exit_code == 0, res.output
    return {"root": root, "es": es, "results": results, "relabelled": _write(root / "relabelled.jsonl", relabelled),
            "other": _write(root / "other.jsonl", other)}


def _metrics(runs: dict[str, Path], run_id: str) -> dict:
    return json.loads((runs["results"] / run_id / "metrics.json").read_text())


def _rescore(runs: dict[str, Path], run_id: str, *flags: object) -> None:
    res = _invoke("score-retrieval", "--run-id", run_id, "--results-dir", runs["results"], *flags)
    assert res.exit_code == 0, res.output


def test_relabelled_rescoring_then_compare_names_the_label_change(runs: dict[str, Path]) -> None:
    old, new = _sha256(runs["es"]), _sha256(runs["relabelled"])  # dataset_version: sha256 of the file's bytes
    _rescore(runs, "b", "--eval-set", runs["relabelled"])
    try:
        m = _metrics(runs, "b")
        # every output that shows the dataset_version shows the relabelled file's
        assert m["dataset_version"] == new and m["cases_version"] == _metrics(runs, "a")["cases_version"]
        # by hand: q2's gold now names the Watering section, which the bot never returns for "prune": 2/3
        assert m["aggregate_metrics"]["recall_at_k_avg"] == pytest.approx(2 / 3)
        rj = json.loads((runs["results"] / "b" / "results.json").read_text())
        assert rj["dataset_version"] == new and rj["metrics"]["dataset_version"] == new
        assert rj["config"]["dataset_version"] == old  # config.json keeps what the run asked
        summary = (runs["results"] / "b" / "summary.md").read_text()
        assert f"- **dataset version**: {new[:12]} (labels re-scored from {runs['relabelled']}; the run asked {old[:12]})" in summary
        page = runs["root"] / "b.html"
        assert _invoke("report", "--run-id", "b", "--results-dir", runs["results"], "-o", page).exit_code == 0
        text = " ".join(re.sub(r"<[^>]+>", " ", page.read_text()).split())
        assert f"dataset version {new[:16]} (labels re-scored from" in text

        refused = _invoke("compare", "a", "b", "--results-dir", runs["results"], "--format", "json")
        assert refused.exit_code == 2, refused.output
        assert (f"cannot compare a with b: gold labels differ (dataset_version {old[:12]}… vs {new[:12]}…): the runs "
                f"hold the same cases (ids and questions) scored with other labels; the new run was re-scored "
                f"with {runs['relabelled']}: retrieval deltas would mix the label change with the chatbot's") in refused.stderr
        assert "--allow-label-change" in refused.stderr

        allowed = _invoke("compare", "a", "b", "--results-dir", runs["results"], "--format", "json",
                          "--allow-label-change", "--gate", "threshold", "--allow-regressions")
        assert allowed.exit_code == 0, allowed.output
        out = json.loads(allowed.stdout)
        assert out["invariants"]["violations"] == []
        assert out["invariants"]["warnings"][0].startswith(f"gold labels differ (dataset_version {old[:12]}… vs {new[:12]}…)")
        assert "(--allow-label-change): every delta that reads the labels" in out["invariants"]["warnings"][0]
        recall = next(r for r in out["deltas"] if r["metric"] == "recall_any" and r["scope"] == "overall")
        assert (recall["a"], recall["comparable"]) == (1.0, True) and recall["b"] == pytest.approx(2 / 3)

        # run_eval's gate against the relabelled baseline: refused before the run, accepted with the flag
        gated = ("run", "--eval-set", runs["es"], "--target", f"python:{runs['root'] / 'bot.py'}:ask", "--retrieval-only",
                 "--no-probe", "--results-dir", runs["results"], "--quiet", "--baseline", "b")
        refused_run = _invoke(*gated, "--run-id", "c")
        assert refused_run.exit_code == 2 and "gold labels differ" in refused_run.stderr
        assert not (runs["results"] / "c").exists()
        accepted = _invoke(*gated, "--run-id", "c2", "--allow-label-change", "--gate", "threshold", "--allow-regressions")
        assert accepted.exit_code == 0, accepted.output
        gate = _metrics(runs, "c2")["gate"]
        assert gate["invariants"]["violations"] == [] and "gold labels differ" in gate["invariants"]["warnings"][0]
    finally:
        # re-scoring with the run's own eval set brings its version back
        _rescore(runs, "b")
    assert _metrics(runs, "b")["dataset_version"] == old
    assert _invoke("compare", "a", "b", "--results-dir", runs["results"], "--format", "json").exit_code != 2


def test_another_eval_set_stays_eval_sets_differ(runs: dict[str, Path]) -> None:
    old, other = _sha256(runs["es"]), _sha256(runs["other"])
    res = _invoke("run", "--eval-set", runs["other"], "--target", f"python:{runs['root'] / 'bot.py'}:ask",
                  "--retrieval-only", "--no-probe", "--results-dir", runs["results"], "--run-id", "o", "--quiet")
    assert res.exit_code == 0, res.output
    # q1's question changed: other cases, not other labels; --allow-label-change does not let it through
    refused = _invoke("compare", "a", "o", "--results-dir", runs["results"], "--allow-label-change")
    assert refused.exit_code == 2
    assert f"eval sets differ (dataset_version {old[:12]}… vs {other[:12]}…)" in refused.stderr


def test_score_abstention_with_other_labels_changes_the_version_too(runs: dict[str, Path]) -> None:
    new = _sha256(runs["relabelled"])
    res = _invoke("score-abstention", "--run-id", "a", "--results-dir", runs["results"], "--eval-set", runs["relabelled"])
    assert res.exit_code == 0, res.output
    try:
        assert _metrics(runs, "a")["dataset_version"] == new
    finally:
        _rescore(runs, "a")
    assert _metrics(runs, "a")["dataset_version"] == _sha256(runs["es"])
