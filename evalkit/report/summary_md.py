"""summary.md: a run's metrics as Markdown, for a reader on GitHub or in a pull request.

Pure: metrics.json, config.json and a few case records in, text out. The headline rows
are `report.run.summary_rows`, the same rows (labels, rounding, n) as run_eval's terminal
table, so the two never disagree. What goes in (seed 004 "Output Structure"):

- the headline metrics, each with its n;
- the breakdown by category (n per cell where it differs from the category's cases);
- the gate verdict and the run's warnings, when there are any;
- the worst cases (`worst_cases`): target errors, missed gold, hallucinated or wrongly
  abstained answers, judge errors, then the lowest scores; the question cut short.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from typing import Any

from evalkit.metrics.custom import CUSTOM_METRICS
from evalkit.metrics.registry import short_label_of, shown_in
from evalkit.store.runlog import Cell, Met, Rec, Rm

__all__ = [
    "QUESTION_CHARS",
    "WORST_CASES",
    "WorstCases",
    "case_problems",
    "render_summary",
    "retrieval_badness",
    "worst_cases",
    "worst_cases_of",
]

WORST_CASES = 10
QUESTION_CHARS = 80
# How bad each kind of problem is, for ordering the worst cases (then by the scores).
_SEVERITY = {"error": 100.0, "missed gold": 50.0, "hallucinated": 40.0, "false abstention": 30.0, "judge error": 20.0}
# Headers are the registry's short labels (the HTML report's by-slice tables use the same).
_CATEGORY_COLUMNS = tuple(((m.short or m.label), m.key) for m in shown_in("category_columns"))


def cell(text: Any) -> str:
    """`text` safe inside a Markdown table cell: one line, no `|` breaking the row, no HTML."""
    s = " ".join(str(text).split())
    s = "".join(c for c in s if c.isprintable())
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("`", "\\`")


def _cut(text: str, n: int = QUESTION_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _fmt(v: Any) -> str:
    x = _num(v)
    return "—" if x is None else f"{x:.3f}"


def _index(cov: Any) -> str | None:
    """The index the run searched, from the target's index stats: `md-heading-v2+…+45db4570288b
    (62 notes, 389 chunks)`; None when the target served none."""
    if not isinstance(cov, Mapping):
        return None
    counts = f"{cov.get('docs_processed', '—')} notes, {cov.get('chunks_attempted', '—')} chunks"
    return f"{cov['index_version']} ({counts})" if cov.get("index_version") else counts


def primary_k(metrics: Mapping[str, Any]) -> int | None:
    ks = metrics.get("ks")
    if isinstance(ks, list) and ks and isinstance(ks[0], int):
        return ks[0]
    k = (metrics.get(Met.AGGREGATE) or {}).get("k")
    return k if isinstance(k, int) else None


def _retrieval(record: Mapping[str, Any], k: int | None) -> tuple[float | None, float | None]:
    """(recall_any, mrr) at K from a record, as results.jsonl stored them."""
    rm = record.get(Rec.RETRIEVAL_METRICS)
    if not isinstance(rm, Mapping):
        return None, None
    at = (rm.get(Rm.AT_K) or {}).get(str(k)) if k is not None else None
    if isinstance(at, Mapping):
        return _num(at.get("recall_any")), _num(at.get("mrr"))
    return _num(rm.get("recall_at_k")), _num(rm.get("mrr"))


def _score(record: Mapping[str, Any], judge: str) -> float | None:
    verdict = record.get(judge)
    return _num(verdict.get("score")) if isinstance(verdict, Mapping) else None


def case_problems(record: Mapping[str, Any], k: int | None) -> tuple[float, list[str]]:
    """How bad one case went: (badness, problem labels). 0 and [] for a clean case.

    Badness adds each problem's severity (target error, missed gold, hallucinated,
    false abstention, judge error) and the distance of the scores from perfect:
    (1 - recall_any@K) + (1 - MRR@K) on answerable cases, (5 - score) / 5 per judge score.
    """
    case = record.get("case") if isinstance(record.get("case"), Mapping) else {}
    problems: list[str] = []
    error = record.get("error")
    if error:
        kind = error.get("kind") if isinstance(error, Mapping) else None
        problems.append(f"error: {kind or 'unknown'}")
    recall, mrr = _retrieval(record, k)
    answerable = case.get("answerable") is not False
    if answerable and case.get("gold_supports") and recall == 0.0:
        problems.append("missed gold")
    abstention = record.get("abstention") if isinstance(record.get("abstention"), Mapping) else {}
    if abstention.get("hallucinated"):
        problems.append("hallucinated")
    if abstention.get("false_abstention"):
        problems.append("false abstention")
    if record.get(Rec.JUDGE_ERRORS):
        problems.append("judge error")
    badness = sum(_SEVERITY["error" if p.startswith("error") else p] for p in problems)
    if answerable:
        badness += sum(1.0 - v for v in (recall, mrr) if v is not None)
    badness += sum((5.0 - s) / 5.0 for s in (_score(record, Rec.GROUNDEDNESS), _score(record, Rec.CORRECTNESS)) if s is not None)
    return badness, problems


def retrieval_badness(recall: Any, mrr: Any) -> Any:
    """`case_problems`' badness of records whose only problems can be retrieval ones, for numpy
    arrays of recall_any@K and MRR@K of answerable, labeled cases (NaN where there is no value,
    which gives NaN: no badness). The same floats: the same operations (addition commutes)."""
    import numpy as np

    return np.where(recall == 0.0, _SEVERITY["missed gold"], 0.0) + ((1.0 - recall) + (1.0 - mrr))


class WorstCases:
    """The `n` cases that went worst so far (by `case_problems`), fed one record at a time.

    Keeps only `n` rows, so a 100,000-case run is not held in memory, and is fed by a pass
    over the records that a script makes anyway (the aggregate's), so summary.md costs no
    second read of results.jsonl. Tables of consecutive parts of the records merge in order.
    """

    def __init__(self, k: int | None, n: int = WORST_CASES) -> None:
        self.k, self.n = k, n
        self.seen = 0
        self.heap: list[tuple[float, int, dict[str, Any]]] = []

    def add(self, record: Mapping[str, Any]) -> None:
        i = self.seen
        self.seen += 1
        badness, problems = case_problems(record, self.k)
        if badness <= 0 or (len(self.heap) >= self.n and (badness, -i) <= self.heap[0][:2]):
            return
        case = record.get("case") if isinstance(record.get("case"), Mapping) else {}
        recall, mrr = _retrieval(record, self.k)
        question = record.get("question") or case.get("question") or ""
        row = {
            "id": str(record.get(Rec.CASE_ID, case.get("id", "?"))),
            "category": case.get("category"),
            "problems": problems,
            # the case's own values, by the registry's names (its `worst_columns`)
            "recall_any": recall,
            "mrr": mrr,
            "groundedness_avg": _score(record, Rec.GROUNDEDNESS),
            "correctness_avg": _score(record, Rec.CORRECTNESS),
            "question": _cut(question) if isinstance(question, str) else "",
            "badness": badness,
        }
        # Ties: the earlier case (file order) counts as worse, so the list is stable.
        self._push((badness, -i, row))

    def could_take(self, badness: float) -> bool:
        """Whether the next record, this bad, would enter the list. When the list is full,
        a tie with the least bad kept case loses: the kept one came earlier in the file."""
        return len(self.heap) < self.n or badness > self.heap[0][0]

    def skip(self) -> None:
        """Count a record `add` would turn away (clean, or better than every kept case)
        without looking at it: file order stays the tie-breaker."""
        self.seen += 1

    def _push(self, item: tuple[float, int, dict[str, Any]]) -> None:
        if len(self.heap) < self.n:
            heapq.heappush(self.heap, item)
        elif item[:2] > self.heap[0][:2]:
            heapq.heapreplace(self.heap, item)

    def merge(self, other: WorstCases) -> None:
        """Take in `other`, the records that came after this one's."""
        for badness, neg_i, row in other.heap:
            self._push((badness, neg_i - self.seen, row))
        self.seen += other.seen

    def rows(self) -> list[dict[str, Any]]:
        """Worst first."""
        return [row for _, _, row in sorted(self.heap, key=lambda t: t[:2], reverse=True)]


def worst_cases_of(records: Iterable[Mapping[str, Any]], k: int | None, n: int = WORST_CASES) -> WorstCases:
    """A WorstCases fed every record of `records`."""
    worst = WorstCases(k, n)
    for record in records:
        worst.add(record)
    return worst


def worst_cases(records: Iterable[Mapping[str, Any]], k: int | None, n: int = WORST_CASES) -> list[dict[str, Any]]:
    """The `n` cases that went worst (by `case_problems`), worst first; clean cases never."""
    return worst_cases_of(records, k, n).rows()


def _table(head: list[str], rows: list[list[str]], align: list[str] | None = None) -> list[str]:
    align = align or ["---"] * len(head)
    return ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |", *("| " + " | ".join(r) + " |" for r in rows)]


def render_summary(
    metrics: Mapping[str, Any],
    config: Mapping[str, Any] | None = None,
    worst: list[dict[str, Any]] | None = None,
) -> str:
    """summary.md's text.

    Args:
        metrics: metrics.json as committed.
        config: config.json (judge kind, target, creation time), when there is one.
        worst: `worst_cases(...)` rows; None leaves the section out.
    """
    from evalkit.report.run import summary_rows

    config = config or {}
    agg = metrics.get(Met.AGGREGATE) or {}
    k = primary_k(metrics)
    judge = config.get("judge") if isinstance(config.get("judge"), Mapping) else None
    run_id = metrics.get("run_id") or config.get("run_id") or "?"
    out = [f"# Run {cell(run_id)}", ""]
    facts = [
        ("cases", f"{metrics.get(Met.TOTAL_TESTS, agg.get('n_cases', '—'))} "
                  f"({metrics.get(Met.ANSWERABLE_TESTS, '—')} answerable, {metrics.get(Met.UNANSWERABLE_TESTS, '—')} unanswerable)"),
        ("created", config.get("created_at") or metrics.get("timestamp")),
        ("metrics written", metrics.get("timestamp")),
        ("dataset version", dataset_version_text(metrics, config)),
        ("config hash", str(metrics.get("config_hash") or "")[:12] or None),
        ("K", ", ".join(str(x) for x in metrics.get("ks") or []) or k),
        ("target", _target(config)),
        ("index", _index(agg.get(Rec.INDEXING_COVERAGE))),
        ("judge", _judge(judge)),
    ]
    out += [f"- **{name}**: {cell(value)}" for name, value in facts if value not in (None, "")]
    out += ["", "## Headline metrics", ""]
    out += _table(["metric", "value", "n"], [[cell(a), cell(b), cell(c)] for a, b, c in summary_rows(metrics, judge)],
                  ["---", "---:", "---:"])
    out += _by_category_section(metrics.get(Met.BY_CATEGORY), k)
    # Conversations (DESIGN.md §10): "retrieval falls apart after turn 1" is the by_turn table.
    out += _by_category_section(metrics.get(Met.BY_TURN), k, title="By turn", column="turn")
    out += _by_category_section(metrics.get(Met.BY_FOLLOW_UP), k, title="By kind of turn", column="follow_up")
    out += _suite_section(metrics.get("suite"))
    out += _gate_section(metrics.get("gate"))
    out += _thresholds_section(metrics.get("thresholds"))
    out += _trials_section(metrics.get("trials"), k)
    out += _corrected_section(agg.get(Cell.JUDGE_PPI))
    out += _custom_section(agg.get(CUSTOM_METRICS))
    warnings = [w for w in metrics.get("warnings") or [] if isinstance(w, Mapping | str)]
    if warnings:
        out += ["", "## Warnings", ""]
        out += [f"- {cell(w.get('message') or w.get('kind') if isinstance(w, Mapping) else w)}" for w in warnings]
    if worst is not None:
        out += _worst_section(worst, k)
    out += ["", "---", "", "Generated by evalkit from metrics.json; rewritten whenever metrics.json is "
            "(run_eval, score_retrieval, score_abstention, judge_answers). Do not edit by hand.", ""]
    return "\n".join(out)


def _by_category_section(by_category: Any, k: int | None, *, title: str = "By category",
                         column: str = "category") -> list[str]:
    """The category table (or another grouping's), a value's n beside it where it differs
    from the slice's cases."""
    if not isinstance(by_category, Mapping) or not by_category:
        return []
    out = ["", f"## {title}", ""]
    head = [column, "cases"] + [short_label_of(key, k) for _, key in _CATEGORY_COLUMNS]
    rows = []
    for name, c in sorted(by_category.items()):
        c = c if isinstance(c, Mapping) else {}
        n_cases, ns = c.get("n_cases"), c.get("n") if isinstance(c.get("n"), Mapping) else {}
        row = [cell(name), cell(n_cases if n_cases is not None else "—")]
        for _, key in _CATEGORY_COLUMNS:
            value, n = _fmt(c.get(key)), ns.get(key)
            row.append(value if value == "—" or n is None or n == n_cases else f"{value} (n={n})")
        rows.append(row)
    return out + _table(head, rows, ["---", "---:"] + ["---:"] * len(_CATEGORY_COLUMNS))


def _suite_section(suite: Any) -> list[str]:
    """--suite (issue 14): the global score and one row per weighted scenario."""
    if not isinstance(suite, Mapping) or not isinstance(suite.get("scenarios"), Mapping):
        return []
    out = ["", "## Scenarios", ""]
    title = f" ({cell(suite['name'])})" if suite.get("name") else ""
    glob = suite.get("global_score")
    out.append(f"Global score{title}: **{_fmt(glob)}**" + ("" if glob is not None else " — not computed"))
    out += [f"- {cell(p)}" for p in suite.get("problems") or []]
    out.append("")
    rows = [
        [cell(name), cell(r.get("metric")), f"{r.get('weight', 0):g}", cell(r.get("n_cases")), _fmt(r.get("score")),
         cell(r.get("n"))]
        for name, r in suite["scenarios"].items() if isinstance(r, Mapping)
    ]
    out += _table(["scenario", "primary metric", "weight", "cases", "score", "n"], rows,
                  ["---", "---", "---:", "---:", "---:", "---:"])
    extra = suite.get("unweighted_scenarios") or {}
    if extra:
        out += ["", "Not in the suite (no weight): " + cell(", ".join(f"{k} ({v} cases)" for k, v in extra.items()))]
    return out


def _gate_section(gate: Any) -> list[str]:
    """The gate's verdict against the baseline, what failed or was inconclusive, its warnings."""
    if not isinstance(gate, Mapping):
        return []
    verdict = "passed" if gate.get("passed") else ("failed, allowed" if gate.get("allowed") else "failed")
    if gate.get("headline"):  # the merge decision (issue 36), in compare_runs' words
        verdict = str(gate["headline"]) + (" (allowed)" if gate.get("allowed") and not gate.get("passed") else "")
    out = ["", "## Gate", "", f"- against **{cell(gate.get('baseline_run_id'))}**: {cell(verdict)}"]
    out += [f"  - {cell(line)}" for line in [*(gate.get("failures") or []), *(gate.get("inconclusive") or [])]]
    invariants = gate.get(Met.INVARIANTS) if isinstance(gate.get(Met.INVARIANTS), Mapping) else {}
    out += [f"  - warning: {cell(w)}" for w in invariants.get("warnings") or []]
    return out


def _thresholds_section(thresholds: Any) -> list[str]:
    """--threshold (issue 13): each check with its value and n, and what was not measured."""
    if not isinstance(thresholds, Mapping):
        return []
    out = ["", "## Thresholds", "", f"- {'passed' if thresholds.get('passed') else 'failed'}"]
    for c in thresholds.get("checked") or []:
        sign = "≤" if c.get("direction") == "max" else "≥"
        mark = "ok" if c.get("passed") else "FAILED"
        out.append(f"  - {cell(c.get('metric'))} {_fmt(c.get('value'))} {sign} {c.get('threshold'):g} "
                   f"(n = {c.get('n')}): {mark}")
    # Failures with no checked value behind them: a named metric not measured, a bare
    # threshold that found nothing to check ("name: ..." / "threshold 0.7: ...").
    out += [f"  - {cell(line)}" for line in thresholds.get("failures") or []
            if str(line).split(" ", 1)[0].endswith(":") or str(line).startswith("threshold ")]
    named = set((thresholds.get("thresholds") or {}).keys())
    out += [f"  - not measured: {cell(s.get('metric'))} ({cell(s.get('reason'))})"
            for s in thresholds.get("not_measured") or [] if s.get("metric") not in named]
    return out


def _corrected_section(block: Any) -> list[str]:
    """The judge means corrected by the human grades (PPI++), beside the raw judge means."""
    if not isinstance(block, Mapping) or not any(isinstance(block.get(k), Mapping) for k in Rec.JUDGED):
        return []
    pct = round(100 * float(block.get("confidence") or 0.95))

    def ci(c: Any) -> str:
        return f"[{_fmt(c[0])}, {_fmt(c[1])}]" if isinstance(c, list) and len(c) == 2 else "—"

    rows = []
    for kind in Rec.JUDGED:
        b = block.get(kind)
        if not isinstance(b, Mapping):
            continue
        judge, humans = b.get("judge") or {}, b.get("humans") or {}
        rows.append([kind, f"{_fmt(judge.get('mean'))} {ci(judge.get('ci'))}", f"{_fmt(b.get('estimate'))} {ci(b.get('ci'))}",
                     f"{_fmt(humans.get('mean'))} {ci(humans.get('ci'))}", _fmt(b.get("lambda")),
                     f"{b.get('n_labeled')} / {(b.get('n_labeled') or 0) + (b.get('n_unlabeled') or 0)}"])
    out = ["", "## Judge means corrected by human grades", "",
           f"Prediction-powered (PPI++) estimates with {pct}% intervals: the judge's score on every case, "
           "corrected by the human grades of the graded ones (EVAL.md, \"Corrected means\").", ""]
    return out + _table(["score", "judge mean", "corrected", "humans only", "λ", "graded / scored"],
                        [[cell(x) for x in r] for r in rows], ["---", "---:", "---:", "---:", "---:", "---:"])


def _custom_section(block: Any) -> list[str]:
    """The project's own metrics (rubric judges, Python scorers: EVAL.md "Your own metrics")."""
    if not isinstance(block, Mapping) or not block:
        return []
    rows = []
    for name, b in sorted(block.items()):
        if not isinstance(b, Mapping):
            continue
        scale = b.get("scale")
        rows.append([name, _fmt(b.get("mean")), str(b.get("n", 0)),
                     f"0-{scale:g}" if isinstance(scale, int | float) else "—", str(b.get("direction") or "—"),
                     _fmt(b.get("margin")), str(b.get("version") or "—")])
    out = ["", "## Your own metrics", ""]
    return out + _table(["metric", "mean", "n", "scale", "better", "margin", "version"],
                        [[cell(x) for x in r] for r in rows], ["---", "---:", "---:", "---:", "---", "---:", "---"])


def _trials_section(trials: Any, k: int | None) -> list[str]:
    """--trials N (issue 13): each headline metric's mean ± std and per-trial values, the flaky cases."""
    if not isinstance(trials, Mapping):
        return []
    from evalkit.compare.trials import headline_rows

    out = ["", "## Trials", "", f"{trials.get('n_trials')} trials of {trials.get('n_cases')} cases; "
           f"{trials.get('n_flaky_cases') or 0} case(s) changed outcome between trials.", ""]
    out += _table(["metric", "mean ± std", "per trial", "flaky cases"],
                  [[cell(x) for x in row] for row in headline_rows(trials, k)], ["---", "---:", "---:", "---:"])
    if trials.get("flaky_case_ids"):
        out += ["", f"Flaky: {cell(', '.join(trials['flaky_case_ids']))}"]
    if not trials.get("complete"):
        out += ["", "Not every case has every trial: per-trial values are over different cases."]
    return out


def _worst_section(worst: list[dict[str, Any]], k: int | None) -> list[str]:
    """The worst cases, each with its problems and its own values under the tables' headers."""
    out = ["", "## Worst cases", ""]
    if not worst:
        out.append("No case had an error, missed its gold or scored below perfect.")
        return out
    # A case's own values, under the headers its metrics have in every table.
    columns = shown_in("worst_columns")
    head = ["id", "category", "problems", *(short_label_of(m.key, k) for m in columns), "question"]
    rows = [
        [cell(w["id"]), cell(w.get("category") or "—"), cell(", ".join(w["problems"]) or "low scores"),
         *(_fmt(w.get(m.name)) for m in columns), cell(w.get("question") or "")]
        for w in worst
    ]
    out += _table(head, rows, ["---", "---", "---", *["---:"] * len(columns), "---"])
    out += ["", f"The {len(worst)} cases that went worst: errors, missed gold, hallucinated or wrongly "
                "abstained answers and judge errors first, then the lowest scores. Per-case values are "
                "those the script that last wrote metrics.json computed."]
    return out


def dataset_version_text(metrics: Mapping[str, Any], config: Mapping[str, Any], width: int = 12) -> str | None:
    """The run's dataset version as its reports show it: metrics.json's (the labels its
    numbers are scored with), and after a re-scoring with another eval set, which file's and
    the version the run asked its questions from (config.json's)."""
    from evalkit.gate.invariants import relabelled_from

    shown = str(metrics.get("dataset_version") or config.get("dataset_version") or "")[:width]
    asked = str(config.get("dataset_version") or "")[:width]
    relabelled = relabelled_from(metrics)
    if shown and relabelled is not None and asked and asked != shown:
        return f"{shown} (labels re-scored from {', '.join(relabelled) or 'another eval set'}; the run asked {asked})"
    return shown or None


def _target(config: Mapping[str, Any]) -> str | None:
    target = config.get("target")
    if not isinstance(target, Mapping):
        return None
    kind = target.get("kind") or target.get("name")
    where = target.get("api_url") or target.get("vault") or target.get("target")
    return " ".join(str(x) for x in (kind, where) if x) or None


def _judge(judge: Mapping[str, Any] | None) -> str | None:
    if judge is None:
        return None
    if judge.get("provider") is None:
        return "none (retrieval only)"
    name = f"{judge.get('provider')} {judge.get('model') or ''}".strip()
    return name + (" (offline heuristic: rough scores)" if judge.get("heuristic") else "")
