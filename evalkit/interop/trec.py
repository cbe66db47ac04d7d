"""A stored run as TREC files: `run.trec`, `qrels.trec`, `topics.tsv` (and `docids.tsv`).

`export_trec` reads results.jsonl once and writes, into `out_dir`:

- `run.trec`: `qid Q0 docid rank score tag`, one line per retrieved chunk of the top K,
  in evalkit's rank order (`anchors.order_chunks`); ranks are 1-based. trec_eval re-sorts
  each query by score (descending, ties by docid descending), so `score` is synthetic and
  strictly decreasing: `n - rank + 1` for a query with n lines (the last line scores 1).
  Real `score_final` values tie or repeat too often to keep our order. A query whose
  ranking is empty (a target error, an empty answer) gets one placeholder line,
  `qid Q0 evalkit-empty 1 0 tag`: a non-relevant document changes no metric, and the
  query still counts in trec_eval's means without `-c`.
- `qrels.trec`: `qid 0 docid rel`, rel > 0 only (graded; integers when integral). A
  query of unit chunk or note with nothing to judge (its supports name no chunk_id or
  rel_path, and no retrieved chunk matched one) gets one judgment
  `qid 0 evalkit-unretrieved 1`, a relevant document never retrieved: the query still
  counts, with precision and RR 0, as evalkit counts it (trec_eval and ranx skip a query
  without judgments).
- `topics.tsv`: `qid<TAB>question`, the topics `evalkit import --format trec` reads back.
- `docids.tsv` (units note and chunk): `docid<TAB>rel_path[<TAB>heading_path]`, the
  `--docid-map` that turns the docids back into gold-support locations on import.

qid is the case id; in a `--trials` run each answer is a query of its own, `<id>#<trial>`
(metrics.json pools every answer, so the means agree). Only cases evalkit scores are
exported: unanswerable and unlabeled cases never count in retrieval means and are left
out of both files, as are cases with no support of relevance > 0 (counted in
`TrecExport.excluded`). A docid never holds whitespace: whitespace and `%` are
percent-encoded (`Team%20directory.md`).

Units (what a TREC "document" is):

- `anchor` (default): docid of a retrieved chunk = `g<i>`, the gold support (index i in
  the case's gold_supports) it is credited with by evalkit's own matcher, with nDCG's
  rule: each support credited once, by the first chunk matching it (among several
  supports not yet credited, the highest relevance, then the lowest index); any other
  chunk gets a non-relevant `c<rank>`. qrels = every support `g<i>` with its relevance.
  ranx's `recall`, `hit_rate`, `mrr`, `ndcg_burges`, `map` and `r-precision` (trec_eval's
  `recall`, `success`, `recip_rank`, `ndcg_cut` for binary grades, `map_cut` and `Rprec`) then
  equal evalkit's recall_frac, recall_any, mrr, ndcg, map and rprec. Not precision: evalkit counts every chunk matching a
  support (two chunks of the gold section are two hits), a TREC document is relevant once.
- `chunk`: docid = chunk_id (else `rel_path#heading_path`); qrels = the supports'
  chunk_ids and every top-K chunk that matched a support (its best relevance). Equals
  evalkit's precision and mrr; recall is over chunks, not supports.
- `note`: docid = rel_path (top-K chunks cut first, then each note kept at its first
  rank); qrels = the supports' rel_paths, the best relevance per note.

Where a case's TREC values cannot equal evalkit's (graded-only supports, which count for
nDCG only; supports of relevance 0, which count for recall only; a chunk matching two
supports of which only one can be credited), the export recomputes both per case and
counts the differences in `TrecExport.differs` (metric -> cases).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from evalkit.errors import BadConfig, InputError, Problem
from evalkit.evalset.anchors import GoldIndex, normalize_rel_path, order_chunks
from evalkit.metrics.retrieval import score_case_retrieval
from evalkit.store.atomic import write_atomic
from evalkit.store.runlog import Cell, Rec
from evalkit.store.runs import RunDir

__all__ = ["UNITS", "TrecExport", "export_trec", "trec_docid"]

UNITS = ("chunk", "note", "anchor")
Unit = Literal["chunk", "note", "anchor"]
EMPTY_DOCID = "evalkit-empty"
UNRETRIEVED_DOCID = "evalkit-unretrieved"
# evalkit metric -> the ranx metric that equals it on an anchor export.
RANX_NAMES = {"recall_frac": "recall", "recall_any": "hit_rate", "precision": "precision", "mrr": "mrr", "ndcg": "ndcg_burges",
              "map": "map", "rprec": "r-precision"}


@dataclass
class TrecExport:
    """What `export_trec` wrote.

    Attributes:
        run_id / unit / k / tag: the run and the export's settings.
        out_dir: the folder; run_path, qrels_path, topics_path, docids_path (None for
            unit anchor): the files in it.
        n_queries: queries written (in both run.trec and qrels.trec).
        n_run_lines / n_qrels_lines: lines written.
        excluded: cases left out, by reason: "unanswerable", "unlabeled", "no_relevant".
        differs: evalkit metric -> number of exported queries whose TREC value (as ranx
            computes it on these files) differs from evalkit's, for the metrics of the
            unit (anchor: recall_frac, recall_any, mrr, ndcg, map, rprec, precision; chunk/note: precision, mrr).
        warnings: one line each.
    """

    run_id: str
    unit: str
    k: int
    tag: str
    out_dir: Path
    run_path: Path
    qrels_path: Path
    topics_path: Path
    docids_path: Path | None
    n_queries: int = 0
    n_run_lines: int = 0
    n_qrels_lines: int = 0
    excluded: dict[str, int] = field(default_factory=lambda: {"unanswerable": 0, "unlabeled": 0, "no_relevant": 0})
    differs: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "unit": self.unit, "k": self.k, "tag": self.tag, "out_dir": str(self.out_dir),
            "files": {
                "run": str(self.run_path), "qrels": str(self.qrels_path), "topics": str(self.topics_path),
                "docids": str(self.docids_path) if self.docids_path else None,
            },
            "n_queries": self.n_queries, "n_run_lines": self.n_run_lines, "n_qrels_lines": self.n_qrels_lines,
            "excluded": dict(self.excluded), "differs": dict(self.differs), "warnings": list(self.warnings),
        }


_ESCAPE = re.compile(r"[\s%]")


def trec_docid(raw: str) -> str:
    """`raw` with whitespace and `%` percent-encoded: TREC fields are whitespace-separated."""
    return _ESCAPE.sub(lambda m: quote(m.group(), safe=""), raw) or "%00"


def _rel_text(r: float) -> str:
    return str(int(r)) if float(r).is_integer() else repr(float(r))


def export_trec(
    run: RunDir | str,
    out_dir: str | Path | None = None,
    *,
    unit: Unit = "anchor",
    k: int | None = None,
    tag: str | None = None,
    results_dir: str | Path = "results",
    require_snippets: bool | None = None,
    allow_truncated_text: bool = False,
    case_sensitive: bool = True,
) -> TrecExport:
    """Write run `run` as TREC run/qrels/topics files (module docstring: the formats).

    Args:
        run: an open RunDir, or a run id (`latest` works) under `results_dir`.
        out_dir: the folder to write (created; the four files in it are replaced).
            Default: `<run folder>/trec-<unit>/`.
        unit: "anchor" | "chunk" | "note": what a TREC document is.
        k: the cut-off (default: the run's primary K); at most the largest K it asked for.
        tag: the run.trec tag column (default: the run id).
        require_snippets: enforce gold snippets when matching (default: the run's setting).
        allow_truncated_text: as `score_retrieval`: with snippets on a run stored without
            --store-full-text, match on the 200-character texts anyway (upper bounds).
        case_sensitive: compare paths and headings case-sensitively (EVAL.md "Anchors").

    Returns:
        TrecExport: the paths, counts, exclusions and per-metric differences.

    Raises:
        InputError: unknown run (RunNotFound); unknown unit; a bad K; snippets required
            on cut text without allow_truncated_text (as `score_retrieval`); a record
            without its case.
    """
    if unit not in UNITS:
        raise BadConfig(Problem(f"unknown unit {unit!r}; expected one of {', '.join(UNITS)}", field="--unit"))
    run = run if isinstance(run, RunDir) else RunDir.open(Path(results_dir), run)
    cfg = run.read_config()
    k, snippets = _checked_settings(run, cfg, k, require_snippets=require_snippets, allow_truncated_text=allow_truncated_text)
    trials = int((cfg.get("hashed") or {}).get("trials") or 1) > 1
    tag = trec_docid(tag or run.run_id)
    out = Path(out_dir) if out_dir is not None else run.path / f"trec-{unit}"
    result = TrecExport(
        run_id=run.run_id, unit=unit, k=k, tag=tag, out_dir=out, run_path=out / "run.trec",
        qrels_path=out / "qrels.trec", topics_path=out / "topics.tsv",
        docids_path=None if unit == "anchor" else out / "docids.tsv",
    )
    opts = _Options(unit, k, tag, snippets, case_sensitive, trials)
    lines = _Lines()
    for line, rec in enumerate(run.iter_results(), start=1):
        case = rec.get("case")
        if not isinstance(case, dict):
            raise InputError(Problem("record holds no case", path=str(run.results_path), line=line))
        _add_query(lines, result, rec, case, opts)
    result.differs = {name: lines.differs.get(name, 0) for name in _CHECKED[unit]}
    result.n_run_lines, result.n_qrels_lines = len(lines.run), len(lines.qrels)
    _add_warnings(result, lines)
    out.mkdir(parents=True, exist_ok=True)
    _write(result.run_path, lines.run)
    _write(result.qrels_path, lines.qrels)
    _write(result.topics_path, lines.topics)
    if result.docids_path is not None:
        _write(
            result.docids_path,
            ["docid\trel_path\theading_path"]
            + [f"{d}\t{p}" + (f"\t{h}" if h else "") for d, (p, h) in lines.docids.items() if "\t" not in p + (h or "")],
        )
    return result


def _checked_settings(
    run: RunDir, cfg: Mapping[str, Any], k: int | None, *, require_snippets: bool | None, allow_truncated_text: bool
) -> tuple[int, bool]:
    """The export's K (the run's primary K by default) and whether snippets are required;
    BadConfig for a K the run did not ask for, or snippets required on cut text."""
    from evalkit.derive import stored_settings
    from evalkit.rescore.scoring import check_ks

    settings = stored_settings(run, cfg)
    k = check_ks([k] if k is not None else None, settings["k"])[0]
    snippets = bool(settings.get("require_snippets")) if require_snippets is None else bool(require_snippets)
    if snippets and not settings.get("store_full_text") and not allow_truncated_text:
        raise BadConfig(
            Problem(
                f"snippets are required, but run {run.run_id} stored chunk text cut to 200 characters (no "
                "--store-full-text): a snippet past the cut cannot be checked; pass --allow-truncated-text to export "
                "anyway (a snippet missing from a cut text then does not fail the match), or re-run with --store-full-text",
                field="--require-snippets",
            )
        )
    return k, snippets


@dataclass(frozen=True)
class _Options:
    unit: Unit
    k: int
    tag: str
    snippets: bool
    case_sensitive: bool
    trials: bool  # each answer of a --trials run is a query of its own


@dataclass
class _Lines:
    """What the export writes, gathered one query at a time, and what it warns about."""

    run: list[str] = field(default_factory=list)
    qrels: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    docids: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    differs: dict[str, int] = field(default_factory=dict)
    n_graded_only: int = 0
    n_zero: int = 0


def _add_query(lines: _Lines, result: TrecExport, rec: Mapping[str, Any], case: Mapping[str, Any], opts: _Options) -> None:
    """One record as a query (run, qrels and topic lines), or counted in `result.excluded`;
    the metrics whose TREC value differs from evalkit's are counted in `lines.differs`."""
    unit, k = opts.unit, opts.k
    supports = list(case.get("gold_supports") or [])
    if case.get("answerable", True) is False:
        result.excluded["unanswerable"] += 1
        return
    if not supports:
        result.excluded["unlabeled"] += 1
        return
    index = GoldIndex(supports, case_sensitive=opts.case_sensitive)
    rel = [float(r) for r in index.relevance]
    if not any(r > 0 for r in rel):
        result.excluded["no_relevant"] += 1
        return
    lines.n_graded_only += len(index.graded_only)
    lines.n_zero += sum(1 for i, r in enumerate(rel) if r <= 0 and i not in index.graded_only)
    qid = str(case.get("id", rec.get(Rec.CASE_ID)))
    if opts.trials and rec.get("trial") is not None:
        qid = f"{qid}#{rec['trial']}"
    qid = trec_docid(qid)
    chunks = order_chunks(rec.get("retrieved_chunks") or [])
    table = index.ranking(chunks, require_snippets=opts.snippets)
    top, matches = chunks[:k], table.matches[:k]
    ranking, qrels = _unit_docs(unit, top, matches, table.duplicates, supports, rel, opts.case_sensitive, lines.docids)
    if not ranking:
        ranking = [EMPTY_DOCID]
    if not any(g > 0 for g in qrels.values()):
        qrels = {UNRETRIEVED_DOCID: 1.0}  # chunk/note: no gold chunk or note to name
    n = len(ranking)
    lines.run.extend(f"{qid} Q0 {d} {r} {0 if d == EMPTY_DOCID else n - r + 1} {opts.tag}" for r, d in enumerate(ranking, 1))
    lines.qrels.extend(f"{qid} 0 {d} {_rel_text(g)}" for d, g in qrels.items() if g > 0)
    lines.topics.append(f"{qid}\t{' '.join(str(case.get('question', '')).split())}")
    result.n_queries += 1
    ours = score_case_retrieval(
        case, chunks, [], None, None, [k], require_snippets=opts.snippets, case_sensitive=opts.case_sensitive
    )[Cell.AT_K][str(k)]
    theirs = _trec_values(ranking, qrels, k)
    for name in _CHECKED[unit]:
        if ours[name] is None or abs(ours[name] - theirs[name]) > 1e-9:
            lines.differs[name] = lines.differs.get(name, 0) + 1


def _add_warnings(result: TrecExport, lines: _Lines) -> None:
    """Where the files cannot say what evalkit's numbers say: graded-only and zero-relevance
    supports, and the metrics whose values differ."""
    if lines.n_graded_only:
        result.warnings.append(
            f"{lines.n_graded_only} graded-only support(s) are in qrels.trec with their relevance: evalkit counts them for "
            "nDCG only, TREC tools for every metric"
        )
    if lines.n_zero:
        result.warnings.append(
            f"{lines.n_zero} support(s) of relevance 0 are left out of qrels.trec: evalkit counts them for recall "
            "(not nDCG), TREC tools cannot"
        )
    shown = {name: n for name, n in result.differs.items() if n}
    if shown:
        result.warnings.append(
            f"TREC values differ from evalkit's on some of the {result.n_queries} queries ("
            + ", ".join(f"{name}: {n}" for name, n in shown.items())
            + f"); unit {result.unit} reproduces "
            + {"anchor": "recall_frac, recall_any, mrr, ndcg, map and rprec", "chunk": "precision and mrr",
               "note": "nothing exactly"}[result.unit]
        )


_CHECKED = {
    "anchor": ("recall_frac", "recall_any", "mrr", "ndcg", "map", "rprec", "precision"),
    "chunk": ("precision", "mrr"),
    "note": ("precision", "mrr"),
}


def _unit_docs(
    unit: str,
    top: Sequence[Mapping],
    matches: Sequence[frozenset[int]],
    duplicates: frozenset[int],
    supports: Sequence[Mapping],
    rel: Sequence[float],
    case_sensitive: bool,
    docids: dict[str, tuple[str, str | None]],
) -> tuple[list[str], dict[str, float]]:
    """(the ranking's docids in rank order, docid -> relevance) of one query."""
    ranking: list[str] = []
    qrels: dict[str, float] = {}
    if unit == "anchor":
        credited: set[int] = set()
        for p, m in enumerate(matches, start=1):
            free = [i for i in m if i not in credited]
            if free:
                best = min(free, key=lambda i: (-rel[i], i))
                credited.add(best)
                ranking.append(f"g{best}")
            else:
                ranking.append(f"c{p}")
        return ranking, {f"g{i}": r for i, r in enumerate(rel)}
    if unit == "note":
        seen: set[str] = set()
        for c in top:
            path = normalize_rel_path(c.get("rel_path"), case_sensitive=case_sensitive)
            if not path or path in seen:
                continue
            seen.add(path)
            d = trec_docid(path)
            docids.setdefault(d, (path, None))
            ranking.append(d)
        for s, r in zip(supports, rel):
            path = normalize_rel_path(s.get("rel_path"), case_sensitive=case_sensitive)
            if path:
                d = trec_docid(path)
                docids.setdefault(d, (path, None))
                qrels[d] = max(qrels.get(d, r), r)
        return ranking, qrels
    # chunk
    for s, r in zip(supports, rel):
        if s.get("chunk_id") is not None:
            d = trec_docid(str(s["chunk_id"]))
            qrels[d] = max(qrels.get(d, r), r)
    used: set[str] = set()
    for p, (c, m) in enumerate(zip(top, matches), start=1):
        cid = c.get("chunk_id")
        raw = str(cid) if cid is not None else f"{c.get('rel_path') or ''}#{c.get('heading_path') or ''}"
        d = trec_docid(raw)
        if (p - 1) in duplicates or d in used:
            ranking.append(f"{d}~dup{p}")
            continue
        used.add(d)
        ranking.append(d)
        if c.get("rel_path"):
            docids.setdefault(d, (str(c["rel_path"]), str(c.get("heading_path") or "")))
        if m:
            g = max(rel[i] for i in m)
            qrels[d] = max(qrels.get(d, g), g)
    return ranking, qrels


def _trec_values(ranking: Sequence[str], qrels: Mapping[str, float], k: int) -> dict[str, float]:
    """recall, hit rate, precision, RR, nDCG (gain 2^rel - 1), AP and R-precision of one query, as ranx
    computes them (its r-precision on the run cut at K)."""
    relevant = {d: g for d, g in qrels.items() if g > 0}
    top = [d for d in ranking[:k] if d != EMPTY_DOCID]
    hits = [d for d in top if d in relevant]
    first = next((p for p, d in enumerate(top, 1) if d in relevant), None)
    dcg = sum((2.0 ** relevant[d] - 1.0) / math.log2(p + 1) for p, d in enumerate(top, 1) if d in relevant)
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum((2.0 ** g - 1.0) / math.log2(p + 1) for p, g in enumerate(ideal, 1))
    n_rel = len(relevant)
    ap = 0.0
    for c, p in enumerate((p for p, d in enumerate(top, 1) if d in relevant), start=1):
        ap += c / p
    return {
        "map": ap / n_rel if n_rel else 0.0,
        "rprec": sum(1 for d in top[:n_rel] if d in relevant) / n_rel if n_rel else 0.0,
        "recall_frac": len(hits) / n_rel if n_rel else 0.0,
        "recall_any": 1.0 if hits else 0.0,
        "precision": len(hits) / k,
        "mrr": 1.0 / first if first else 0.0,
        "ndcg": dcg / idcg if idcg > 0 else 0.0,
    }


def _write(path: Path, lines: Sequence[str]) -> None:
    """`lines` to `path`, atomically (`evalkit.store.atomic.write_atomic`)."""
    write_atomic(path, "".join(line + "\n" for line in lines))
