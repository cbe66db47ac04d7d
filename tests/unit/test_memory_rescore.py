"""score_retrieval with --eval-set: the records are re-scored with the labels of the file
given (the cases may change group) and metrics.json is derived from them (issue 37: one
derive); metrics.json, summary.md and results.jsonl are the same whether one process
re-scores them or two forked workers do."""

from __future__ import annotations

import shutil
import textwrap
import threading
from pathlib import Path

import orjson
import pytest

from evalkit import score_retrieval
from evalkit.rescore.scoring import _read_cases

BOT = textwrap.dedent(
    '''
    def ask(request):
        i = int(request["question"].split()[1].rstrip("?"))
        if i % 19 == 4:
            raise RuntimeError("down")
        chunks = [{"chunk_id": f"id{(i * r) % 23}", "rel_path": f"n/{(i + r) % 6}.md", "heading_path": f"# H{r % 3} > ## S{r % 2}",
                   "start_line": 10 * r, "end_line": 10 * r + 4, "text": "word " * 40, "rank": r}
                  for r in range(1, 1 + i % 8)]
        if i % 29 == 5 and len(chunks) > 1:
            chunks[1]["chunk_id"] = chunks[0]["chunk_id"]  # a duplicate: the per-record lane takes it
        out = {"answer": f"answer {i} [1]" if i % 9 else "", "references": chunks[i % 2:1 + i % 2],
               "debug": {"retrieved_chunks": chunks, "timings_ms": {"retrieval": float(i)}}}
        if i % 5 == 0:
            out["abstained"] = i % 10 == 0
        return out
    '''
)


def _case(i: int, relabel: bool | str) -> dict:
    """Case i; relabelled: other supports for a third of the cases, and ("groups", True) other
    tags, category and answerable too."""
    shift = 1 if relabel and i % 3 == 0 else 0
    group = shift if relabel is True else 0
    case: dict = {"id": f"c{i}", "question": f"case {i}?", "answerable": i % 7 != 0 or bool(group and i % 14 == 0),
                  "tags": [f"t{(i + group) % 3}"], "category": ["factual", "reasoning"][(i + group) % 2]}
    if case["answerable"] and i % 11 != 2:
        case["gold_supports"] = [{"rel_path": f"n/{(i + shift) % 6}.md", "heading_path": "# H1", "relevance": 1 + i % 2},
                                 {"chunk_id": f"id{(i + shift) % 23}"}]
        if i % 4 == 0:
            case["gold_supports"].append({"rel_path": f"n/{(i + 2) % 6}.md", "start_line": 20, "end_line": 22})
            case["required_support_groups"] = [[0, 2], [1]]
        elif i % 13 == 6:
            case["gold_supports"][0]["graded_only"] = True  # the per-record lane takes it
    return case


def _write(path: Path, relabel: bool | str) -> Path:
    path.write_bytes(b"".join(orjson.dumps(_case(i, relabel)) + b"\n" for i in range(300)))
    return path


@pytest.fixture
def run(tmp_path: Path) -> Path:
    from evalkit import run_eval

    (tmp_path / "bot.py").write_text(BOT)
    es = _write(tmp_path / "es.jsonl", relabel=False)
    run_eval(eval_set=str(es), k=[5, 2], target=f"python:{tmp_path / 'bot.py'}:ask", results_dir=str(tmp_path / "results"),
             run_id="r", no_probe=True, max_error_rate=1.0, judge_provider="heuristic")
    return tmp_path / "results"


def _files(folder: Path) -> tuple:
    metrics = orjson.loads((folder / "metrics.json").read_bytes())
    metrics.pop("timestamp", None)
    metrics["retrieval_scoring"].pop("scored_at")
    summary = [x for x in (folder / "summary.md").read_text().splitlines() if "metrics written" not in x]
    return metrics, summary, (folder / "results.jsonl").read_bytes()


@pytest.mark.parametrize("relabel", [False, True])
def test_eval_set_given_in_two_processes_equals_one(run: Path, tmp_path: Path, relabel) -> None:
    given = _write(tmp_path / f"given_{relabel}.jsonl", relabel)
    copies = []
    for workers in (1, 2):
        results = tmp_path / f"workers{workers}"
        shutil.rmtree(results, ignore_errors=True)
        shutil.copytree(run, results)
        res = score_retrieval("r", results_dir=results, eval_set=given, workers=workers)
        # Forked workers only while no other thread runs (pytest-xdist's workers run some), and
        # only when there is something to re-score (new labels; else the records stand).
        assert res.processes == (workers if relabel and threading.active_count() == 1 else 1)
        assert res.results_rewritten == relabel  # new labels go into results.jsonl too
        assert bool(res.n_regrouped) == relabel
        copies.append(_files(results / "r"))
    assert copies[0] == copies[1]


def test_given_cases_are_dumped_when_asked(tmp_path: Path) -> None:
    """The cases of --eval-set are kept as the loaded set's bytes; each record's case is its
    model's JSON, made when the record asks for it."""
    from evalkit.evalset.load import load_eval_set

    path = _write(tmp_path / "es.jsonl", relabel=True)
    version, cases = _read_cases([str(path)])
    loaded = load_eval_set([path])
    assert version == loaded.version
    assert cases.get("c12") == loaded.cases[12].model_dump_json()
    assert cases.get("nope") is None and len(cases.index) == 300
