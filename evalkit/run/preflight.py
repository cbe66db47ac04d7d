"""Everything a run checks before its first case, and refuses or warns about.

`prepare_inputs` checks what needs neither the target nor the judge (flags, resume, eval
set, selection, shard, baseline) and writes nothing; the baseline is then checked against
the judge and the target's corpus, and the gold anchors and the cases' rules are checked
against what this run can see (warnings: the run still measures the rest).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalkit.config import (
    RunSettings,
    build_settings,
    diff_hashed,
    judge_identity,
    project_run_defaults,
)
from evalkit.errors import BadConfig, Problem
from evalkit.evalset.load import EvalSet, configured_categories, load_eval_set
from evalkit.gate.invariants import check_invariants, scorer_identity
from evalkit.run.records import Selection, select_indices
from evalkit.run.session import Prepared
from evalkit.store.runlog import Met, Rec
from evalkit.store.runs import CONFIG_FILE, LATEST, RunDir, resolve_run_id

__all__ = [
    "check_anchors",
    "check_baseline_corpus",
    "check_baseline_judge",
    "conflict_cases",
    "prepare_inputs",
    "unchecked_rules",
]


# custom_metrics: the definitions of the run's --rubric / --scorer metrics, checked by runner._resume_run.
_OBSERVED_KEYS = ("dataset_version", "judge", "custom_metrics")


def _only_retrieval(evaluators: Any) -> bool:
    """Whether an --evaluators value names retrieval alone (a retrieval-only run)."""
    from evalkit.config import parse_evaluators

    try:
        return evaluators is not None and parse_evaluators(evaluators) == ["retrieval"]
    except ValueError:
        return False  # RunSettings says what is wrong with it


def prepare_inputs(values: Mapping[str, Any]) -> Prepared:
    """Everything that can be checked without the target or the judge. Writes nothing."""
    values, stored, project = _given_values(values)
    resume = values.get("resume")
    if resume and stored is not None:
        settings = _resumed_settings(values, stored)
    else:
        settings = build_settings(values, project)

    # --response-schema is read and checked against its meta-schema before anything runs.
    response_validator = _response_validator(settings)
    # --categories adds to evalkit.toml's [eval_set] categories (issue 30: seed 001's installation).
    eval_set = load_eval_set(settings.eval_set, [*configured_categories(), *settings.categories] if settings.categories else None)
    if stored is not None and stored.get("dataset_version") != eval_set.version:
        raise BadConfig(
            Problem(
                f"cannot resume {resume}: the eval set changed (dataset_version {str(stored.get('dataset_version'))[:12]}… "
                f"in the run, {eval_set.version[:12]}… now in {', '.join(settings.eval_set)})"
            )
        )
    # (position in the set, id) pairs: the run rebuilds each case from the stored set when it asks it.
    selected = Selection(_select(eval_set, settings), eval_set.ids)
    unsharded, shard_info = selected, None
    if settings.shard:  # issue 15: this machine's slice of the selection (may be empty)
        selected, shard_info = _shard_selection(selected, settings.shard, eval_set)
    if settings.history == "reference" and eval_set.has_conversations:
        _check_reference_history(eval_set, selected)
    baseline = _read_baseline(settings, eval_set, len(selected)) if settings.baseline else None
    prepared = Prepared(settings, eval_set, selected, baseline, stored_config=stored, unsharded=unsharded)
    prepared.response_validator = response_validator
    prepared.shard_info = shard_info
    if values.get("suite"):  # given now; a resume without it keeps config.json's suite
        from evalkit.metrics.suite import load_suite

        prepared.suite = load_suite(values["suite"])
    if resume:
        prepared.run = RunDir.open(Path(settings.results_dir), resume, flag="--resume")
    return prepared


def _given_values(given: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any]]:
    """The values given, checked against each other and completed: `latest` resolved, the
    run's stored config.json read on --resume, EVAL_API_URL for a run naming no target.

    Returns:
        (the values without None ones, the stored config.json or None, the project's defaults).
    """
    stored: dict[str, Any] | None = None
    values = {k: v for k, v in given.items() if v is not None}
    for key in ("resume", "baseline"):
        # `latest` is stored, gated and resumed under the real id it stands for.
        if values.get(key) == LATEST:
            values[key] = resolve_run_id(Path(values.get("results_dir") or "results"), LATEST, flag=f"--{key}")
    resume = values.get("resume")
    if values.get("retry_errors") and not resume:
        raise BadConfig(Problem("goes with --resume RUN_ID (it redoes the failed cases of that run)", field="--retry-errors"))
    if values.get("answer_quality") and (values.get("retrieval_only") or _only_retrieval(values.get("evaluators"))):
        # It would measure nothing, silently: no judge runs in a retrieval-only run.
        raise BadConfig(Problem("needs a judge; --retrieval-only runs none (judge later with judge_answers.py "
                                "--answer-quality)", field="--answer-quality"))
    if resume:
        results_dir = values.get("results_dir") or "results"
        run = RunDir.open(Path(results_dir), resume, flag="--resume")
        stored = run.read_config()
        # The run lives where it was found, whatever results_dir its config recorded.
        values["results_dir"] = results_dir
    # EVAL_API_URL names the API when neither --api-url nor --target does (the CLI reads it
    # too); resolved here so that config.json and the hash say which target really ran.
    # evalkit.toml's [run] table: this project's defaults, under what the user gave (not on resume).
    project = {} if resume else project_run_defaults()
    if "api_url" in values or "target" in values:  # a target named now replaces the project's
        project = {k: v for k, v in project.items() if k not in ("api_url", "target")}
    stored_target = (stored or {}).get("settings", {}).get("target")
    env_url = os.environ.get("EVAL_API_URL")
    if env_url and "api_url" not in values and "target" not in values and not stored_target and "target" not in project:
        values["api_url"] = env_url
    return values, stored, project


def _resumed_settings(values: Mapping[str, Any], stored: Mapping[str, Any]) -> RunSettings:
    """The settings of `--resume RUN_ID`: the stored ones under what was given again, refused
    (BadConfig) when they name another run or shard, or change the result-affecting config."""
    resume = values["resume"]
    given_run_id = values.get("run_id")
    if given_run_id and given_run_id != resume:
        raise BadConfig(Problem(f"--run-id {given_run_id} and --resume {resume} name different runs"))
    base = dict(stored.get("settings") or {})
    if base.get("shard"):
        # settings.shard of a run stored before issue 28 is 0-based; config.json's `shard` block
        # says the shard alike in every version.
        from evalkit.evalset.shard import stored_shard

        ran = stored_shard(stored)
        base["shard"] = str(ran) if ran is not None else base["shard"]
    # URLs were stored without credentials; a value given again (or the env) wins.
    config_path = Path(values.get("results_dir") or "results") / resume / CONFIG_FILE
    settings = build_settings({**values, "run_id": resume}, base, base_path=str(config_path))
    if base.get("shard") != settings.shard:
        raise BadConfig(
            Problem(f"cannot resume {resume}: it ran shard {base.get('shard')}, not {settings.shard}", field="--shard")
        )
    stored_hashed = {k: v for k, v in (stored.get("hashed") or {}).items() if k not in _OBSERVED_KEYS}
    changed = diff_hashed(stored_hashed, settings.hashed())
    if changed:
        raise BadConfig(
            [Problem(f"cannot resume {resume}: the result-affecting config differs: {c}") for c in changed]
        )
    return settings


def _read_baseline(settings: RunSettings, eval_set: EvalSet, n_selected: int) -> dict[str, Any]:
    """The --baseline run's metrics.json, refused (BadConfig) when it has none or, unless
    --ignore-invariants, when it is not comparable with this run (seed 000 §10.1)."""
    base_run = RunDir.open(Path(settings.results_dir), settings.baseline, flag="--baseline")
    baseline = base_run.read_metrics()
    if baseline is None:
        raise BadConfig(
            Problem(f"baseline run {settings.baseline} has no metrics.json (did it finish?)", field="--baseline")
        )
    # Seed 000 §10.1: refuse, before running anything, a baseline that is not comparable.
    violations = check_invariants(baseline, {"dataset_version": eval_set.version, Met.TOTAL_TESTS: n_selected,
                                             "cases_version": eval_set.cases_version,
                                             Met.INVARIANTS: {"scorer": scorer_identity()}},
                                  allow_label_change=settings.allow_label_change)
    if violations and not settings.ignore_invariants:
        raise BadConfig(
            [Problem(f"cannot gate against {settings.baseline}: {v}", field="--baseline") for v in violations]
            + [Problem("pass --ignore-invariants to compare anyway", field="--baseline")]
        )
    return baseline


def _select(eval_set: EvalSet, settings: RunSettings) -> list[int]:
    """The positions of the cases to run (--ids, --tag, --category, --limit): whole
    conversations, a conversation's id naming its turns and counting once for --limit."""
    if not eval_set.has_conversations:
        return select_indices(eval_set.keys, ids=settings.ids, tags=settings.tag, categories=settings.category,
                              limit=settings.limit)
    from evalkit.evalset.turns import conversation_ids, whole_conversations

    ids = conversation_ids(eval_set.ids, eval_set.turns, settings.ids) if settings.ids else settings.ids
    chosen = select_indices(eval_set.keys, ids=ids, tags=settings.tag, categories=settings.category)
    return whole_conversations(chosen, eval_set.turns, settings.limit)


def _check_reference_history(eval_set: EvalSet, selected: Selection) -> None:
    """--history reference sends each earlier turn's expected_answer: refused (BadConfig)
    when a selected turn's history lacks one, each conversation named once."""
    gaps: dict[str, tuple[list[int], str | None, int | None]] = {}
    for i, _ in selected:
        turn = eval_set.turn_of(i)
        if turn is None or turn[1] == 1:
            continue
        case = eval_set.cases[i]
        missing = [n // 2 + 1 for n, m in enumerate(case.conversation.history) if m.role == "assistant" and m.content is None]
        if missing:
            gaps[turn[0]] = (missing, *eval_set.location(i))  # the last turn's history holds every earlier one
    if gaps:
        raise BadConfig([
            Problem(f"--history reference sends each earlier turn's expected_answer, and turn(s) "
                    f"{', '.join(map(str, missing))} of conversation {cid!r} have none; add them, or run with --history live",
                    path=path, line=line, field="turns")
            for cid, (missing, path, line) in gaps.items()
        ])


def _shard_selection(
    selected: Selection, shard_spec: str, eval_set: EvalSet
) -> tuple[Selection, dict[str, Any]]:
    """The shard's cases and config.json's `shard` block: which shard, its cases, and the
    whole selection it is a slice of (count and ids' sha256), which `evalkit merge` checks.
    A conversation's turns go to one shard: the one its id falls in."""
    from evalkit.evalset.shard import ids_sha256, parse_shard, shard_unit

    shard = parse_shard(shard_spec)
    conversation = {eval_set.ids[i]: cid for i, (cid, _) in eval_set.turns.items()}
    mine = Selection((i for i, _ in shard.select(selected, id_of=lambda case_id: shard_unit(case_id, conversation.get(case_id)))),
                     selected.ids)
    all_ids = [case_id for _, case_id in selected]
    # `index` stays 0-based (sha256 mod count), as in run folders stored before shards counted
    # from 1 (issue 28), so merge and resume read old and new folders alike; `number` is the
    # 1-based shard users type and read (`--shard 2/4`), absent from older folders.
    return mine, {
        "index": shard.index,
        "number": shard.number,
        "count": shard.count,
        "n_cases": len(mine),
        "ids_sha256": ids_sha256([case_id for _, case_id in mine]),
        "n_selected_total": len(all_ids),
        "selected_ids_sha256": ids_sha256(all_ids),
    }


def _response_validator(settings: RunSettings) -> Any:
    """The ResponseValidator of --response-schema / --require-fields, or None (BadConfig: a bad schema)."""
    if settings.response_schema is None and not settings.require_fields and settings.response_field is None:
        return None
    from evalkit.metrics.validity import build_response_validator

    return build_response_validator(
        settings.response_schema, field=settings.response_field, require_fields=settings.require_fields
    )


def check_baseline_judge(baseline: Mapping[str, Any], judge_desc: Mapping[str, Any], baseline_id: str | None) -> None:
    """Seed 000 §10.1 before the first case: a baseline judged by another judge model,
    prompt version or temperature is not comparable (a retrieval-only side is)."""
    new = {Met.INVARIANTS: {"judge": judge_identity(judge_desc)}}
    violations = check_invariants({Met.INVARIANTS: baseline.get(Met.INVARIANTS)}, new)
    if violations:
        raise BadConfig(
            [Problem(f"cannot gate against {baseline_id}: {v}", field="--baseline") for v in violations]
            + [Problem("pass --ignore-invariants to compare anyway", field="--baseline")]
        )


async def check_baseline_corpus(baseline: Mapping[str, Any], target: Any, baseline_id: str | None) -> None:
    """--same-corpus before the first case: the target's index stats now against the
    baseline's (`gate.check_invariants`); a changed index or a target without stats stops
    the run (exit 2), as the other invariants do."""
    from evalkit.metrics.aggregate import summarize_indexing_coverage

    now = {Met.AGGREGATE: {Rec.INDEXING_COVERAGE: summarize_indexing_coverage(await target.index_stats())}}
    violations = check_invariants({Met.AGGREGATE: baseline.get(Met.AGGREGATE)}, now, same_corpus=True)
    if violations:
        raise BadConfig(
            [Problem(f"cannot gate against {baseline_id}: {v}", field="--same-corpus") for v in violations]
            + [Problem("pass --ignore-invariants to compare anyway", field="--baseline")]
        )


async def check_anchors(p: Prepared, target: Any, vault_given: bool) -> dict[str, Any] | None:
    """Check the selected cases' gold anchors against the corpus when it is at hand: the
    in-process reference chatbot's vault, `--vault` given with another target, or the file
    list a target's /api/v1/index/stats serves. A stale anchor can only ever score 0, so
    it is reported before the run (a warning: the run still measures the rest).

    Returns the metrics.json warning, or None when every anchor checked out or no corpus
    is at hand.
    """
    from evalkit.evalset.anchorcheck import (
        check_support,
        corpus_from_index_stats,
        corpus_from_vault,
    )

    s = p.settings
    if s.in_process or vault_given:
        if not Path(s.vault).is_dir():
            return None
        corpus = corpus_from_vault(s.vault)
    else:
        corpus = corpus_from_index_stats(await target.index_stats())
    if corpus is None:
        return None
    located: list[Problem] = []
    n_supports = 0
    for index, _ in p.selected:
        case = p.eval_set.cases[index]
        path, line = p.eval_set.location(index)
        for i, support in enumerate(case.gold_supports):
            n_supports += 1
            for issue in check_support(support, corpus):
                located.append(Problem(issue.message, path=path, line=line, field=f"gold_supports[{i}].{issue.field}"))
    if not located:
        return None
    return {
        "kind": "stale_anchors",
        "severity": "warning",
        "n": len(located),
        "of": n_supports,
        "problems": [str(x) for x in located[:20]],
        "message": f"{len(located)} gold anchor{'s do' if len(located) != 1 else ' does'} not exist in "
        f"{corpus.source}; {'they' if len(located) != 1 else 'it'} can only score 0 "
        "(evalkit validate --eval-set ... --vault ... lists every one)",
    }


def unchecked_rules(p: Prepared) -> dict[str, Any] | None:
    """The selected cases' rules that this run cannot check as written, as metrics.json's
    `unchecked_rules` warning: a cite_newer case without dates (`case_warnings`, found
    when the eval set was read), and an acknowledge_both case in a run without the conflict
    judge (--retrieval-only, or --evaluators without conflict). None when there are none."""
    found: list[tuple[int, Any]] = []
    if p.eval_set.warnings:
        selected = {index for index, _ in p.selected}
        found = [(i, w) for i, w in p.eval_set.warnings if i in selected]
    if "conflict" not in p.settings.judge_evaluators and _holds_conflict_case(p, p.selected):
        why = "--retrieval-only" if p.settings.retrieval_only else "--evaluators without conflict"
        for index, _ in p.selected:
            if p.eval_set.recency_rules.get(index) == "acknowledge_both":
                path, line = p.eval_set.location(index)
                found.append((index, Problem(
                    f"warning: case {p.eval_set.ids[index]!r}: recency_conflict_rule acknowledge_both needs the conflict "
                    f"judge, which this run does not run ({why}), so recency.pass stays null; judge the run with "
                    "judge_answers.py to check it", path=path, line=line, field="recency_conflict_rule",
                )))
    if not found:
        return None
    ids = list(dict.fromkeys(p.eval_set.ids[i] for i, _ in found))
    return {
        "kind": "unchecked_rules",
        "severity": "warning",
        "n": len(ids),
        "of": len(p.selected),
        "ids": ids[:20],
        "problems": [str(w) for _, w in found[:20]],
        "message": f"{len(ids)} case{'s ask' if len(ids) != 1 else ' asks'} for a rule that scoring cannot check as "
        f"written ({', '.join(ids[:5])}{', …' if len(ids) > 5 else ''}): its recency.pass stays null or says less "
        "than the rule (evalkit validate lists each one with what to add)",
    }


def _holds_conflict_case(p: Prepared, selection: Selection) -> bool:
    """Whether a case of `selection` has `recency_conflict_rule: acknowledge_both` (the conflict judge's)."""
    rules = p.eval_set.recency_rules
    if not any(rule == "acknowledge_both" for rule in rules.values()):
        return False
    return any(rules.get(index) == "acknowledge_both" for index, _ in selection)


def conflict_cases(p: Prepared) -> bool:
    """JudgeSettings.conflict_cases: whether the judge's description (hashed) names the
    conflict judge's prompt, which it does when the run's cases hold an acknowledge_both case.

    The run's cases, not the shard's: the hashed config must be one for every shard of a run,
    or `merge` refuses them (issue 36 item 9). A shard without such a case asks the conflict
    judge nothing either way. A shard stored before then named the prompt only when its own
    cases held one; resumed, it keeps the judge it recorded (merging it with newer shards
    is still refused: re-run it)."""
    if not _holds_conflict_case(p, p.run_cases):
        return False
    stored = ((p.stored_config or {}).get("hashed") or {}).get("judge")
    older_shard = (isinstance(stored, dict) and "conflict" not in (stored.get("prompt_version") or {})
                   and not _holds_conflict_case(p, p.selected))
    return not older_shard
