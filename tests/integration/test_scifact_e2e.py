"""BEIR SciFact (test split: 300 queries, 5,183 abstracts) through `--format beir` and the
reference chatbot's BM25, retrieval-only at K=10; skipped when ../shared/corpora/scifact is absent.

(a) evalkit's nDCG@10 and Recall@10 equal ranx's, computed from BEIR's own qrels file and
the chunks in results.jsonl, to 1e-9. What the independent run has to mirror:

- The reference chatbot ranks *chunks*; an abstract over 256 tokens is several chunks, so one
  note can sit at several of the 10 positions. evalkit matches every chunk of a note to the
  note's whole-note gold support (heading_path ""), but credits each support once, at its
  first position, and positions are chunk ranks (the later chunks of that note gain nothing
  and are *not* removed). So the ranx run has one entry per retrieved chunk, position p
  scored 10 - p: the first chunk of a note is the BEIR id (note path -> id), every later
  chunk of the same note a filler id no qrels judge. (Collapsing duplicates and moving the
  later notes up is the note-level figure below; it is not what evalkit reports.)
- evalkit's gain is 2^rel - 1: ranx `ndcg_burges` (SciFact's qrels are all 1, so it equals
  `ndcg` here). evalkit's `recall_frac` (|gold hit in top K| / |gold|) is ranx `recall`;
  `recall_any` (the seed's Recall@K, a hit) is ranx `hit_rate`.

(b) nDCG@10 within ±0.03 of BM25's published SciFact figure (BEIR paper 0.665; Pyserini's
flat index 0.679). Figures and timings: bench/README.md, "SciFact (BEIR) through the
reference chatbot".
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from evalkit.interop.importers.beir import import_beir, note_path
from evalkit.run.runner import run

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("ranx")]

REPO_ROOT = Path(__file__).resolve().parents[2]
SCIFACT = REPO_ROOT.parent / "shared" / "corpora" / "scifact"
K = 10
BEIR_PAPER_NDCG10 = 0.665  # Thakur et al. 2021, Table 2, BM25 on SciFact


@pytest.mark.skipif(not (SCIFACT / "qrels" / "test.tsv").is_file(), reason=f"SciFact not found at {SCIFACT}")
def test_scifact_ndcg_and_recall_match_ranx_and_the_published_bm25(tmp_path: Path) -> None:
    ranx = pytest.importorskip("ranx")
    vault, eval_set = tmp_path / "vault", tmp_path / "eval_set.jsonl"

    t0 = time.perf_counter()
    imported = import_beir(SCIFACT, vault_out=vault, output=eval_set, split="test")
    t_import = time.perf_counter() - t0
    assert (len(imported.cases), imported.n_docs, imported.n_judgments) == (300, 5183, 339)
    assert imported.warnings == ()

    t0 = time.perf_counter()
    result = run({"vault": str(vault), "eval_set": [str(eval_set)], "retrieval_only": True, "k": [K],
                  "results_dir": str(tmp_path / "results"), "concurrency": 4})
    t_run = time.perf_counter() - t0
    assert result.success and result.n_cases == 300 and result.n_errors == 0
    ours = json.loads((result.run_dir / "metrics.json").read_text())["aggregate_metrics"]["at_k"][str(K)]

    # Independent side: BEIR's qrels file as it stands, and a run built from results.jsonl.
    qrels: dict[str, dict[str, int]] = {}
    for line in (SCIFACT / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, doc_id, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(qid, {})[doc_id] = int(score)
    to_beir = {note_path(d): d for judged in qrels.values() for d in judged}
    runs: dict[str, dict[str, float]] = {}
    notes_first: dict[str, dict[str, float]] = {}  # the note-level figure: duplicates collapsed
    for line in (result.run_dir / "results.jsonl").read_text().splitlines():
        rec = json.loads(line)
        ranked, seen, collapsed = {}, set(), {}
        for p, chunk in enumerate(rec["retrieved_chunks"][:K]):
            note = chunk["rel_path"]
            doc = to_beir.get(note, f"unjudged:{note}")
            ranked[doc if note not in seen else f"repeat:{p}"] = float(K - p)
            if note not in seen:
                collapsed[doc] = float(K - len(collapsed))
            seen.add(note)
        runs[rec["test_case_id"]] = ranked or {"empty": 0.0}
        notes_first[rec["test_case_id"]] = collapsed or {"empty": 0.0}
    assert set(runs) == set(qrels)
    theirs = ranx.evaluate(ranx.Qrels.from_dict(qrels), ranx.Run.from_dict(runs),
                           [f"ndcg_burges@{K}", f"recall@{K}", f"hit_rate@{K}"])
    note_level = ranx.evaluate(ranx.Qrels.from_dict(qrels), ranx.Run.from_dict(notes_first), [f"ndcg_burges@{K}"])

    assert ours["ndcg"] == pytest.approx(theirs[f"ndcg_burges@{K}"], abs=1e-9)
    assert ours["recall_frac"] == pytest.approx(theirs[f"recall@{K}"], abs=1e-9)
    assert ours["recall_any"] == pytest.approx(theirs[f"hit_rate@{K}"], abs=1e-9)
    assert abs(ours["ndcg"] - BEIR_PAPER_NDCG10) <= 0.03
    print(f"\nSciFact test: nDCG@{K} {ours['ndcg']:.4f} (note-level {note_level:.4f}), "
          f"Recall@{K} {ours['recall_frac']:.4f}, hit@{K} {ours['recall_any']:.4f}; "
          f"import {t_import:.2f} s, run {t_run:.2f} s")
