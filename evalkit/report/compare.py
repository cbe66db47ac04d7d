"""Renderers of a `Comparison`: the rich terminal report and the markdown PR comment.

Neither computes a number: both read the model `evalkit.compare.compare_runs` returned, and
`--format json` is its `model_dump`. User text (questions, answers, paths, headings, run
ids) is escaped: rich markup in the terminal, `|`, backticks and HTML in markdown.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from evalkit.compare.cases import FLIP_COLUMNS
from evalkit.compare.models import (
    ChunkRef,
    Comparison,
    DeltaRow,
    Flip,
    StageCell,
    StageTransitions,
)
from evalkit.gate.models import MetricVerdict
from evalkit.gate.verdict import format_change
from evalkit.metrics.keys import parse_metric_key
from evalkit.metrics.registry import label_of
from evalkit.metrics.stages import JUDGE_PASS, STAGE_LABELS
from evalkit.report.stacked import Fit, Stacked
from evalkit.store.runlog import Rec

__all__ = ["append_step_summary", "print_comparison", "render_markdown", "verdict_line"]

_FLIPS_SHOWN = 10
# A PR comment must stay well under GitHub's 65,536 characters.
_SLICE_ROWS_SHOWN = 60
# Case ids shown per cell of the stage matrix in the terminal and markdown (json: all; HTML: all, folded).
STAGE_IDS_SHOWN = 5


# ---------------------------------------------------------------- shared wording


def _num(v: float | None, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _signed(v: float | None, digits: int = 3) -> str:
    if v is None:
        return "—"
    text = f"{v:+.{digits}f}"
    return "±0" if text in (f"+{0:.{digits}f}", f"-{0:.{digits}f}") else text


def format_p(p: float | None) -> str:
    if p is None:
        return "—"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _ci(row: DeltaRow) -> str:
    if not row.ci95 or row.ci95[0] is None:
        return "—"
    return f"[{_signed(row.ci95[0])}, {_signed(row.ci95[1])}]"


def row_label(row: DeltaRow) -> str:
    """A delta row's metric as every report names it: the registry's label at the row's K
    ("Recall@5 (any)"); the JSON keeps `metric` and `k`."""
    return label_of(row.metric, row.k)


def flip_label(metric: str) -> str:
    """A flip's metric (`Flip.metric`) by the registry's label of what it flips on
    ("recall_any@5" -> "Recall@5 (any)", "groundedness" -> "Groundedness (0-5)")."""
    try:
        name, k = parse_metric_key(metric)
    except ValueError:
        return metric
    return label_of(FLIP_COLUMNS.get(name, name), k)


def affected_metrics(metrics: list[str]) -> str:
    """What a broken invariant makes incomparable (`NotComparable.metrics`), in words."""
    if "*" in metrics:
        return "every number"
    return ", ".join(label_of(m) for m in metrics) or "no metric known to depend on it"


def verdict(row: DeltaRow) -> str:
    if row.significant:
        return f"significant ({row.change})" if row.change else "significant"
    return row.note or ("no paired test" if row.p_value is None else "")


def flip_value(flip: Flip, v: float | None) -> str:
    if v is None:
        return "—"
    if flip.metric in (Rec.GROUNDEDNESS, Rec.CORRECTNESS):
        return f"{v:.3g}"
    return "pass" if v >= 0.5 else "fail"


def _digits(metric: str) -> int:
    return 0 if metric.endswith("_tokens") else 4 if metric.endswith("_usd") else 2


def format_rank(r: int | None) -> str:
    return "—" if r is None else str(r)


def chunk_text(c: ChunkRef) -> str:
    parts = [p for p in (c.rel_path, c.heading_path) if p]
    return " › ".join(parts) if parts else "?"


def headline(c: Comparison) -> str:
    """The merge decision and its reason in one sentence: the first line of every format, the
    same words as the JSON's `decision.headline`, matching the exit code."""
    if c.decision is not None:
        return c.decision.headline
    g = c.gate  # a Comparison made before the decision existed (a saved JSON)
    mode = f"{g.mode}, --gate-preset {g.preset}" if g.preset else g.mode
    return f"gate {'passed' if g.passed else 'failed'} ({mode})"


def outcome_of(c: Comparison) -> str:
    """pass | fail | inconclusive: what the headline's colour and mark say."""
    return c.decision.outcome if c.decision is not None else ("pass" if c.gate.passed else "fail")


# The headline's mark in markdown and HTML, by outcome.
OUTCOME_MARK = {"pass": "✅", "fail": "❌", "inconclusive": "⚠️"}


def verdict_line(c: Comparison) -> str:
    """The merge verdict in one line: said under the headline when another gate decided (with
    the verdict deciding, the headline already says it)."""
    return f"Verdict: {c.verdict.verdict or 'none'} — {c.verdict.summary}"


def runs_line(c: Comparison) -> str:
    return f"compare {c.run_id_1} (a, baseline) → {c.run_id_2} (b)"


def _level(confidence: float) -> str:
    return f"{confidence * 100:.4g}%"


def verdict_method(c: Comparison) -> str:
    v = c.verdict
    if v.family_size:
        level = (f"each bound a one-sided test at α/m = {v.alpha:g}/{v.family_size}, m counting the metrics that changed "
                 f"on some case: no metric is wrongly called worse, or better, with probability above {v.alpha:g}")
    else:
        level = "no metric changed on any case, so none is tested"
    return (
        f"{_level(v.confidence)} intervals of b − a ({level}). The merge fails when any metric is shown worse; a gated "
        f"metric (*) must also be shown no worse than its margin, else there is not enough evidence (exit 4). "
        f"'detectable': the smallest change shown as a change with {v.power:.0%} power, counting the spread the change "
        "itself adds; 'to settle': more paired cases that settle an inconclusive metric either way at that power"
        + (" ('(N conv.)': as whole conversations, a single question counting as one)."
           if any(m.more_conversations is not None for m in v.metrics) else ".")
    )


# The verdict table's marks: after a gated metric's name, and after a margin --margin set.
GATED_MARK = "*"
MARGIN_MARK = "‡"


def margin_bound(m: MetricVerdict) -> str:
    """The margin as the bound on the worse side: -0.05 (higher is better), +0.05 (lower is better)."""
    return f"{'-' if m.direction == 'higher_is_better' else '+'}{m.margin:g}" + (MARGIN_MARK if m.margin_source == "--margin" else "")


def verdict_cells(m: MetricVerdict) -> list[str]:
    """[metric, n, Δ, interval, margin, verdict, detectable, to settle] as every format shows them;
    a gated metric's name ends in GATED_MARK, a margin --margin set in MARGIN_MARK."""
    interval = "—" if m.ci is None else f"[{format_change(m.ci[0])}, {format_change(m.ci[1])}]"
    settle = "—"
    corrected = m.interval == "ppi++"  # judged on the human-corrected means: no paired-case figures
    if m.verdict == "inconclusive":
        settle = "more grades" if corrected else "on the bound" if m.more_cases is None else f"+{m.more_cases:,}"
        if m.more_conversations is not None:
            settle += f" ({m.more_conversations:,} conv.)"
    return [
        label_of(m.metric, m.k) + (" (PPI++)" if corrected else "") + (f" {GATED_MARK}" if m.gated else ""), str(m.n),
        format_change(m.delta), interval, margin_bound(m), m.verdict,
        "—" if corrected or m.ci is None else "none" if m.mde is None else f"±{m.mde:.3f}", settle,
    ]


VERDICT_HEADER = ["metric", "n", "Δ", "interval", "margin", "verdict", "detectable", "to settle"]
# Said wherever another gate decided: the variance-aware gate is the one for merges (issue 30).
GATE_ADVICE = (
    "For merges use the default gate, the verdict (--gate verdict): it fails only on a regression shown beyond the "
    "noise (the threshold gate also fails on chance differences; --gate significant passes drops it cannot prove)."
)


# What Δ is, in every format (terminal, markdown, HTML): one number, said once.
DELTA_LEGEND = (
    "Δ: the mean paired difference b − a over the cases both runs scored (n; what the 95% CI and p are about); "
    "a and b: each run's mean over those same cases, so Δ = b − a. Where a run's metrics.json value (its mean over "
    "every case it scored) differs, it is shown too, marked † (all cases, with each run's n). Without per-case results "
    "on both sides, a and b are the metrics.json values and n is each run's count. "
    "The 95% CI (bootstrap) and p are each row's own, unadjusted; p adj. is corrected over every test, so a 95% CI "
    "can exclude 0 while p adj. is above α. The verdict's intervals are adjusted."
)
# Marks a run's all-case value (metrics.json's) where it differs from the paired mean shown.
ALL_CASE_MARK = "†"


def shown_values(row: DeltaRow) -> tuple[float | None, float | None]:
    """(a, b) as every delta table shows them beside Δ, so that Δ = b − a: each run's mean over
    the paired cases where the row has a paired test, else the aggregates (metrics.json's)."""
    if row.paired_delta is not None and row.paired_a is not None and row.paired_b is not None:
        return row.paired_a, row.paired_b
    return row.a, row.b


def shown_n(row: DeltaRow) -> str:
    """The cases behind the shown a, b and Δ: the paired n, else each run's own ("18/17")."""
    return str(row.n) if row.paired_delta is not None else f"{row.n_a}/{row.n_b}"


def all_case_differs(row: DeltaRow) -> bool:
    """A run's all-case value (`row.a`, `row.b`) reads differently from the paired mean shown:
    the tables then show it too, marked †. Equal at the shown precision is not a difference."""
    a, b = shown_values(row)
    return _num(a) != _num(row.a) or _num(b) != _num(row.b)


def all_case_text(row: DeltaRow) -> str:
    """The all-case values with their n, marked: "† 0.222 (18) · 0.833 (18)"."""
    return f"{ALL_CASE_MARK} {_num(row.a)} ({row.n_a}) · {_num(row.b)} ({row.n_b})"


def method_line(c: Comparison) -> str:
    s = c.stats
    name = "Holm" if s.correction == "holm" else "Benjamini-Hochberg"
    ks = ", ".join(map(str, c.ks.get("compared") or [])) or "none"
    return (
        f"{c.n['a']} cases in a, {c.n['b']} in b, {c.n['paired']} paired · K = {ks} · {name} over {s.family_size} "
        f"test(s), α = {s.alpha:g} · {s.resamples:,} resamples, seed {s.seed}"
        + (" · whole conversations resampled" if s.unit == "conversation" else "")
    )


def no_significance(c: Comparison) -> str:
    name = "Holm" if c.stats.correction == "holm" else "Benjamini-Hochberg"
    if not c.flips.available:
        return "No paired test: one side has no per-case results."
    if c.identical:
        return f"Nothing changed: every metric has the same value in both runs on each of the {c.n['paired']} paired cases."
    if c.stats.family_size == 0:
        return (
            f"No change could be tested: every metric changed on too few cases to reach p ≤ {c.stats.alpha:g}; "
            f"the differences are not distinguishable from noise at n={c.n['paired']}."
        )
    return (
        f"No change is significant after {name} correction ({c.stats.family_size} test(s)): "
        f"overall, the differences are not distinguishable from noise at n={c.n['paired']}."
    )


def _nonzero(row: DeltaRow) -> bool:
    return row.reported_delta is not None and abs(row.reported_delta) > 1e-12


def short_verdict(row: DeltaRow) -> str:
    """The verdict in a few words, for narrow terminal columns (the legend says the rest)."""
    if not row.comparable:
        return "not comparable"
    if row.significant:
        return f"significant, {row.change}" if row.change else "significant"
    if row.p_value is None:
        return "not compared" if row.n == 0 else "—"
    if not row.n_changed:
        return "no change"
    if not row.in_family:
        return f"{row.n_changed} changed: too few"
    return row.note or ""


def distinct_rows(rows: list[DeltaRow], seen: set[tuple] | None = None) -> tuple[list[DeltaRow], list[DeltaRow]]:
    """(rows to show, rows left out): a row whose metric was already shown on exactly the
    same paired cases (same `test`, e.g. `answerable:answerable` when every case is
    answerable) repeats that row's test and is left out."""
    seen = set() if seen is None else seen
    shown, repeated = [], []
    for r in rows:
        key = (r.metric, r.k, r.test)
        if r.test is not None and key in seen:
            repeated.append(r)
            continue
        seen.add(key)
        shown.append(r)
    return shown, repeated


def repeats_note(repeated: list[DeltaRow]) -> str:
    scopes = sorted({r.scope for r in repeated})
    listed = ", ".join(scopes[:6]) + (" …" if len(scopes) > 6 else "")
    return f"{len(repeated)} more row(s) repeat a test above on the same cases ({listed})."


def _shown_slices(c: Comparison) -> tuple[list[DeltaRow], list[DeltaRow], int]:
    """Slice rows worth showing (testable or significant, not a repeat of an overall row's
    test), the repeats left out, and how many other slice rows changed."""
    seen = {(r.metric, r.k, r.test) for r in c.deltas if r.scope == "overall" and r.test is not None}
    rows = [r for r in c.deltas if r.scope != "overall"]
    shown, repeated = distinct_rows([r for r in rows if r.in_family or r.significant], seen)
    others = sum(1 for r in rows if _nonzero(r) and not (r.in_family or r.significant))
    return shown, repeated, others


def by_case(flips: list[Flip]) -> list[list[Flip]]:
    """Flips grouped by case, in the order of each case's largest flip."""
    groups: dict[str, list[Flip]] = {}
    for f in flips:
        groups.setdefault(f.id, []).append(f)
    return list(groups.values())


def flip_change(f: Flip) -> str:
    return f"{flip_label(f.metric)} {flip_value(f, f.a)} → {flip_value(f, f.b)}"


# The index stats as a comparison's "Index and coverage" table names them (seed 000's words).
CORPUS_LABELS = {
    "index_version": "index version",
    "chunker_version": "chunker version",
    "docs_processed": "notes indexed",
    "docs_with_0_chunks": "notes with no chunks",
    "no_chunks_generated_rate": "no chunks generated rate",
    "chunks_attempted": "chunks attempted",
    "chunks_embedded": "chunks embedded",
    "chunks_skipped": "chunks skipped",
    "chunks_skipped_rate": "chunks skipped rate",
}


def corpus_rows(c: Comparison) -> list[tuple[str, str, str, bool]]:
    """(label, a, b, changed) per index stat either run has, in CORPUS_LABELS order; "—"
    where a run's target served none."""
    def text(v: object) -> str:
        return "—" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)

    keys = [k for k in CORPUS_LABELS if k in c.corpus.a or k in c.corpus.b]
    return [(CORPUS_LABELS[k], text(c.corpus.a.get(k)), text(c.corpus.b.get(k)), k in c.corpus.changed) for k in keys]


def corpus_note(c: Comparison) -> str:
    """What the index table says, under it."""
    if not c.corpus.a or not c.corpus.b:
        side = "a" if not c.corpus.a else "b"
        return f"run {side}'s target served no index stats: whether the notes changed is unknown"
    if not c.corpus.changed:
        return "both runs searched the same notes and index (as far as the index stats tell)"
    if c.corpus.same_corpus:
        return "changed (✱): --same-corpus makes this a broken invariant"
    return "changed (✱): a difference in retrieval may come from the notes, not the chatbot (--same-corpus refuses such a pair)"


def stage_label(stage: str) -> str:
    """A failure stage (`StageCell.a`, `.b`) as the reports name it ("retrieval miss")."""
    return STAGE_LABELS.get(stage, stage)


def stage_grid(st: StageTransitions) -> tuple[list[str], dict[tuple[str, str], StageCell]]:
    """The square matrix every format draws: the stages either run has (rows and columns, in
    `order`) and the cells by (stage in a, stage in b); a missing pair is an empty cell."""
    present = [s for s in st.order if st.a.get(s) or st.b.get(s)]
    return present, {(x.a, x.b): x for x in st.cells}


def stage_moves(st: StageTransitions) -> tuple[list[StageCell], list[StageCell]]:
    """(cells whose cases moved to another stage, cells whose cases stayed), each in `order`."""
    return [x for x in st.cells if x.a != x.b], [x for x in st.cells if x.a == x.b]


def stage_ids(cell: StageCell, limit: int = STAGE_IDS_SHOWN) -> str:
    """The first `limit` ids of a cell, and how many more there are."""
    shown = ", ".join(cell.ids[:limit])
    return shown + (f" … and {cell.n - limit} more" if cell.n > limit else "")


def stage_heading(st: StageTransitions) -> str:
    moved = sum(x.n for x in st.cells if x.a != x.b)
    return f"Failure stages, a → b: {moved} of {st.n} paired case(s) changed stage"


# The matrix's corner cell: rows are run a's stages, columns run b's.
STAGE_CORNER = "a ↓ · b →"
STAGE_LEGEND = (
    "Rows: each paired case's failure stage in run a; columns: in run b; the diagonal kept its stage. The first "
    "check that fails names the stage: target error; an unanswerable case answered (abstained: pass) or its "
    "abstention unknown; an answerable case abstained; unlabeled (no gold); retrieval miss (no gold support in the "
    "top K); retrieved, not cited (no reference cites a gold support); cited, unsupported (groundedness below "
    f"{JUDGE_PASS:g} of 5); supported, incorrect (correctness below {JUDGE_PASS:g}); else pass. A check a run did not "
    "measure is skipped."
)


# ---------------------------------------------------------------- markdown


def _md(text: object) -> str:
    """Text safe inside a markdown table cell: no pipe, backtick, HTML tag or line break."""
    s = str(text)
    for a, b in (("&", "&amp;"), ("<", "&lt;"), ("|", "\\|"), ("`", "\\`")):
        s = s.replace(a, b)
    return " ".join(s.split())


def _md_table(header: list[str], rows: Iterable[list[str]], align: str | None = None) -> list[str]:
    """A markdown table; `align` has one character per column: "-" left, "r" right."""
    rule = ["---:" if a == "r" else "---" for a in (align or "-" * len(header))]
    return ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |", *("| " + " | ".join(r) + " |" for r in rows)]


def _md_delta_rows(rows: list[DeltaRow], *, scope: bool) -> list[str]:
    # The all-case column only in a table where some row has a value to put in it.
    all_case = any(all_case_differs(r) for r in rows)
    header = ["metric", *(["scope"] if scope else []), "a", "b", "Δ", "n", "95% CI (unadj.)", "p", "p adj.", "significance",
              *([f"{ALL_CASE_MARK} all cases: a (n) · b (n)"] if all_case else [])]
    body = []
    for r in rows:
        a, b = shown_values(r)
        body.append([
            _md(row_label(r)), *([_md(r.scope)] if scope else []), _num(a), _num(b), _signed(r.reported_delta), shown_n(r),
            _ci(r), format_p(r.p_value), format_p(r.p_adjusted), _md(verdict(r)),
            *([all_case_text(r) if all_case_differs(r) else ""] if all_case else []),
        ])
    return _md_table(header, body, "-" + ("-" if scope else "") + "rrrr-rr-" + ("-" if all_case else ""))


def _md_flips(flips: list[Flip], side: str, limit: int) -> list[str]:
    header = ["case", "change", "first gold hit", f"top chunks (run {side})", "question"]
    body = []
    for group in by_case(flips)[:limit]:
        f = group[0]
        top = f.top_b if side == "b" else f.top_a
        body.append([
            _md(f.id), "<br>".join(_md(flip_change(x)) for x in group),
            f"{format_rank(f.first_hit_rank_a)} → {format_rank(f.first_hit_rank_b)}", "<br>".join(_md(chunk_text(t)) for t in top) or "—",
            _md(f.question or ""),
        ])
    return _md_table(header, body)


def _md_stages(st: StageTransitions) -> list[str]:
    """The stage transition matrix (counts, with totals), the moved cells' first ids, and the
    unchanged cells' ids folded."""
    out = ["", f"#### {stage_heading(st)} (K = {st.k if st.k is not None else '—'})", ""]
    present, grid = stage_grid(st)
    body = []
    for sa in present:
        counts = [grid[(sa, sb)].n if (sa, sb) in grid else 0 for sb in present]
        body.append([f"**{stage_label(sa)}**", *(str(n) if n else "·" for n in counts), str(sum(counts))])
    body.append(["**total**", *(str(st.b.get(sb, 0)) for sb in present), str(st.n)])
    out += _md_table([STAGE_CORNER, *(stage_label(s) for s in present), "total"], body, "-" + "r" * (len(present) + 1))
    out += ["", _md(STAGE_LEGEND)]
    moved, stayed = stage_moves(st)
    if moved:
        out += [""] + _md_table(["a → b", "cases", "ids"], (
            [f"{stage_label(x.a)} → {stage_label(x.b)}", str(x.n), _md(stage_ids(x))] for x in moved), "-r-")
    if stayed:
        out += _details(f"Cases that kept their stage ({sum(x.n for x in stayed)})", _md_table(
            ["stage", "cases", "ids"], ([stage_label(x.a), str(x.n), _md(stage_ids(x))] for x in stayed), "-r-"))
    return out


def _fence(text: str) -> str:
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def _details(summary: str, body: list[str]) -> list[str]:
    return ["", f"<details><summary>{summary}</summary>", "", *body, "", "</details>"]


def render_markdown(c: Comparison) -> str:
    """A compact PR comment: verdict, then significant changes, then flips and failure stages, then details.

    Deterministic (no clock, no paths), so it can be snapshot-tested.
    """
    out = [f"### {OUTCOME_MARK[outcome_of(c)]} {_md(headline(c))}", ""]
    if c.gate.mode != "verdict":
        out += [f"**Verdict: {c.verdict.verdict or 'none'}** — {_md(c.verdict.summary)}", ""]
    out.append(f"`{_md(c.run_id_1)}` (a, baseline) → `{_md(c.run_id_2)}` (b)")
    out += ["", _md(method_line(c)), "", _md(DELTA_LEGEND)]
    if c.gate.mode != "verdict" and c.verdict.available:
        out += ["", f"> {_md(GATE_ADVICE)}"]
    if c.gate.failures:
        out += ["", "**Gate failures**", ""] + [f"- {_md(f)}" for f in c.gate.failures]
    if c.gate.inconclusive:
        out += ["", "**Not settled** (gated metrics: not enough evidence)", ""] + [f"- {_md(f)}" for f in c.gate.inconclusive]
    if c.gate.not_significant:
        out += ["", "**Beyond a threshold but not significant** (`--gate significant` lets these through)", ""]
        out += [f"- {_md(f)}" for f in c.gate.not_significant]
    if c.invariants.violations:
        out += ["", "**⚠️ Invariants broken (ignored)**: these numbers are not comparable", ""]
        for nc in c.invariants.not_comparable:
            which = affected_metrics(nc.metrics)
            out.append(f"- {_md(nc.reason)}: {_md(which)}")
    if c.invariants.warnings:
        out += ["", "**⚠️ Warnings**", ""] + [f"- {_md(w)}" for w in c.invariants.warnings]

    if c.verdict.metrics:
        out += ["", f"#### Verdict per metric ({_level(c.verdict.confidence)} intervals; {GATED_MARK} gated)", ""]
        out += _md_table(VERDICT_HEADER, ([_md(x) for x in verdict_cells(m)] for m in c.verdict.metrics), "-rr-r-rr")
        out += ["", _md(verdict_method(c))]
        if any(m.margin_source == "--margin" for m in c.verdict.metrics):
            out += ["", f"{MARGIN_MARK} margin set by --margin"]
    if c.verdict.not_compared:
        out += ["", "Not in the verdict: " + _md("; ".join(f"{x['metric']} ({x['reason']})" for x in c.verdict.not_compared))]

    sig, repeated = distinct_rows(c.significant_deltas())
    out += ["", f"#### Significant changes ({len(sig)})", ""]
    out += _md_delta_rows(sig, scope=True) if sig else [_md(no_significance(c))]
    if repeated:
        out += ["", _md(repeats_note(repeated))]

    f = c.flips
    if f.available:
        out += ["", f"#### Flips: {len(by_case(f.regressions))} case(s) pass → fail, {len(by_case(f.improvements))} fail → pass", ""]
        if f.regressions:
            out += _md_flips(f.regressions, "b", _FLIPS_SHOWN)
            hidden = len(by_case(f.regressions)) - _FLIPS_SHOWN
            if hidden > 0:
                out += ["", f"… and {hidden} more cases (see --format json)"]
        if f.improvements:
            body = _md_flips(f.improvements, "a", _FLIPS_SHOWN)
            hidden = len(by_case(f.improvements)) - _FLIPS_SHOWN
            body += ["", f"… and {hidden} more cases (see --format json)"] if hidden > 0 else []
            out += _details(f"Improvements: {len(by_case(f.improvements))} case(s)", body)
        if not f.regressions and not f.improvements:
            out.append("No case changed between pass and fail.")
    if c.stages.available:
        out += _md_stages(c.stages)

    overall = [r for r in c.deltas if r.scope == "overall"]
    out += _details(f"All overall deltas ({len(overall)})", _md_delta_rows(overall, scope=False))
    slices, repeated, others = _shown_slices(c)
    slice_body = _md_delta_rows(slices[:_SLICE_ROWS_SHOWN], scope=True) if slices else ["No other slice has enough changed cases to test."]
    if len(slices) > _SLICE_ROWS_SHOWN:
        slice_body += ["", f"… and {len(slices) - _SLICE_ROWS_SHOWN} more tested slice rows (see --format json)"]
    if repeated:
        slice_body += ["", _md(repeats_note(repeated))]
    if others:
        slice_body += ["", f"{others} other slice row(s) changed, each with too few changed cases to test (see --format json)."]
    out += _details(f"Slices: {len(slices)} tested row(s)", slice_body)
    unsc = []
    for side in ("a", "b"):
        u = c.unscoreable[side]
        judges = ", ".join(f"{j} {n}" for j, n in u.judge_errors.items()) or "0"
        unsc.append([side, str(u.n_cases), str(u.target_errors), _md(judges), str(u.empty_answers), str(u.only_in_this_run)])
    out += _details(
        "Cases a run could not score (excluded pairwise)",
        _md_table(["run", "cases", "target errors", "judge errors", "empty answers", "unpaired"], unsc, "-rrrrr"),
    )
    lat = [f"- ⚠️ {_md(w)}" for w in c.latency.warnings]
    lat += [""] if lat else []
    lat += _md_table(
        ["metric", "a", "b", "Δ"],
        ([_md(r.metric), _num(r.a, _digits(r.metric)), _num(r.b, _digits(r.metric)), _signed(r.delta, _digits(r.metric))]
         for r in c.latency.rows),
        "-rrr",
    )
    out += _details("Latency and cost" + (" (not comparable)" if not c.latency.comparable else ""), lat)
    if c.config_diff_available:
        diff = [[f"`{_md(k)}`", _md(json_text(v[0])), _md(json_text(v[1]))] for k, v in c.config_diff.items()]
        out += _details(
            f"Config diff ({len(c.config_diff)} key(s))", _md_table(["key", "a", "b"], diff) if diff else ["The configs do not differ."]
        )
    if c.corpus.available:
        rows = [[_md(label) + (" ✱" if changed else ""), _md(va), _md(vb)] for label, va, vb, changed in corpus_rows(c)]
        out += _details(
            "Index and coverage" + (f" ({len(c.corpus.changed)} changed)" if c.corpus.changed else ""),
            [*_md_table(["index stat", "a", "b"], rows, "-rr"), "", _md(corpus_note(c))],
        )
    d = c.drift
    if d.available:
        body: list[str] = []
        for case in d.cases:
            body += [f"**{_md(case.id)}** — {_md(case.question or '')} (similarity {case.similarity:.2f})", ""]
            fence = _fence(case.diff)
            body += [f"{fence}text", case.diff, fence, ""]
            if case.references_added or case.references_removed:
                refs = [f"- removed: {_md(chunk_text(r))}" for r in case.references_removed]
                refs += [f"- added: {_md(chunk_text(r))}" for r in case.references_added]
                body += ["References:", "", *refs, ""]
        if d.n_changed > len(d.cases):
            body.append(f"… and {d.n_changed - len(d.cases)} more (--show-drift N)")
        out += _details(f"Answer drift: {d.n_changed} of {d.n_compared} answers changed", body or ["No answer changed."])
    if c.notes:
        out += _details("Notes", [f"- {_md(n)}" for n in c.notes])
    return "\n".join(out).rstrip() + "\n"


def json_text(v: object) -> str:
    import orjson

    return orjson.dumps(v).decode() if not isinstance(v, str) else v


def append_step_summary(markdown: str, environ: dict[str, str] | None = None) -> Path | None:
    """Append the report to `$GITHUB_STEP_SUMMARY` when set (GitHub Actions' job summary)."""
    target = (environ if environ is not None else os.environ).get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    from evalkit.store.atomic import open_no_follow

    path = Path(target)
    with os.fdopen(open_no_follow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", encoding="utf-8") as f:
        f.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return path


# ---------------------------------------------------------------- rich

_VERDICT_STYLE = {"identical": "green", "better": "green", "equivalent": "green", "non-inferior": "green", "worse": "red",
                  "inconclusive": "yellow"}


_DELTA_COLUMNS: list[tuple[str, Literal["left", "right"]]] = [
    ("a", "right"), ("b", "right"), ("Δ", "right"), ("95% CI (unadj.)", "left"), ("p adj.", "right"), ("n", "right"),
]


def _delta_table(title: str, rows: list[DeltaRow], *, scope: bool) -> Fit:
    """A delta table: one line per row where every column fits, else each row's label and
    significance on a line and its numbers under it. A row whose all-case values differ from
    the paired means shown is followed by a † line with them (`all_case_differs`)."""
    head = "metric" + (" · scope" if scope else "")
    wide = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    wide.add_column(head, no_wrap=True)
    for name, justify in _DELTA_COLUMNS:
        wide.add_column(name, justify=justify, no_wrap=True)
    wide.add_column("significance")
    narrow = Stacked(title, f"{head}  significance", _DELTA_COLUMNS)
    for r in rows:
        style = "bold green" if r.significant and r.change == "better" else "bold red" if r.significant and r.change == "worse" else ""
        label = Text(row_label(r))
        if scope:
            label.append(f" · {r.scope}", style="dim")
        a, b = shown_values(r)
        cells: list[Text | str] = [_num(a), _num(b), Text(_signed(r.reported_delta), style=style), _ci(r), format_p(r.p_adjusted), shown_n(r)]
        said = Text(short_verdict(r), style=style or "dim")
        wide.add_row(label, *cells, said)
        narrow.add_row(label, cells, note=said)
        if all_case_differs(r):
            a_all, b_all, n_all = (Text(x, style="dim") for x in (_num(r.a), _num(r.b), f"{r.n_a}/{r.n_b}"))
            wide.add_row(Text(f"  {ALL_CASE_MARK} all cases", style="dim"), a_all, b_all, "", "", "", n_all, "")
            narrow.add_row(None, [a_all, b_all, "", "", "", n_all], note=Text("all cases", style="dim"), lead=ALL_CASE_MARK)
    return Fit(wide, narrow)


def _verdict_table(c: Comparison) -> Fit:
    """The verdict per metric: one line per metric where every column fits, else each metric's
    name and verdict on a line and its numbers under it."""
    title = f"Verdict per metric ({_level(c.verdict.confidence)} intervals; {GATED_MARK} gated)"
    right = ("n", "Δ", "detectable", "to settle")
    at = VERDICT_HEADER.index("verdict")
    wide = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for name in VERDICT_HEADER:
        wide.add_column(name, justify="right" if name in right else "left", no_wrap=True)
    narrow = Stacked(title, f"{VERDICT_HEADER[0]}  verdict",
                     [(h, "right" if h in right else "left") for i, h in enumerate(VERDICT_HEADER) if i not in (0, at)])
    for m in c.verdict.metrics:
        cells: list[Text | str] = list(verdict_cells(m))
        cells[at] = Text(str(cells[at]), style=_VERDICT_STYLE.get(m.verdict, ""))
        wide.add_row(*cells)
        narrow.add_row(cells[0], [x for i, x in enumerate(cells) if i not in (0, at)], note=cells[at])
    return Fit(wide, narrow)


def _print_flips(console: Console, title: str, flips: list[Flip], side: str, limit: int) -> None:
    groups = by_case(flips)
    console.print(Text(f"{title}: {len(groups)} case(s)", style="bold"))
    for group in groups[:limit]:
        f = group[0]
        changes = [flip_change(x) for x in group]
        hit = f"(first gold hit {format_rank(f.first_hit_rank_a)} → {format_rank(f.first_hit_rank_b)})"
        line = Text(f"  {f.id}  ", style="bold")
        line.append(" · ".join(changes))
        line.append(f"  {hit}", style="dim")
        if cell_len(line.plain) <= console.width:
            console.print(line)
        elif cell_len(line.plain) - cell_len(hit) - 2 <= console.width:
            console.print(line[: len(line.plain) - len(hit) - 2])
            console.print(Text(f"    {hit}", style="dim"))
        else:  # one change a line, so that wrapping never splits a metric's name
            console.print(Text(f"  {f.id}", style="bold"))
            for change in changes:
                console.print(Text(f"    {change}"))
            console.print(Text(f"    {hit}", style="dim"))
        if f.question:
            console.print(Text(f"    {f.question}"))
        for i, chunk in enumerate(f.top_b if side == "b" else f.top_a):
            lead = f"    run {side} retrieved: " if i == 0 else " " * len(f"    run {side} retrieved: ")
            console.print(Text(lead + chunk_text(chunk), style="dim"))
    if len(groups) > limit:
        console.print(Text(f"  … {len(groups) - limit} more case(s) (--max-flips N, or --format json)", style="dim"))


def _print_stages(console: Console, st: StageTransitions) -> None:
    """The stage transition matrix with totals, then each cell's first ids (moved cells first)."""
    present, grid = stage_grid(st)
    title = f"{stage_heading(st)} (K = {st.k if st.k is not None else '—'})"

    def matrix(numbered: bool) -> Table:
        # numbered: the columns by the rows' numbers, for a console too narrow for the stages' names
        table = Table(show_edge=False, pad_edge=False, caption_justify="left",
                      caption="columns: run b's stages, numbered as the rows" if numbered else None)
        table.add_column(STAGE_CORNER, no_wrap=True)
        for i, sb in enumerate(present, 1):
            table.add_column(str(i) if numbered else stage_label(sb), justify="right", no_wrap=True)
        table.add_column("total", justify="right", no_wrap=True)
        for i, sa in enumerate(present, 1):
            counts = [grid[(sa, sb)].n if (sa, sb) in grid else 0 for sb in present]
            cells = [Text(str(n), style="bold" if sa != sb else "") if n else Text("·", style="dim") for n, sb in zip(counts, present, strict=True)]
            table.add_row(Text(f"{i} {stage_label(sa)}" if numbered else stage_label(sa)), *cells, str(sum(counts)))
        table.add_row(Text("total", style="bold"), *(str(st.b.get(sb, 0)) for sb in present), str(st.n))
        return table

    console.print(Text(title, style="table.title"))
    console.print(Fit(matrix(False), matrix(True), Text("(too narrow a console for the matrix; its cells are listed below)", style="dim")))
    console.print(Text(STAGE_LEGEND, style="dim"))
    moved, stayed = stage_moves(st)
    for x in [*moved, *stayed]:
        line = Text(f"  {stage_label(x.a)} → {stage_label(x.b)}: {x.n}  ", style="bold" if x.a != x.b else "")
        line.append(stage_ids(x), style="dim")
        console.print(line)


def _diff_text(diff: str) -> Text:
    """`[-removed-]` in red strike-through, `{+added+}` in green; everything else literal."""
    text = Text()
    i = 0
    while i < len(diff):
        start_del, start_add = diff.find("[-", i), diff.find("{+", i)
        starts = [s for s in (start_del, start_add) if s != -1]
        if not starts:
            text.append(diff[i:])
            break
        s = min(starts)
        text.append(diff[i:s])
        closer, style = ("-]", "red strike") if s == start_del else ("+}", "green")
        e = diff.find(closer, s + 2)
        if e == -1:
            text.append(diff[s:])
            break
        text.append(diff[s : e + 2], style=style)
        i = e + 2
    return text


def _print_head(console: Console, c: Comparison) -> None:
    """The outcome, the runs, the gate's lines, broken invariants, warnings and notes."""
    style = {"pass": "bold green", "fail": "bold red", "inconclusive": "bold yellow"}[outcome_of(c)]
    console.print(Text(headline(c), style=style))
    console.print(Text(runs_line(c)))
    if c.gate.mode != "verdict":
        console.print(Text(verdict_line(c), style=f"bold {_VERDICT_STYLE.get(c.verdict.verdict or '', 'yellow')}"))
    console.print(Text(method_line(c), style="dim"))
    for line in c.gate.failures:
        console.print(Text(f"  ✗ {line}", style="red"))
    for line in c.gate.inconclusive:
        console.print(Text(f"  ? {line}", style="yellow"))
    for line in c.gate.not_significant:
        console.print(Text(f"  ~ {line}", style="yellow"))
    if c.invariants.violations:
        console.print(Text("invariants broken (ignored) — these numbers are not comparable:", style="bold yellow"))
        for nc in c.invariants.not_comparable:
            which = affected_metrics(nc.metrics)
            console.print(Text(f"  {nc.reason}: {which}", style="yellow"))
    for w in c.invariants.warnings:
        console.print(Text(f"warning: {w}", style="yellow"))
    for note in c.notes:
        console.print(Text(f"note: {note}", style="dim"))
    if c.gate.mode != "verdict" and c.verdict.available:
        console.print(Text(GATE_ADVICE, style="bold yellow"))


def _print_verdict(console: Console, c: Comparison) -> None:
    """The verdict per metric, and the metrics left out of it."""
    if c.verdict.metrics:
        console.print(_verdict_table(c))
        console.print(Text(verdict_method(c), style="dim"))
    for x in c.verdict.not_compared:
        console.print(Text(f"not in the verdict: {x['metric']} ({x['reason']})", style="dim"))


def _print_deltas(console: Console, c: Comparison) -> None:
    """The significant changes, the overall deltas with their legend, and the testable slices."""
    sig, repeated = distinct_rows(c.significant_deltas())
    if sig:
        console.print(_delta_table(f"Significant changes ({len(sig)})", sig, scope=True))
        if repeated:
            console.print(Text(repeats_note(repeated), style="dim"))
    else:
        console.print(Text(no_significance(c), style="bold"))
    console.print()
    console.print(_delta_table("Overall", [r for r in c.deltas if r.scope == "overall"], scope=False))
    name = "Holm" if c.stats.correction == "holm" else "Benjamini-Hochberg"
    console.print(Text(DELTA_LEGEND, style="dim"))
    console.print(Text(
        f"p adj.: {name} over the {c.stats.family_size} test(s) that could reach α; n = paired cases. "
        "'k changed: too few': only k paired cases differ, so no p-value could reach α. 'no change': no paired case differs.",
        style="dim",
    ))
    slices, repeated, others = _shown_slices(c)
    if slices:
        console.print()
        console.print(_delta_table(f"Slices with enough changed cases to test ({len(slices)})", slices, scope=True))
    if repeated:
        console.print(Text(f"slices: {repeats_note(repeated)}", style="dim"))
    if others:
        console.print(Text(f"{others} other slice row(s) changed, each with too few changed cases to test (--format json lists them)", style="dim"))


def _print_all_flips(console: Console, c: Comparison, max_flips: int) -> None:
    """The cases that went pass → fail, then fail → pass (nothing when flips are unavailable)."""
    f = c.flips
    if not f.available:
        return
    console.print()
    if not f.regressions and not f.improvements:
        console.print(Text("Flips: no case changed between pass and fail", style="bold"))
    if f.regressions:
        _print_flips(console, "Flips pass → fail", f.regressions, "b", max_flips)
    if f.improvements:
        _print_flips(console, "Flips fail → pass", f.improvements, "a", max_flips)


def _print_unscoreable(console: Console, c: Comparison) -> None:
    """What each run could not score, excluded pairwise."""
    table = Table(title="Cases a run could not score (excluded pairwise, never 0)", title_justify="left", show_edge=False)
    for name in ("run", "cases", "target errors", "judge errors", "empty answers", "unpaired"):
        table.add_column(name, justify="left" if name == "run" else "right")
    for side in ("a", "b"):
        u = c.unscoreable[side]
        judges = ", ".join(f"{j} {n}" for j, n in u.judge_errors.items()) or "0"
        table.add_row(side, str(u.n_cases), str(u.target_errors), escape(judges), str(u.empty_answers), str(u.only_in_this_run))
    console.print(table)


def _print_latency(console: Console, c: Comparison) -> None:
    """Latency and cost, after their warnings."""
    for w in c.latency.warnings:
        console.print(Text(f"warning: {w}", style="yellow"))
    table = Table(title="Latency and cost", title_justify="left", show_edge=False)
    for name in ("metric", "a", "b", "Δ"):
        table.add_column(name, justify="left" if name == "metric" else "right")
    for r in c.latency.rows:
        digits = _digits(r.metric)
        table.add_row(r.metric, _num(r.a, digits), _num(r.b, digits), _signed(r.delta, digits))
    console.print(table)


def _print_conditions(console: Console, c: Comparison) -> None:
    """The config diff and the index each run searched, when known."""
    if c.config_diff_available:
        console.print()
        if c.config_diff:
            table = Table(title=f"Config diff ({len(c.config_diff)})", title_justify="left", show_edge=False)
            for name in ("key", "a", "b"):
                table.add_column(name)
            for key, (va, vb) in c.config_diff.items():
                table.add_row(Text(key), Text(json_text(va)), Text(json_text(vb)))
            console.print(table)
        else:
            console.print(Text("Config diff: the configs do not differ"))
    if c.corpus.available:
        console.print()
        table = Table(title="Index and coverage", title_justify="left", show_edge=False)
        for name in ("index stat", "a", "b"):
            table.add_column(name, justify="left" if name == "index stat" else "right")
        for label, va, vb, changed in corpus_rows(c):
            style = "yellow" if changed else ""
            table.add_row(Text(label + (" ✱" if changed else ""), style=style), Text(va, style=style), Text(vb, style=style))
        console.print(table)
        console.print(Text(corpus_note(c), style="dim"))


def _print_drift(console: Console, c: Comparison) -> None:
    """The answers that changed, as word diffs with the references removed and added."""
    d = c.drift
    if not d.available:
        return
    console.print()
    console.print(Text(f"Answer drift: {d.n_changed} of {d.n_compared} answers changed", style="bold"))
    for case in d.cases:
        console.print(Text(f"  {case.id} — {case.question or ''} (similarity {case.similarity:.2f})", style="bold"))
        console.print(Text("    ").append_text(_diff_text(case.diff)))
        for r in case.references_removed:
            console.print(Text(f"    - reference removed: {chunk_text(r)}", style="red"))
        for r in case.references_added:
            console.print(Text(f"    + reference added: {chunk_text(r)}", style="green"))
    if d.n_changed > len(d.cases):
        console.print(Text(f"  … {d.n_changed - len(d.cases)} more (--show-drift N)", style="dim"))


def print_comparison(c: Comparison, console: Console | None = None, *, max_flips: int = 20) -> None:
    """The terminal report: verdict, significant changes, deltas, flips, failure stages, drift, config, latency."""
    console = console or Console()
    _print_head(console, c)
    console.print()
    _print_verdict(console, c)
    console.print()
    _print_deltas(console, c)
    _print_all_flips(console, c, max_flips)
    if c.stages.available:
        console.print()
        _print_stages(console, c.stages)
    console.print()
    _print_unscoreable(console, c)
    console.print()
    _print_latency(console, c)
    _print_conditions(console, c)
    _print_drift(console, c)
