"""May two runs be compared at all (seed 000 §10.1), and what may explain a difference
between them without refusing the pair. Pure functions over two metrics.json bodies; no I/O.

`check_invariants` says why two runs must not be compared: another eval set (dataset
version; the same cases with other gold labels are named apart, `gold labels differ`, and
`allow_label_change` accepts them) or number of cases, another judge model, judge prompt
version or judge temperature (when both runs were judged), another scorer (the metric
registry hash: seed 004's "metric definitions are contract"; two evalkit versions with the
same definitions only get a warning) and, with `same_corpus`, other notes or another index
(the index stats' version, document and chunk counts and coverage). A broken invariant fails
the gate unless ignored. `invariant_warnings` says what may explain a difference without
refusing the pair: a changed corpus (without `same_corpus`), a scorer only one run recorded,
a contract field one target leaves out. Such a field refuses nothing (issue 36): the
metrics that read it (`fields.field_gaps`) are skipped with the field and the side as the
reason, and a field no metric reads (`score_vector`) blocks nothing. Runs that asked their
target for different K stay comparable on retrieval at a K both measured; their answer
metrics (`ANSWER_METRICS`) are not (`asked_k_difference`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalkit.gate.fields import field_gaps
from evalkit.metrics.registry import ANSWER_SIDE_KEYS, registry_hash
from evalkit.store.runlog import Met, Rec

__all__ = [
    "ANSWER_METRICS",
    "CORPUS_KEYS",
    "asked_k_difference",
    "asked_k_of",
    "case_count",
    "check_invariants",
    "corpus_changes",
    "corpus_of",
    "invariant_warnings",
    "label_change",
    "relabelled_from",
    "scorer_identity",
    "scorer_of",
    "scorer_text",
    "trial_count",
]

# What depends on the chunks the answerer was given, i.e. on how many the target was asked
# for: not comparable between runs that asked for different K (retrieval at a K both
# measured still is: the top K of a deeper list is the same list). The registry's
# `answer_side`, and latency.
ANSWER_METRICS: tuple[str, ...] = (*ANSWER_SIDE_KEYS, "latency")


def asked_k_of(metrics: Mapping[str, Any]) -> int | None:
    """How many chunks a run asked its target for: `invariants.asked_k` (run_eval records it),
    else the largest K of metrics.json's `ks` (a re-score to smaller K would hide a deeper ask)."""
    inv = metrics.get(Met.INVARIANTS) if isinstance(metrics.get(Met.INVARIANTS), Mapping) else {}
    asked = inv.get("asked_k")
    if isinstance(asked, int) and not isinstance(asked, bool):
        return asked
    ks = [k for k in metrics.get("ks") or [] if isinstance(k, int) and not isinstance(k, bool)]
    return max(ks) if ks else None


def asked_k_difference(asked_baseline: int | None, asked_new: int | None) -> str | None:
    """The reason the answer metrics are not comparable, when the runs asked for different K."""
    if asked_baseline is None or asked_new is None or asked_baseline == asked_new:
        return None
    return f"K differs: the target was asked for {asked_baseline} vs {asked_new} chunks"


def case_count(metrics: Mapping[str, Any]) -> int | None:
    """The cases a run asked: total_tests counts records, which a `--trials N` run has N of
    per case (issue 30: a 3-trial run against a 1-trial one was refused as "partial")."""
    trials = metrics.get("trials")
    if isinstance(trials, Mapping) and isinstance(trials.get("n_cases"), int):
        return int(trials["n_cases"])
    total = metrics.get(Met.TOTAL_TESTS)
    return total if isinstance(total, int) else None


def trial_count(metrics: Mapping[str, Any]) -> int:
    """How many trials per case a run made (`--trials N`); 1 when its metrics.json says none."""
    trials = metrics.get("trials")
    n = trials.get("n_trials") if isinstance(trials, Mapping) else None
    return n if isinstance(n, int) and n > 0 else 1


def scorer_identity() -> dict[str, str]:
    """What computes a run's metrics: evalkit's version and the metric registry's hash
    (`registry_hash`). run_eval records it in config.json `scorer`, metrics.json carries it
    in `invariants.scorer`, and score_retrieval stamps its own when it re-scores a run."""
    from evalkit import __version__

    return {"evalkit_version": __version__, "registry_hash": registry_hash()}


def scorer_of(metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """metrics.json's `invariants.scorer`; None for a run made before evalkit recorded it."""
    inv = metrics.get(Met.INVARIANTS) if isinstance(metrics.get(Met.INVARIANTS), Mapping) else {}
    scorer = inv.get("scorer")
    return dict(scorer) if isinstance(scorer, Mapping) else None


def scorer_text(scorer: Mapping[str, Any]) -> str:
    """`evalkit 0.1.0, registry 5ed7b6d5051d`: a scorer as messages name it."""
    return f"evalkit {scorer.get('evalkit_version')}, registry {str(scorer.get('registry_hash'))[:12]}"


# What a run's index stats say about the notes it searched (metrics.json
# `aggregate_metrics.indexing_coverage`, summarize_indexing_coverage's shape): the index's
# version, its document and chunk counts and its coverage rates (seed 000's
# "Indexing Coverage Stats").
CORPUS_KEYS = ("index_version", "chunker_version", "docs_processed", "docs_with_0_chunks", "no_chunks_generated_rate",
               "chunks_attempted", "chunks_embedded", "chunks_skipped", "chunks_skipped_rate")


def corpus_of(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """The notes and index a run searched, from its index stats ({key: value} over
    CORPUS_KEYS it has): {} when its target served none."""
    cov = ((metrics or {}).get(Met.AGGREGATE) or {}).get(Rec.INDEXING_COVERAGE)
    if not isinstance(cov, Mapping):
        return {}
    return {k: cov.get(k) for k in CORPUS_KEYS if k in cov}


def corpus_changes(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> dict[str, list[Any]]:
    """{key: [a, b]} of the index stats that differ between two runs' metrics.json; {} when
    they agree or when either target served no index stats."""
    ca, cb = corpus_of(a), corpus_of(b)
    if not ca or not cb:
        return {}
    return {k: [ca.get(k), cb.get(k)] for k in CORPUS_KEYS if (k in ca or k in cb) and ca.get(k) != cb.get(k)}


def _changes_text(changes: Mapping[str, list[Any]]) -> str:
    def fmt(v: Any) -> str:  # rates to 4 significant digits: 2 of 62 -> 2 of 63 is 0.03226 -> 0.03175
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    return "; ".join(f"{k} {fmt(va)} -> {fmt(vb)}" for k, (va, vb) in changes.items())


def _scorer_violation(baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any]) -> str | None:
    sb, sn = scorer_of(baseline_metrics), scorer_of(new_metrics)
    # The definitions are the contract, not the release: the same registry hash under two
    # evalkit versions computes the same numbers (`invariant_warnings` names the versions),
    # so a committed baseline file does not break on every upgrade.
    keys = ("registry_hash",)
    if sb is None or sn is None or all(sb.get(k) == sn.get(k) for k in keys):
        return None
    current = scorer_identity()
    stale = [m for m, s in ((baseline_metrics, sb), (new_metrics, sn)) if any(s.get(k) != current[k] for k in keys)]
    ids = " and ".join(f"score_retrieval.py --run-id {m.get('run_id') or 'RUN_ID'}" for m in stale)
    return (f"scorers differ ({scorer_text(sb)} vs {scorer_text(sn)}): the metrics were computed by different "
            f"definitions; re-score the run(s) made with another scorer than this evalkit's ({scorer_text(current)}): "
            f"{ids or 'score_retrieval.py --run-id RUN_ID'}, then compare again")


def label_change(baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any]) -> bool:
    """Whether two runs hold the same cases with other gold labels: their `dataset_version`s
    (the eval set whose labels scored each) differ while their `cases_version`s (the cases'
    ids and questions, `evalset.load.CaseIdentity`) agree. False when either lacks one."""
    vb, vn = baseline_metrics.get("dataset_version"), new_metrics.get("dataset_version")
    cb, cn = baseline_metrics.get("cases_version"), new_metrics.get("cases_version")
    return bool(vb and vn and vb != vn and cb and cn and cb == cn)


def relabelled_from(metrics: Mapping[str, Any]) -> list[str] | None:
    """The eval set file(s) whose labels a run was last re-scored with, when that is not the
    eval set it ran with (its metrics.json `dataset_version` is then theirs); else None."""
    for block in (Met.RETRIEVAL_SCORING, Met.ABSTENTION_SCORING):
        es = (metrics.get(block) or {}).get("eval_set") if isinstance(metrics.get(block), Mapping) else None
        if isinstance(es, Mapping) and es.get("changed") and es.get("version") == metrics.get("dataset_version"):
            return [str(p) for p in es.get("paths") or []]
    return None


def _label_change_text(baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any]) -> str:
    vb, vn = str(baseline_metrics.get("dataset_version")), str(new_metrics.get("dataset_version"))
    # The side, not metrics.json's run_id: a copied run folder keeps the id it was made under.
    why = [f"{side} was re-scored with {', '.join(paths) or 'another eval set'}"
           for side, m in (("the baseline", baseline_metrics), ("the new run", new_metrics))
           if (paths := relabelled_from(m)) is not None]
    return (f"gold labels differ (dataset_version {vb[:12]}… vs {vn[:12]}…): the runs hold the same cases (ids and "
            f"questions) scored with other labels" + (f"; {'; '.join(why)}" if why else ""))


def check_invariants(
    baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any], *, same_corpus: bool = False,
    allow_label_change: bool = False,
) -> list[str]:
    """Why two runs must not be compared (seed 000 §10.1); empty when they may be.

    Reads each metrics.json's `dataset_version`, `total_tests` and `invariants` block
    ({"judge": {provider, model, prompt_version(s), temperature} | [those] | None,
    "scorer": {evalkit_version, registry_hash}}); a run without a value (an older
    metrics.json, a retrieval-only run's judge) is not held against the other
    (`invariant_warnings` says so for the scorer). Debug payload fields one target leaves
    out are no invariant (issue 36): `fields.field_gaps` says which metrics they blind,
    and the gate skips those. With `same_corpus`
    (`--same-corpus`), the index stats (CORPUS_KEYS) must agree, and a run whose target
    served none breaks it too: the corpus cannot be checked. One line per broken invariant,
    baseline first.

    Runs whose `dataset_version`s differ but whose `cases_version`s agree hold the same
    cases with other gold labels (a re-scoring with `--eval-set relabelled.jsonl`): that is
    `gold labels differ`, naming both versions and the run re-scored, unless
    `allow_label_change` (then `invariant_warnings` says the deltas mix the label change in);
    other cases are `eval sets differ`.
    """
    out: list[str] = []
    vb, vn = baseline_metrics.get("dataset_version"), new_metrics.get("dataset_version")
    if label_change(baseline_metrics, new_metrics):
        # The same cases relabelled (issue 36): named apart from another eval set, and acceptable.
        if not allow_label_change:
            out.append(f"{_label_change_text(baseline_metrics, new_metrics)}: retrieval deltas would mix the label "
                       "change with the chatbot's; re-score one run with the other's eval set (score_retrieval.py "
                       "--run-id RUN --eval-set FILE), or pass --allow-label-change")
    elif vb and vn and vb != vn:
        out.append(f"eval sets differ (dataset_version {vb[:12]}… vs {vn[:12]}…)")
    nb, nn = case_count(baseline_metrics), case_count(new_metrics)
    if isinstance(nb, int) and isinstance(nn, int) and nb != nn:
        out.append(f"case counts differ ({nb} vs {nn}): a filtered or partial run")
    ib = baseline_metrics.get(Met.INVARIANTS) if isinstance(baseline_metrics.get(Met.INVARIANTS), Mapping) else {}
    inn = new_metrics.get(Met.INVARIANTS) if isinstance(new_metrics.get(Met.INVARIANTS), Mapping) else {}
    out += _judge_violations(ib.get("judge"), inn.get("judge"))
    hb, hn = ib.get("history"), inn.get("history")
    if hb and hn and hb != hn:
        # A turn sent the chatbot's own answers is another question than one sent the reference's.
        out.append(f"history modes differ (--history {hb} vs {hn}): a conversation's later turns were asked differently")
    scorer = _scorer_violation(baseline_metrics, new_metrics)
    if scorer is not None:
        out.append(scorer)
    if same_corpus:
        changes = corpus_changes(baseline_metrics, new_metrics)
        blind = [name for name, m in (("the baseline's", baseline_metrics), ("the new run's", new_metrics)) if not corpus_of(m)]
        if changes:
            out.append(f"the notes or the index differ (--same-corpus): {_changes_text(changes)}")
        elif blind:
            out.append(f"the corpus cannot be checked (--same-corpus): {' and '.join(blind)} target served no index "
                       "stats (GET /api/v1/index/stats, or a Python target's index_stats())")
    return out


def invariant_warnings(
    baseline_metrics: Mapping[str, Any], new_metrics: Mapping[str, Any], *, same_corpus: bool = False,
    allow_label_change: bool = False,
) -> list[str]:
    """What may explain a difference between two runs without refusing the pair: the notes
    or the index changed (unless `same_corpus`, which makes it an invariant), or only one run
    recorded the scorer that computed its metrics (a run made before evalkit recorded it).
    One line each, baseline first; then each contract field one target leaves out that
    blinds a metric (`fields.field_gaps`: the metrics not compared, and why). A label change
    let through by `allow_label_change` comes first."""
    out: list[str] = []
    if allow_label_change and label_change(baseline_metrics, new_metrics):
        out.append(f"{_label_change_text(baseline_metrics, new_metrics)} (--allow-label-change): every delta that "
                   "reads the labels (retrieval above all) mixes the label change with the chatbot's")
    changes = {} if same_corpus else corpus_changes(baseline_metrics, new_metrics)
    if changes:
        out.append(f"the notes or the index changed between the runs ({_changes_text(changes)}): a difference in "
                   "retrieval may come from the corpus, not from the chatbot (--same-corpus refuses such a pair)")
    sb, sn = scorer_of(baseline_metrics), scorer_of(new_metrics)
    if (sb is not None and sn is not None and sb.get("registry_hash") == sn.get("registry_hash")
            and sb.get("evalkit_version") != sn.get("evalkit_version")):
        out.append(f"the runs were scored by evalkit {sb.get('evalkit_version')} and {sn.get('evalkit_version')}, with "
                   "the same metric definitions (registry hash): their numbers are comparable")
    sides = (("the baseline", "the new run", sn, baseline_metrics), ("the new run", "the baseline", sb, new_metrics))
    for missing, other, known, m in sides:
        if known is not None and (sb is None) != (sn is None):
            out.append(f"{missing} recorded no scorer (made before evalkit recorded one); {other} was scored by "
                       f"{scorer_text(known)}: if evalkit's metrics changed in between, the numbers differ for that "
                       f"reason too; re-score {missing} to be sure: score_retrieval.py --run-id {m.get('run_id') or 'RUN_ID'}")
    out += [gap.message for gap in field_gaps(baseline_metrics, new_metrics) if gap.metrics]
    return out


def _judge_fields(judge: Any) -> dict[str, set[str]] | None:
    """{"model": {...}, "prompt_version": {...}, "temperature": {...}} over one or several judges."""
    judges = judge if isinstance(judge, list) else [judge]
    judges = [j for j in judges if isinstance(j, Mapping)]
    if not judges:
        return None
    out: dict[str, set[str]] = {"model": set(), "prompt_version": set(), "temperature": set()}
    for j in judges:
        out["model"].add(f"{j.get('provider')}:{j.get('model')}" if j.get("model") else str(j.get("provider")))
        pv = j.get("prompt_versions") if j.get("prompt_versions") is not None else j.get("prompt_version")
        out["prompt_version"].add(repr(sorted(pv.items())) if isinstance(pv, Mapping) else str(pv))
        out["temperature"].add(str(j.get("temperature")))
    return out


def _judge_violations(jb: Any, jn: Any) -> list[str]:
    fb, fn = _judge_fields(jb), _judge_fields(jn)
    if fb is None or fn is None:
        return []
    out = []
    for key, label in (("model", "judge model"), ("prompt_version", "judge prompt version"), ("temperature", "judge temperature")):
        if fb[key] != fn[key]:
            out.append(f"{label} differs ({', '.join(sorted(fb[key]))} vs {', '.join(sorted(fn[key]))})")
    return out
