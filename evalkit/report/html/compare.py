"""The HTML compare report (`evalkit report --compare A B`): a renderer over `Comparison`.

`compare_view` turns the model `evalkit.compare.compare_runs` returned into plain dicts
and lists for `templates/compare.html.j2`; it computes no number (STYLE §6.10) and
phrases verdicts with the helpers of the terminal/markdown renderer
(`evalkit.report.compare`), so the three reports say the same thing.

Broken invariants: `compare_runs` refuses such runs (`IncomparableRuns`, exit 2 in the
CLI). The HTML report is for looking, not gating, so `write_compare_report` then compares
again with `ignore_invariants=True` and the page opens with a red banner listing each
violation and the numbers it makes meaningless; those rows are marked "not comparable".
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from evalkit.compare.cases import AT_K_METRICS
from evalkit.compare.compute import IncomparableRuns, compare_runs
from evalkit.compare.models import ChunkRef, Comparison, DeltaRow, Flip
from evalkit.errors import InputError
from evalkit.evalset.anchors import HEADING_DELIMITER
from evalkit.metrics.registry import short_label_of, shown_in
from evalkit.report.compare import (
    ALL_CASE_MARK,
    DELTA_LEGEND,
    GATE_ADVICE,
    STAGE_CORNER,
    STAGE_LEGEND,
    VERDICT_HEADER,
    affected_metrics,
    all_case_differs,
    by_case,
    chunk_text,
    corpus_note,
    corpus_rows,
    distinct_rows,
    flip_change,
    flip_label,
    flip_value,
    format_p,
    format_rank,
    headline,
    json_text,
    method_line,
    no_significance,
    outcome_of,
    repeats_note,
    row_label,
    short_verdict,
    shown_n,
    shown_values,
    stage_grid,
    stage_heading,
    stage_label,
    verdict,
    verdict_cells,
    verdict_line,
    verdict_method,
)
from evalkit.store.runlog import Met, Rec
from evalkit.store.runs import RunDir

__all__ = [
    "COMPARE_NAV", "compare_charts", "compare_view", "default_compare_output", "diff_segments", "note_href", "run_vault",
    "write_compare_report",
]

# The per-domain table (seed 001's drift view): the registry's `domain_drift` metrics by
# compare's row names (an @K metric by its name, at the primary K), where both runs have them;
# recall_frac is seed 001's recall, whose per-domain drift it shows (issue 30).
_DOMAIN_METRICS = tuple(m.name for m in shown_in("domain_drift"))
# Section anchors of the page, in order (base.html.j2 draws them as the page's nav).
COMPARE_NAV = (
    ("verdict", "Verdict"), ("significant", "Significant changes"), ("flips", "Flips"), ("stages", "Failure stages"),
    ("domains", "Per domain"),
    ("deltas", "All deltas"), ("unscoreable", "Unscored cases"), ("latency", "Latency and cost"),
    ("config", "Config diff"), ("drift", "Answer drift"),
)
_DIFF_MARKS = (("[-", "-]", "del"), ("{+", "+}", "add"))


def diff_segments(diff: str) -> list[dict[str, str]]:
    """`DriftCase.diff` (git's word-diff notation) as [{kind, text}] with kind "same",
    "del" or "add", parsed the way the terminal report colours it (`_diff_text`).

    An answer that itself contains `[-` or `{+` is split at it like the terminal does;
    the text is still shown, escaped, just coloured oddly.
    """
    out: list[dict[str, str]] = []
    i = 0
    while i < len(diff):
        found = [(diff.find(opener, i), opener, closer, kind) for opener, closer, kind in _DIFF_MARKS]
        found = [f for f in found if f[0] != -1]
        if not found:
            out.append({"kind": "same", "text": diff[i:]})
            break
        start, opener, closer, kind = min(found)
        end = diff.find(closer, start + 2)
        if end == -1:
            out.append({"kind": "same", "text": diff[i:]})
            break
        if start > i:
            out.append({"kind": "same", "text": diff[i:start]})
        out.append({"kind": kind, "text": diff[start + 2 : end]})
        i = end + 2
    return out


def _grouping(scope: str) -> str:
    return "overall" if scope == "overall" else scope.partition(":")[0]


def _row(r: DeltaRow) -> dict[str, Any]:
    """A delta row for a table: raw numbers (the template formats them) and the verdict words.

    `a` and `b` are what `delta` is the difference of (`shown_values`: the paired means where
    there is a paired test); `all_case` says whether metrics.json's `a_all`/`b_all` read differently."""
    lo, hi = (r.ci95 or [None, None])[:2] if r.ci95 else (None, None)
    a, b = shown_values(r)
    return {
        "label": row_label(r),
        "metric": r.metric,
        "k": r.k,
        "scope": r.scope,
        "grouping": _grouping(r.scope),
        "a": a,
        "b": b,
        "a_all": r.a,
        "b_all": r.b,
        "all_case": all_case_differs(r),
        "n_text": shown_n(r),
        "delta": r.reported_delta,  # the Δ every format shows (DeltaRow.reported_delta)
        "paired_delta": r.paired_delta,
        "ci_lo": lo,
        "ci_hi": hi,
        "p_value": r.p_value,
        "p_adjusted": r.p_adjusted,
        "p_text": format_p(r.p_value),
        "p_adjusted_text": format_p(r.p_adjusted),
        "n_a": r.n_a,
        "n_b": r.n_b,
        "n": r.n,
        "n_changed": r.n_changed,
        "verdict": short_verdict(r),
        "verdict_long": verdict(r),
        "significant": r.significant,
        "change": r.change or "none",
        "comparable": r.comparable,
    }


def _interval(r: DeltaRow, label: str) -> dict[str, Any] | None:
    """One error bar: the paired mean difference and its bootstrap interval."""
    if not r.ci95 or r.ci95[0] is None or r.ci95[1] is None or r.paired_delta is None:
        return None
    tone = "better" if r.significant and r.change == "better" else "worse" if r.significant and r.change == "worse" else "neutral"
    return {"label": label, "value": r.paired_delta, "lo": r.ci95[0], "hi": r.ci95[1], "tone": tone,
            "significant": r.significant, "title": f"{label}: {verdict(r)}"}


def _chunks(refs: Iterable[ChunkRef]) -> list[str]:
    return [chunk_text(c) for c in refs]


def _flip_case(group: list[Flip]) -> dict[str, Any]:
    f = group[0]
    return {
        "id": f.id,
        "question": f.question,
        "changes": [flip_change(x) for x in group],
        "metrics": [x.metric for x in group],
        "size": max(x.size for x in group),
        "values": [{"metric": x.metric, "a": flip_value(x, x.a), "b": flip_value(x, x.b)} for x in group],
        "first_hit_a": format_rank(f.first_hit_rank_a),
        "first_hit_b": format_rank(f.first_hit_rank_b),
        "top_a": _chunks(f.top_a),
        "top_b": _chunks(f.top_b),
        "gold": _chunks(f.gold),
        "abstained_a": f.abstained_a,
        "abstained_b": f.abstained_b,
        "turn": f.turn,
        "history_a": f.history_a,
        "history_b": f.history_b,
    }


def _stages(c: Comparison) -> dict[str, Any]:
    """The stage transition matrix: a row per run-a stage, a cell per run-b stage with every
    id behind it (the template folds them), and the column totals."""
    st = c.stages
    present, grid = stage_grid(st)
    rows = []
    for sa in present:
        cells = [{"b": sb, "n": grid[(sa, sb)].n if (sa, sb) in grid else 0,
                  "ids": grid[(sa, sb)].ids if (sa, sb) in grid else [], "moved": sa != sb} for sb in present]
        rows.append({"stage": sa, "label": stage_label(sa), "cells": cells, "total": sum(x["n"] for x in cells)})
    return {
        "available": st.available, "k": st.k, "n": st.n, "heading": stage_heading(st), "corner": STAGE_CORNER,
        "legend": STAGE_LEGEND, "columns": [stage_label(s) for s in present], "rows": rows,
        "totals": [st.b.get(s, 0) for s in present],
    }


def _domains(c: Comparison) -> dict[str, Any]:
    """Per-domain deltas: one row per domain, one cell per headline metric (at the primary K)."""
    primary = c.ks.get("primary")
    cells: dict[str, dict[str, DeltaRow]] = {}
    for r in c.deltas:
        if _grouping(r.scope) != "domain" or r.metric not in _DOMAIN_METRICS:
            continue
        if r.k is not None and r.k != primary:
            continue
        cells.setdefault(r.scope.partition(":")[2], {})[r.metric] = r
    columns = [m for m in _DOMAIN_METRICS if any(m in row for row in cells.values())]
    rows = []
    for domain in sorted(cells):
        row = cells[domain]
        rows.append({
            "domain": domain,
            "n": max((r.n_b for r in row.values()), default=0),
            "cells": [_row(row[m]) if m in row else None for m in columns],
        })
    # Column headers as the other by-slice tables have them (the registry's short labels).
    return {"columns": [short_label_of(m, primary if m in AT_K_METRICS else None) for m in columns], "rows": rows}


def _not_comparable(c: Comparison) -> list[dict[str, str]]:
    out = []
    for nc in c.invariants.not_comparable:
        out.append({"reason": nc.reason, "which": affected_metrics(nc.metrics)})
    return out


def _run_link(c: Comparison, side: str, out_dir: Path | None) -> str | None:
    """A relative link to the side's own run report (`<run>/report.html`), if it exists."""
    src = c.sources[side]
    if src.kind != "run" or out_dir is None:
        return None
    page = Path(src.path) / "report.html"
    if not page.is_file():
        return None
    rel = os.path.relpath(page, out_dir)
    return "/".join(quote(part) for part in Path(rel).parts)


def compare_view(comparison: Comparison, *, refused: bool = False, output_dir: Path | None = None) -> dict[str, Any]:
    """The template context of the compare page, read off one `Comparison`.

    Args:
        comparison: what `compare_runs` returned.
        refused: compare_runs refused the runs (broken invariants) and this comparison was
            made with `ignore_invariants=True`; the page says so at the top.
        output_dir: where the page will be written, for relative links to each run's
            `report.html` (no links when None).

    Returns:
        A dict of plain values (strings, numbers, lists, dicts); user text stays raw for
        the template to escape.
    """
    c = comparison
    sig, sig_repeated = distinct_rows(c.significant_deltas())
    overall = [r for r in c.deltas if r.scope == "overall"]
    overall_shown, _ = distinct_rows([r for r in overall if r.ci95 and r.ci95[0] is not None])
    by_grouping = sorted({_grouping(r.scope) for r in c.deltas}, key=lambda g: (g != "overall", g))
    return {
        "title": f"evalkit compare: {c.run_id_1} → {c.run_id_2}",
        "run_a": {"id": c.run_id_1, "kind": c.sources["a"].kind, "href": _run_link(c, "a", output_dir), "n": c.n["a"]},
        "run_b": {"id": c.run_id_2, "kind": c.sources["b"].kind, "href": _run_link(c, "b", output_dir), "n": c.n["b"]},
        "verdict": _gate_section(c),
        "merge": _merge_section(c),
        "method": method_line(c),
        "delta_legend": DELTA_LEGEND,
        Met.INVARIANTS: {
            "ok": c.invariants.ok,
            "refused": refused,
            "ignored": c.invariants.ignored,
            "violations": list(c.invariants.violations),
            "not_comparable": _not_comparable(c),
            "warnings": list(c.invariants.warnings),
        },
        "notes": list(c.notes),
        "all_case_mark": ALL_CASE_MARK,
        "significant": {
            "rows": [_row(r) for r in sig],
            "all_case": any(all_case_differs(r) for r in sig),
            "repeats_note": repeats_note(sig_repeated) if sig_repeated else None,
            "empty_text": None if sig else no_significance(c),
            "intervals": [i for i in (_interval(r, f"{row_label(r)} · {r.scope}") for r in sig) if i],
        },
        "overall_intervals": [i for i in (_interval(r, row_label(r)) for r in overall_shown if r.n_changed) if i],
        "overall_unchanged": sum(1 for r in overall_shown if not r.n_changed),
        "confidence": c.stats.confidence,
        "deltas": {"rows": [_row(r) for r in c.deltas], "groupings": by_grouping, "n_overall": len(overall),
                   "all_case": any(all_case_differs(r) for r in c.deltas)},
        "domains": _domains(c),
        "stages": _stages(c),
        "flips": _flips_section(c),
        "unscoreable": _unscoreable_section(c),
        "latency": {
            "comparable": c.latency.comparable,
            "warnings": list(c.latency.warnings),
            "rows": [{"metric": r.metric, "a": r.a, "b": r.b, "delta": r.delta,
                      "unit": "usd" if r.metric.endswith("_usd") else "ms" if r.metric.endswith("_ms") else "num"}
                     for r in c.latency.rows],
        },
        "config_diff": {
            "available": c.config_diff_available,
            "rows": [{"key": k, "a": json_text(v[0]), "b": json_text(v[1])} for k, v in c.config_diff.items()],
        },
        "corpus": {
            "available": c.corpus.available,
            "rows": [{"label": label, "a": va, "b": vb, "changed": changed} for label, va, vb, changed in corpus_rows(c)],
            "note": corpus_note(c) if c.corpus.available else None,
        },
        "drift": _drift_section(c),
    }


def _gate_section(c: Comparison) -> dict[str, Any]:
    """The gate's verdict: outcome, headline and what failed, was inconclusive or skipped."""
    return {
        "passed": c.gate.passed,
        "outcome": outcome_of(c),
        "allowed": c.gate.allowed,
        "headline": headline(c),
        "inconclusive": list(c.gate.inconclusive),
        "mode": c.gate.mode,
        "failures": list(c.gate.failures),
        "not_significant": list(c.gate.not_significant),
        "skipped": [f"{s.get('metric')}{' in ' + s['scope'] if s.get('scope') else ''}: {s.get('reason')}" for s in c.gate.skipped],
    }


def _merge_section(c: Comparison) -> dict[str, Any]:
    """The merge verdict, one row per metric; shown beside the gate unless it is the gate."""
    return {
        "available": c.verdict.available,
        "verdict": c.verdict.verdict or "none",
        "line": verdict_line(c),
        "summary": c.verdict.summary,
        "confidence": c.verdict.confidence,
        "method": verdict_method(c),
        "header": list(VERDICT_HEADER),
        "rows": [{"cells": verdict_cells(m), "verdict": m.verdict, "reason": m.reason} for m in c.verdict.metrics],
        "not_compared": [f"{x['metric']} ({x['reason']})" for x in c.verdict.not_compared],
        "advice": GATE_ADVICE if c.gate.mode != "verdict" and c.verdict.available else None,
        "shown": c.gate.mode != "verdict",
    }


def _flips_section(c: Comparison) -> dict[str, Any]:
    """The cases that flipped (regressions, then improvements, grouped by case) and the counts per metric."""
    f = c.flips
    return {
        "available": f.available,
        "k": f.k,
        "regressions": [_flip_case(g) for g in by_case(f.regressions)],
        "improvements": [_flip_case(g) for g in by_case(f.improvements)],
        "counts": [{"metric": m, "label": flip_label(m), **v} for m, v in f.counts.items()],
    }


def _unscoreable_section(c: Comparison) -> list[dict[str, Any]]:
    """Per run, the cases that could not be scored: target errors, judge errors, empty answers, unpaired."""
    return [
        {
            "side": side,
            "run_id": c.sources[side].run_id,
            "available": u.available,
            "n_cases": u.n_cases,
            "target_errors": u.target_errors,
            Rec.JUDGE_ERRORS: ", ".join(f"{j} {n}" for j, n in u.judge_errors.items()) or "0",
            "empty_answers": u.empty_answers,
            "unpaired": u.only_in_this_run,
            "ids": [*u.ids_target_error, *u.ids_judge_error],
        }
        for side, u in sorted(c.unscoreable.items())
    ]


def run_vault(c: Comparison, side: str) -> Path | None:
    """The folder of notes side `side`'s run answered from, when it is here to link to: the
    vault its config.json records (the in-process reference chatbot's; relative paths are
    read from the current directory, as the run was started), or None (an HTTP target, a
    baseline file, a vault moved since)."""
    src = c.sources.get(side)
    if src is None or src.kind != "run":
        return None
    try:
        cfg = RunDir(Path(src.path)).read_config()
    except (InputError, OSError, ValueError):
        return None
    target = cfg.get("target") if isinstance(cfg.get("target"), dict) else {}
    settings = cfg.get("settings") if isinstance(cfg.get("settings"), dict) else {}
    recorded = target.get("vault") or settings.get("vault")
    if not isinstance(recorded, str) or not recorded:
        return None
    vault = Path(recorded).expanduser().resolve()
    return vault if vault.is_dir() else None


def note_href(vault: Path | None, ref: ChunkRef) -> str | None:
    """A file:// link to the note a reference names, with its heading as a text fragment
    (`#:~:text=`, which browsers scroll to), or None when the note is not in `vault`. The
    page's CSP limits what it loads, not where a click goes, so the link opens the note."""
    if vault is None or not ref.rel_path:
        return None
    note = (vault / ref.rel_path).resolve()
    if not note.is_relative_to(vault) or not note.is_file():
        return None  # a rel_path that climbs out of the vault links nowhere
    href = note.as_uri()
    heading = (ref.heading_path or "").split(HEADING_DELIMITER)[-1].strip().lstrip("#").strip()
    if heading:
        # '-', ',' and '&' are the fragment's own syntax: percent-encoded like everything else
        href += "#:~:text=" + quote(heading, safe="").replace("-", "%2D")
    return href


def _linked(refs: Iterable[ChunkRef], vault: Path | None) -> list[dict[str, str | None]]:
    return [{"text": chunk_text(r), "href": note_href(vault, r)} for r in refs]


def _drift_section(c: Comparison) -> dict[str, Any]:
    """The answers that changed most between the runs, each with its word diff and its
    references, linked to their notes (a removed one in run a's vault, an added one in b's)."""
    d = c.drift
    vault_a, vault_b = (run_vault(c, side) for side in ("a", "b")) if d.cases else (None, None)
    return {
        "available": d.available,
        "n_compared": d.n_compared,
        "n_changed": d.n_changed,
        "more": max(d.n_changed - len(d.cases), 0),
        "cases": [
            {
                "id": case.id,
                "question": case.question,
                "similarity": case.similarity,
                "words_removed": case.words_removed,
                "words_added": case.words_added,
                "segments": diff_segments(case.diff),
                "answer_a": case.answer_a,
                "answer_b": case.answer_b,
                "references_added": _linked(case.references_added, vault_b),
                "references_removed": _linked(case.references_removed, vault_a),
            }
            for case in d.cases
        ],
    }


def compare_charts(view: dict[str, Any]) -> dict[str, Any]:
    """The page's inline SVG charts from a `compare_view`: the significant changes and every
    overall metric that changed on some case, each as an estimate with its interval."""
    from evalkit.report.html.charts import Interval, interval_chart

    def rows(items: list[dict[str, Any]]) -> list[Interval]:
        tone = {"better": "good", "worse": "bad"}
        return [Interval(i["label"], i["value"], i["lo"], i["hi"], tone.get(i["tone"])) for i in items]

    sig, overall = view["significant"]["intervals"], view["overall_intervals"]
    return {
        "significant": interval_chart(rows(sig), title="Significant changes: b − a with its interval") if sig else None,
        "overall": interval_chart(rows(overall), title="Overall metrics: b − a with its interval") if overall else None,
    }


def default_compare_output(results_dir: str | Path, run_a: str, run_b: str) -> Path:
    """`<results_dir>/compare-<a>-vs-<b>.html`, with characters unsafe in a file name replaced."""
    def safe(name: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:80] or "run"
    return Path(results_dir) / f"compare-{safe(run_a)}-vs-{safe(run_b)}.html"


def write_compare_report(
    a: str | Path,
    b: str | Path,
    *,
    results_dir: str | Path = "results",
    output: str | Path | None = None,
    **compare_options: Any,
) -> Path:
    """Compare run a (baseline) with run b and write the HTML page.

    Runs `compare_runs(a, b, results_dir=..., **compare_options)` (its defaults otherwise).
    If the runs break an invariant and `ignore_invariants` was not given, the comparison is
    made anyway with `ignore_invariants=True` and the page lists the violations at the top
    (see the module docstring); the page never hides that.

    Args:
        a, b: run ids under `results_dir`, run folders or baseline files (as compare_runs).
        results_dir: where run ids are looked up.
        output: the file to write; default `<results_dir>/compare-<a>-vs-<b>.html`.
        **compare_options: passed to compare_runs (seed, show_drift, gate, ...).

    Returns:
        The path written.

    Raises:
        InputError: an unknown run or unreadable file (as compare_runs).
    """
    from evalkit.report.html.page import page_context, render_page, write_page

    refused = False
    try:
        comparison = compare_runs(a, b, results_dir=results_dir, **compare_options)
    except IncomparableRuns:
        refused = True
        comparison = compare_runs(a, b, results_dir=results_dir, **{**compare_options, "ignore_invariants": True})
    path = Path(output) if output is not None else default_compare_output(results_dir, comparison.run_id_1, comparison.run_id_2)
    view = compare_view(comparison, refused=refused, output_dir=path.resolve().parent)
    page = page_context(
        view["title"], run_ids=[comparison.run_id_1, comparison.run_id_2], nav=COMPARE_NAV,
        subtitle="a = baseline, b = new run",
    )
    return write_page(path, render_page("compare.html.j2", page=page, charts=compare_charts(view), **view))

