"""Which response fields each metric reads, and what a field one target leaves out blinds.

A target may leave out contract fields (docs/api-contract.md): each record lists them in
`missing_fields`, and metrics.json `invariants.debug_fields_missing` holds their union.
Between two runs, a field one target leaves out and the other sends is a *gap*
(`field_gaps`). A gap never refuses the pair (issue 36 item 7: any two chatbots compare):
the metrics that read the field are not compared, each with the field and the side in its
reason (`FieldGap.reason`), and every other metric is. A field no metric reads
(`debug.retrieved_chunks[].score_vector`, `token_count` without a token budget) blocks
nothing: compare notes it.

What reads what (FIELD_READERS; a path without an entry takes its nearest parent's):

| field                                     | read by                                                    |
| ----------------------------------------- | ---------------------------------------------------------- |
| debug.retrieved_chunks                    | the @K metrics, recency_pass_rate, the retrieved-side expectations |
| debug.retrieved_chunks[].chunk_id         | the @K metrics and recency_pass_rate, for gold supports given by chunk id |
| debug.retrieved_chunks[].rel_path         | the same, for gold anchors and line spans                  |
| debug.retrieved_chunks[].heading_path     | the same, for gold anchors                                 |
| debug.retrieved_chunks[].start_line / end_line | the same, for gold line spans                         |
| debug.retrieved_chunks[].text             | the retrieved-side expectations; the @K metrics when snippets are required |
| debug.retrieved_chunks[].token_count      | fact_retention (the token budget; ceil(len(text) / 4) without it) |
| debug.retrieved_chunks[].rank, score_*    | nothing (metrics rank by list position when rank is absent; scores are shown, never scored) |
| debug.folder_selection(.selected_folders) | scope_miss_rate                                            |
| debug.timings_ms(.*)                      | latency (the target's own phase timings)                   |
| debug.versions(.*), folder_selection.mode/fallback_used/reasoning, abstain_reason | nothing |
| references                                | attribution_hit_rate, recency_pass_rate, has_citations_rate |
| references[].chunk_id / rel_path / heading_path / start_line / end_line | attribution_hit_rate, recency_pass_rate, by gold support form as for chunks |
| abstained                                 | the abstention metrics                                     |

Gold support forms (`anchors.support_forms`) come from metrics.json `invariants.gold_forms`
(the forms the labels use, "snippets" only when the run required them); a run that
recorded none is taken to use every form. A reader neither run measured (fact_retention
without a token budget) is not blinded: the gap then blocks nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from evalkit.evalset.anchors import SUPPORT_FORMS
from evalkit.metrics.expectations import RETRIEVED_EXPECTATIONS
from evalkit.metrics.registry import METRICS
from evalkit.store.runlog import Met

__all__ = ["FIELD_READERS", "LATENCY", "FieldGap", "blinded", "field_gaps", "scored_forms"]

# compare_runs' latency section (not a registry metric): the target's own phase timings.
LATENCY = "latency"


@dataclass(frozen=True)
class _Reader:
    """Metrics that read a field, why, and the gold support forms they read it for (empty: any)."""

    metrics: tuple[str, ...]
    why: str
    forms: tuple[str, ...] = ()


_AT_K = tuple(m.key for m in METRICS if m.at_k is not None)
# What matching retrieved chunks against the gold supports feeds (acknowledge_both's
# all_retrieved makes recency one of them).
_MATCHED = (*_AT_K, "recency_pass_rate")
_CITED = ("attribution_hit_rate", "recency_pass_rate")
_ABSTENTION = tuple(m.key for m in METRICS if m.stage == "abstention")


def _match(form: str, what: str, metrics: tuple[str, ...] = _MATCHED) -> tuple[_Reader, ...]:
    return (_Reader(metrics, f"gold {what} match on it", (form,)),)


def _idle(why: str) -> tuple[_Reader, ...]:
    return (_Reader((), why),)


_CHUNKS = "debug.retrieved_chunks"
FIELD_READERS: dict[str, tuple[_Reader, ...]] = {
    "debug": (
        _Reader((*_MATCHED, *RETRIEVED_EXPECTATIONS, "scope_miss_rate", LATENCY),
                "it holds the retrieved chunks, the folder selection and the target's timings"),
    ),
    _CHUNKS: (_Reader((*_MATCHED, *RETRIEVED_EXPECTATIONS), "retrieval is scored on the retrieved chunks"),),
    f"{_CHUNKS}[].chunk_id": _match("chunk_id", "supports given by chunk id"),
    f"{_CHUNKS}[].rel_path": (_Reader(_MATCHED, "gold anchors and line spans match on it", ("anchor", "span")),),
    f"{_CHUNKS}[].heading_path": _match("anchor", "anchors"),
    f"{_CHUNKS}[].start_line": _match("span", "line spans"),
    f"{_CHUNKS}[].end_line": _match("span", "line spans"),
    f"{_CHUNKS}[].text": (
        _Reader(RETRIEVED_EXPECTATIONS, "must_include, must_exclude and ordered hints are searched in it"),
        _Reader(_MATCHED, "required gold snippets are searched in it", ("snippets",)),
    ),
    f"{_CHUNKS}[].token_count": (
        _Reader(("fact_retention",), "the token budget counts it (ceil(len(text) / 4) without it)"),
    ),
    f"{_CHUNKS}[].rank": _idle("metrics rank chunks by their list position when rank is absent"),
    f"{_CHUNKS}[].score_vector": _idle("chunk scores are shown, never scored"),
    f"{_CHUNKS}[].score_lexical": _idle("chunk scores are shown, never scored"),
    f"{_CHUNKS}[].score_final": _idle("chunk scores are shown, never scored"),
    "debug.folder_selection": (_Reader(("scope_miss_rate",), "scope miss is read off the selected folders"),),
    "debug.folder_selection.selected_folders": (
        _Reader(("scope_miss_rate",), "scope miss is read off the selected folders"),
    ),
    "debug.folder_selection.mode": _idle("the run's folder mode is the one scored"),
    "debug.folder_selection.fallback_used": _idle("the selected folders are what was searched"),
    "debug.folder_selection.reasoning": _idle("it is shown, never scored"),
    "debug.timings_ms": (_Reader((LATENCY,), "the target's own phase timings come from it"),),
    "debug.versions": _idle("versions go to config.json, not to a metric"),
    "references": (_Reader((*_CITED, "has_citations_rate"), "citations are read off the references"),),
    "references[].chunk_id": _match("chunk_id", "supports given by chunk id", _CITED),
    "references[].rel_path": (_Reader(_CITED, "gold anchors and line spans match on it", ("anchor", "span")),),
    "references[].heading_path": _match("anchor", "anchors", _CITED),
    "references[].start_line": _match("span", "line spans", _CITED),
    "references[].end_line": _match("span", "line spans", _CITED),
    "abstained": (_Reader(_ABSTENTION, "it is the target's own abstention decision"),),
    "abstain_reason": _idle("it is shown, never scored"),
}


def _readers(path: str) -> tuple[_Reader, ...]:
    """The entry of `path`, else of its nearest parent (`debug.timings_ms.retrieval` ->
    `debug.timings_ms`); an unknown field is read by nothing."""
    while True:
        if path in FIELD_READERS:
            return FIELD_READERS[path]
        cut = max(path.rfind("."), path.rfind("[]"))
        if cut <= 0:
            return _idle("no metric reads it")
        path = path[:cut]


def scored_forms(forms: Iterable[str], require_snippets: bool) -> list[str]:
    """metrics.json `invariants.gold_forms`: the gold support forms of the labels a run was
    scored with (`EvalSet.gold_forms`), with "snippets" only when snippets were required."""
    return sorted(f for f in set(forms) if f in SUPPORT_FORMS and (f != "snippets" or require_snippets))


@dataclass(frozen=True)
class FieldGap:
    """A contract field one run's target leaves out and the other's sends.

    Attributes:
        field: the field's path, as `missing_fields` names it.
        side: the run whose target leaves it out.
        metrics: the metrics it blinds (registry keys, and LATENCY), in reading order;
            empty when no metric either run measured reads it.
        why: what reads it, or why nothing does.
    """

    field: str
    side: Literal["baseline", "new run"]
    metrics: tuple[str, ...]
    why: str

    @property
    def reason(self) -> str:
        """`the new run's target leaves out F (the baseline's sends it): why` (a row's note)."""
        other = "the baseline's" if self.side == "new run" else "the new run's"
        return f"the {self.side}'s target leaves out {self.field} ({other} sends it): {self.why}"

    @property
    def message(self) -> str:
        """The reason and what it blocks: a warning when it blinds a metric, else a note."""
        return f"{self.reason}; not compared: {', '.join(self.metrics)}" if self.metrics else f"{self.reason}; nothing is blocked"


def _block(metrics: Mapping[str, Any], key: str) -> Any:
    inv = metrics.get(Met.INVARIANTS)
    return inv.get(key) if isinstance(inv, Mapping) else None


def _measured(metrics: Sequence[Mapping[str, Any]]) -> set[str] | None:
    """The metrics either run measured (a value in its aggregate); None when neither
    carries an aggregate (a pre-run check): then every reader counts."""
    cells = [m.get(Met.AGGREGATE) for m in metrics]
    cells = [c for c in cells if isinstance(c, Mapping)]
    if not cells:
        return None
    return {key for c in cells for key, value in c.items() if isinstance(value, int | float) and not isinstance(value, bool)}


def _under(field: str, missing: Iterable[str]) -> bool:
    """Whether a parent of `field` is in `missing` (that side sends no such section at all)."""
    return any(field.startswith((m + ".", m + "[")) for m in missing)


def field_gaps(baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any]) -> list[FieldGap]:
    """The fields one run's target leaves out and the other's sends, baseline's first, each
    with the metrics it blinds (see the module table). Empty when either run recorded no
    `invariants.debug_fields_missing` (an older metrics.json is not held against the other).
    """
    mb, mn = _block(baseline_metrics, "debug_fields_missing"), _block(new_metrics, "debug_fields_missing")
    if not isinstance(mb, list) or not isinstance(mn, list):
        return []
    fb, fn = _block(baseline_metrics, "gold_forms"), _block(new_metrics, "gold_forms")
    # The labels' forms; a run that recorded none may use any.
    forms = set(fb) | set(fn) if isinstance(fb, list) and isinstance(fn, list) else set(SUPPORT_FORMS)
    measured = _measured([baseline_metrics, new_metrics])
    out: list[FieldGap] = []
    for side, own, other in (("baseline", mb, mn), ("new run", mn, mb)):
        for field in sorted(set(own) - set(other)):
            if _under(field, other):
                continue  # the other side lacks the whole section: its own gap says so
            out.append(_gap(field, side, forms, measured))  # type: ignore[arg-type]
    return out


def _gap(field: str, side: Literal["baseline", "new run"], forms: set[str], measured: set[str] | None) -> FieldGap:
    reading = [r for r in _readers(field) if r.metrics and (not r.forms or forms & set(r.forms))]
    if not reading:
        idle = [r for r in _readers(field) if not r.metrics]
        if idle:
            return FieldGap(field, side, (), f"no metric reads it ({idle[0].why})")
        wanted = sorted({f for r in _readers(field) for f in r.forms})
        return FieldGap(field, side, (), f"no metric reads it (read for gold supports of form {', '.join(wanted)}, "
                                         "which these labels do not use)")
    metrics = tuple(dict.fromkeys(m for r in reading for m in r.metrics))
    blind = tuple(m for m in metrics if measured is None or m == LATENCY or m in measured)
    if not blind:
        why = "; ".join(r.why for r in reading)
        return FieldGap(field, side, (), f"no metric either run measured reads it ({', '.join(metrics)}: {why})")
    return FieldGap(field, side, blind, "; ".join(r.why for r in reading if set(r.metrics) & set(blind)))


def blinded(gaps: Iterable[FieldGap]) -> dict[str, str]:
    """{metric: the reason of the first gap that blinds it}."""
    out: dict[str, str] = {}
    for gap in gaps:
        for m in gap.metrics:
            out.setdefault(m, gap.reason)
    return out
