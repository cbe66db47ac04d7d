"""(Re)judge a stored run: the library behind `judge_answers.py --run-id ID`.

Reads results.jsonl, re-reads cut (200-char) chunk text where it can (judges/context.py)
and refuses to judge cut text unless allowed, judges the selected records (concurrently,
bounded), optionally spot-checks a seeded subset with a second judge, then rewrites
results.jsonl and config.json (the run's judges) and derives metrics.json from the new
records, as one update (`derive.rederive`), so a killed judging leaves all three old or
all three new. The derive aggregates at the K the per-case values hold (metrics.json's
`ks`: a score_retrieval at other K rewrote them).
Never calls the target.

After a partial re-judge (`ids`) the other cases keep their verdicts, so the run's scores
may come from several judges (judges/provenance.py). Then config.json's "judge" and
metrics.json's `aggregate_metrics.judge` say `"mixed": true` and list the judges with
their case counts, instead of naming the last judge as the run's. When every judgment of
the session failed, nothing is rewritten and `JudgeRunResult.all_failed` is set.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.collector import fewer_collections
from evalkit.config import judge_identity
from evalkit.derive import RunFacts, rederive
from evalkit.errors import InputError, Problem
from evalkit.evalset.turns import record_turn
from evalkit.judges.base import JudgeItem, JudgeOutcome
from evalkit.judges.context import (
    VaultReader,
    context_source,
    conversation_contexts,
    full_context,
)
from evalkit.judges.provenance import (
    identity_key,
    identity_of_description,
    summarize_judges,
    verdict_identity,
)
from evalkit.judges.reliability import (
    DISAGREEMENT_GAP,
    disagreement_warning,
    reliability_summary,
    sample_indices,
)
from evalkit.judges.runner import (
    JudgeRunner,
    build_judge_runner,
    conflict_notes,
    context_from_record,
    judge_item,
)
from evalkit.judges.settings import (
    JudgeSettings,
    build_judge,
    resolve_judge,
    spot_check_settings,
)
from evalkit.store.runlog import Cell, Met, Rec
from evalkit.store.runs import JUDGE_BATCH_KEPT, RunDir, config_hash

if TYPE_CHECKING:
    from evalkit.judges.batch import BatchOptions

__all__ = ["JudgeRunResult", "SpotCheck", "VaultReader", "judge_run", "judge_run_async"]

_COUNT_KEYS = ("n_cases", "n_groundedness", "n_correctness")


@dataclass
class SpotCheck:
    """`--spot-check N` with a second model (`model`, optional `provider`) or prompt set."""

    n: int
    model: str | None = None
    provider: str | None = None
    prompt_set: str | None = None
    seed: int = 0


@dataclass
class JudgeRunResult:
    """What a (re)judging did. `judge` is the run's judge as config.json now says (possibly
    `{"mixed": true, ...}`); `session_judge` is the judge this call used."""

    run_id: str
    run_dir: Path
    judge: dict[str, Any]
    stats: dict[str, Any]
    reliability: dict[str, Any] | None
    metrics: dict[str, Any]
    n_judged: int
    n_records: int
    warnings: list[str] = field(default_factory=list)
    session_judge: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    all_failed: bool = False
    failure: str | None = None  # one line on why every judgment failed, when all_failed
    bias: dict[str, Any] | None = None  # --bias-probes: judges/bias.py's judge_bias block

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "judge": self.judge,
            "session_judge": self.session_judge,
            "judge_stats": self.stats,
            Cell.JUDGE_RELIABILITY: self.reliability,
            Cell.JUDGE_BIAS: self.bias,
            Met.AGGREGATE: self.metrics.get(Met.AGGREGATE),
            "n_judged": self.n_judged,
            "n_records": self.n_records,
            "context": self.context,
            "all_failed": self.all_failed,
            "failure": self.failure,
            "warnings": self.warnings,
        }


def _select(records: list[dict[str, Any]], ids: Sequence[str] | None, path: Path) -> list[int]:
    if not ids:
        return list(range(len(records)))
    index = {r.get(Rec.CASE_ID): i for i, r in enumerate(records)}
    unknown = [i for i in ids if i not in index]
    if unknown:
        raise InputError(
            [Problem(f"no case {i!r} in this run", path=str(path), field="--ids") for i in unknown]
        )
    return sorted(index[i] for i in dict.fromkeys(ids))


def _reads_context(record: Mapping[str, Any]) -> bool:
    """Whether judging this record can read its chunks: not a target failure, not empty."""
    error = record.get("error")
    if error and not (isinstance(error, Mapping) and error.get("kind") == "empty_answer"):
        return False
    return bool((record.get("answer") or "").strip())


def _recover_contexts(
    records: list[dict[str, Any]], selected: list[int], cfg: Mapping[str, Any], vault: Path | None
) -> tuple[dict[int, list[dict[str, Any]] | None], dict[str, Any], str]:
    """Full-text contexts for the selected records; (contexts, summary, why-not-recovered)."""
    source = context_source(cfg, vault)
    contexts: dict[int, list[dict[str, Any]] | None] = {}
    cut_cases = still_cut_cases = recovered = still_cut = 0
    for i in selected:
        ctx, missing = full_context(records[i], source.reader)
        contexts[i] = ctx
        if ctx is None or not _reads_context(records[i]):
            continue
        cut_cases += 1
        still_cut_cases += missing > 0
        still_cut += missing
        recovered += sum(1 for c in context_from_record(records[i]) if c.get("text_truncated")) - missing
    summary = {
        **source.describe(),
        "cases_with_cut_text": cut_cases,
        "chunks_recovered": recovered,
        "chunks_still_cut": still_cut,
        "cases_judged_on_cut_text": still_cut_cases,
    }
    return contexts, summary, source.why


def _judged_by_others(records: list[dict[str, Any]], selected: set[int], identity: Mapping[str, Any]) -> int:
    """How many unselected records carry a judge-made verdict from another judge than `identity`."""
    mine = identity_key(identity)
    n = 0
    for i, r in enumerate(records):
        if i in selected:
            continue
        idents = [verdict_identity(r, name) for name in (Rec.GROUNDEDNESS, Rec.CORRECTNESS)]
        if any(x is not None and identity_key(x) != mine for x in idents):
            n += 1
    return n


def _known_descriptions(old: Any, session: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Judge descriptions by identity key: the session's and those config.json held before."""
    found: list[Mapping[str, Any]] = []
    if isinstance(old, Mapping):
        if isinstance(old.get("judges"), list):
            found += [d for d in old["judges"] if isinstance(d, Mapping)]
        elif old.get("provider") is not None:
            found.append(old)
    found.append(session)
    out: dict[str, dict[str, Any]] = {}
    for d in found:
        desc = {k: v for k, v in d.items() if k not in _COUNT_KEYS and k != "mixed"}
        out[identity_key(identity_of_description(desc))] = desc
    return out


def _run_judge(
    summary: Mapping[str, Any], old: Any, session: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any] | list[dict[str, Any]] | None]:
    """config.json's "judge", and the judge identity (a list when mixed) that goes into
    config.json's `hashed` and metrics.json's `invariants` (module docstring)."""
    known = _known_descriptions(old, session)
    judges = summary["judges"]

    def desc_of(entry: Mapping[str, Any]) -> dict[str, Any]:
        ident = {k: entry[k] for k in entry if k not in _COUNT_KEYS}
        # A verdict from a judge no description survives for: its identity is all we know.
        return dict(known.get(identity_key(ident)) or ident)

    if not judges:
        return {**session, "mixed": False}, judge_identity(session)
    if not summary["mixed"]:
        desc = desc_of(judges[0])
        return {**desc, "mixed": False}, judge_identity(desc)
    listed = [{**desc_of(j), **{k: j[k] for k in _COUNT_KEYS}} for j in judges]
    cfg_judge = {"mixed": True, "heuristic": summary["heuristic"], "judges": listed, "latest": dict(session)}
    # One identity per judge: the shape gate.check_invariants reads for several judges.
    return cfg_judge, [judge_identity(d) for d in listed]


def _metrics_judge(stats: dict[str, Any], summary: Mapping[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """aggregate_metrics.judge: the run's judges on top, this session's counters beside them."""
    out = dict(stats)
    out["session"] = {k: stats.get(k) for k in ("provider", "model", "heuristic")}
    out["mixed"] = bool(summary["mixed"])
    out["judges"] = list(summary["judges"])
    if summary["mixed"]:
        # Any heuristic verdict makes the scores part-heuristic: the gate must not compare
        # them with a pure LLM run as if they were one.
        out.update(provider=None, model=None, heuristic=bool(summary["heuristic"]))
    elif summary["judges"]:
        j = summary["judges"][0]
        out.update(provider=j["provider"], model=j["model"], heuristic=j["heuristic"])
    out["context"] = context
    return out


def _failure_line(records: list[dict[str, Any]], selected: list[int], stats: Mapping[str, Any]) -> str:
    failed = stats.get("judgments", {}).get("failed", 0)
    by_reason = stats.get("failures") or {}
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(by_reason.items()))
    first = next((e for i in selected for e in records[i].get(Rec.JUDGE_ERRORS) or []), None)
    line = f"the judge failed all {failed} judgments of this run" + (f" ({reasons})" if reasons else "")
    if first:
        line += f"; first: {first.get('judge')}: {first.get('reason')}: {first.get('detail')}"
    return line


# Which `method`s mark a binary decision a judge made (and so one to spot-check): the
# abstention classifier's (not the target's own `abstained`), the conflict judge's (not a rule).
_CLASSIFIED = {"abstention": ("judge", "heuristic"), "conflict": ("llm", "heuristic")}


def _spot_checkable(r: Mapping[str, Any]) -> bool:
    """A record with a judge-made score, or a judge-made binary decision, to re-judge."""
    if any(isinstance(r.get(k), dict) and r[k].get("method") in ("llm", "heuristic") and r[k].get("score") is not None
           for k in (Rec.GROUNDEDNESS, Rec.CORRECTNESS)):
        return True
    return any(isinstance(r.get(name), dict) and r[name].get("method") in methods for name, methods in _CLASSIFIED.items())


async def _spot_check(
    records: list[dict[str, Any]],
    judged: list[int],
    contexts: dict[int, list[dict[str, Any]] | None],
    main: JudgeRunner,
    spot: SpotCheck,
    settings: JudgeSettings,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Re-judge a seeded subset with the second judge; (judge_reliability, second judge stats).

    Score pairs: groundedness and correctness made by a judge (not a rule). Binary pairs
    (seed 000's "or different binary classification"): the abstention classifier's
    `abstained` where a classifier decided it (not the target), and the conflict judge's
    `acknowledged`. A case is eligible when it holds at least one of them.
    """
    second_settings = spot_check_settings(settings, model=spot.model, provider=spot.provider, prompt_set=spot.prompt_set)
    second = build_judge(second_settings)
    g_kind = main.groundedness_kind
    eligible = [i for i in judged if _spot_checkable(records[i])]
    chosen = [eligible[j] for j in sample_indices(len(eligible), spot.n, spot.seed)]
    pairs: dict[str, list[tuple[float, float]]] = {Rec.GROUNDEDNESS: [], Rec.CORRECTNESS: []}
    binary: dict[str, list[tuple[bool, bool]]] = {"abstention": [], "conflict": []}
    disagreeing: set[int] = set()

    async def one(i: int) -> None:
        r = records[i]
        case = r.get("case") or {}
        ctx = contexts.get(i) or context_from_record(r)
        item = JudgeItem(
            question=r.get("question") or "",
            answer=r.get("answer") or "",
            context=tuple(ctx),
            expected_key_facts=tuple(case.get("expected_key_facts") or ()),
            expected_answer=case.get("expected_answer"),
            answerable=bool(case.get("answerable", True)),
            n_references=len(r.get("references") or []),
            conflict_notes=conflict_notes(case),
        )
        for name, key in (("abstention", "abstained"), ("conflict", "acknowledged")):
            mine = r.get(name)
            if not (isinstance(mine, dict) and mine.get("method") in _CLASSIFIED[name] and isinstance(mine.get(key), bool)):
                continue
            out = await second.judge(name, item)
            if isinstance(out, JudgeOutcome) and isinstance(out.verdict.get(key), bool):
                binary[name].append((mine[key], out.verdict[key]))
                if mine[key] != out.verdict[key]:
                    disagreeing.add(i)
        for name, kind in ((Rec.GROUNDEDNESS, g_kind), (Rec.CORRECTNESS, Rec.CORRECTNESS)):
            mine = r.get(name)
            if not (isinstance(mine, dict) and mine.get("method") in ("llm", "heuristic") and mine.get("score") is not None):
                continue
            out = await second.judge(kind, item)
            if not isinstance(out, JudgeOutcome):
                continue
            v = out.verdict
            if kind == "claims" and out.method == "llm":
                claims = v.get("claims") or []
                score = 5 * sum(1 for c in claims if c.get("supported")) / len(claims) if claims else None
            else:
                score = v.get("score")
            if score is not None:
                pairs[name].append((float(mine["score"]), float(score)))
                if abs(float(mine["score"]) - float(score)) > DISAGREEMENT_GAP:
                    disagreeing.add(i)

    try:
        await asyncio.gather(*(one(i) for i in chosen))
        second_desc = second.describe()
        stats = second.stats().to_dict()
    finally:
        await second.aclose()
    r = resolve_judge(second_settings)
    summary = reliability_summary(pairs, {k: v for k, v in binary.items() if v})
    reliability = {
        "disagreement_rate": summary["disagreement_rate"],
        "spot_check_n": len(chosen),
        "weighted_kappa": summary["weighted_kappa"],
        "n_pairs": summary["n_pairs"],
        "n_disagreements": summary["n_disagreements"],
        "by_judge": summary["by_judge"],
        # cases with a pair that disagrees: a score gap > 1 or another binary decision
        "disagreeing_case_ids": [records[i].get(Rec.CASE_ID) for i in chosen if i in disagreeing],
        "seed": spot.seed,
        "second_judge": {
            "provider": r.provider,
            "model": r.model,
            "prompt_set": None if r.provider == "heuristic" else second_settings.prompt_set,
            "version": second_desc.get("version"),
        },
        "case_ids": [records[i].get(Rec.CASE_ID) for i in chosen],
    }
    return reliability, stats


async def judge_run_async(
    run: RunDir,
    settings: JudgeSettings,
    *,
    ids: Sequence[str] | None = None,
    vault: Path | None = None,
    allow_truncated_context: bool = False,
    spot_check: SpotCheck | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    batch: BatchOptions | None = None,
    bias_probes: int = 0,
    bias_seed: int = 0,
) -> JudgeRunResult:
    """Judge the answers of a stored run and rewrite its files (see module docstring).

    Args:
        run: the run folder.
        settings: the judge to use.
        ids: judge only these case ids (others keep their verdicts).
        vault: re-read full chunk text from here when records hold 200-char texts; without
            it an in-process reference run re-reads the vault its config.json records.
        allow_truncated_context: judge chunk text that stays cut instead of refusing.
        spot_check: re-judge a seeded subset with a second judge.
        on_progress: called with (done, total) after each record.
        batch: first ask the verdicts the cache lacks through the provider's batch API
            (judges/batch.py), resuming the run's recorded batch; the normal pass then
            finds them in the cache.
        bias_probes: probe this many judged cases for verbosity and position bias
            (judges/bias.py), sampled with `bias_seed`; metrics.json's `judge_bias`.

    Returns:
        The result; with `all_failed` set (every judgment of this session failed) no file
        was rewritten.

    Raises:
        InputError: unknown case ids, missing config.json, corrupt results, or chunk text
            cut to 200 characters that cannot be re-read (without allow_truncated_context).
        JudgeConfigError: the judge cannot be built or the provider refused the key/model;
            with `batch`, also a batch that failed, expired with requests unrun or was
            refused, a submission of unknown fate, or another batch command on the run
            (judges/batch.py; each names the batch and what to do next).
        RunBusy: another command is changing the run (its writer lock; nothing is read or asked).
    """
    # One writer per run, from the first read to the last write: a re-scoring at work on the
    # run would otherwise lose these verdicts, or these verdicts its numbers.
    with run.writer("judge_answers"):
        return await _judge_run(run, settings, ids=ids, vault=vault, allow_truncated_context=allow_truncated_context,
                                spot_check=spot_check, on_progress=on_progress, batch=batch,
                                bias_probes=bias_probes, bias_seed=bias_seed)


async def _judge_run(
    run: RunDir, settings: JudgeSettings, *, ids: Sequence[str] | None, vault: Path | None,
    allow_truncated_context: bool, spot_check: SpotCheck | None, on_progress: Callable[[int, int], None] | None,
    batch: BatchOptions | None, bias_probes: int = 0, bias_seed: int = 0,
) -> JudgeRunResult:
    """judge_run_async's work, under the run's writer lock."""
    if batch is not None:
        from evalkit.judges.batch import check_batch_settings

        check_batch_settings(settings)
    elif (run.path / JUDGE_BATCH_KEPT).exists():
        # Verdicts a batch paid for wait there for a cache that can store them: a normal pass
        # would buy them again at full price (issue 38 item 5: never pay twice).
        raise InputError(Problem(
            "verdicts an earlier --batch paid for are kept here, waiting for a judge cache that can store them; "
            "rerun with --batch to store them (a judging without --batch would pay for them again), or delete the "
            "file to give them up", path=str(run.path / JUDGE_BATCH_KEPT)))
    cfg = run.read_config()
    # After a batch the normal pass reads what it cached: --refresh-cache applied to the batch.
    runner = build_judge_runner(replace(settings, refresh_cache=False) if batch is not None else settings)
    warnings: list[str] = []
    batch_summary: dict[str, Any] | None = None
    try:
        records = run.read_results()
        if not records:
            raise InputError(Problem("results.jsonl has no records to judge", path=str(run.results_path)))
        selected = _select(records, ids, run.results_path)
        if any((records[i].get("case") or {}).get("recency_conflict_rule") == "acknowledge_both" for i in selected):
            # the conflict judge then judges too: its prompt version is part of the judge's description
            runner.settings = replace(runner.settings, conflict_cases=True)
        contexts, context, why = _recover_contexts(records, selected, cfg, vault)
        if any(record_turn(records[i]) is not None for i in selected):  # a conversation's turns see the earlier ones' chunks
            contexts = conversation_contexts(records, selected, contexts, context_source(cfg, vault).reader)
            # A turn is judged on cut text when an earlier turn's chunk it is shown stayed cut too.
            context["cases_judged_on_cut_text"] = sum(
                1 for i in selected
                if _reads_context(records[i]) and any(c.get("text_truncated") for c in contexts.get(i) or ())
            )
        n_cut = context["cases_judged_on_cut_text"]
        if n_cut and not allow_truncated_context:
            raise InputError(
                Problem(
                    f"{n_cut} of {len(selected)} cases to judge hold chunk text cut to 200 characters that could not "
                    f"be re-read ({why}); pass --vault PATH (the notes the run retrieved from) to re-read it, or "
                    "--allow-truncated-context to judge the cut text anyway",
                    path=str(run.results_path),
                )
            )
        if n_cut:
            warnings.append(
                f"{n_cut} of {len(selected)} cases are judged on truncated (200-char) context "
                f"(--allow-truncated-context; {why})"
            )
        # An answer over the storage cap was judged whole during the run; what is stored is
        # its prefix, and unlike chunk text it cannot be re-read from the notes.
        cut_answers = [records[i][Rec.CASE_ID] for i in selected if records[i].get(Rec.ANSWER_TRUNCATED) and _reads_context(records[i])]
        if cut_answers and not allow_truncated_context:
            raise InputError(
                Problem(
                    f"{len(cut_answers)} of {len(selected)} cases to judge hold an answer stored cut "
                    f"(answer_truncated; first: {cut_answers[0]}); re-judging would judge only its stored prefix. "
                    "Pass --allow-truncated-context to judge the prefix anyway, or leave them out with --ids",
                    path=str(run.results_path),
                )
            )
        if cut_answers:
            warnings.append(
                f"{len(cut_answers)} of {len(selected)} cases are judged on an answer stored cut "
                "(--allow-truncated-context)"
            )

        if ids:
            others = _judged_by_others(records, set(selected), runner.identity())
            if others:
                warnings.append(
                    f"{others} cases outside --ids keep judgments from another judge; the run's judges are now mixed "
                    "(re-judge without --ids to make them one judge)"
                )

        if batch is not None:
            from evalkit.judges.batch import judge_in_batches

            batch_summary = await judge_in_batches(run.path, settings, records, selected, contexts, batch)
            warnings.extend(batch_summary.get("warnings") or [])  # bad result lines, copies of one custom_id
            left = batch_summary["left_to_normal_pass"]
            if left:
                warnings.append(
                    f"{left} of {batch_summary['requests']} batch requests came back unusable (junk or a provider "
                    "error) and were judged the normal way, at the normal price"
                )

        total, done = len(selected), 0
        gate = asyncio.Semaphore(max(1, settings.concurrency) * 2)

        async def one(i: int) -> None:
            nonlocal done
            async with gate:
                records[i] = await runner.judge_record(records[i], contexts[i])
            done += 1
            if on_progress:
                on_progress(done, total)

        tasks = [asyncio.ensure_future(one(i)) for i in selected]
        try:
            # Each judge call's objects die by reference count; at C = 64 the collector ran every
            # call or two (bench/README.md, "Judging at scale").
            with fewer_collections():
                await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

        stats = runner.stats()
        if batch_summary is not None:
            stats["batch"] = batch_summary
        description = runner.describe()
        judgments = stats["judgments"]
        if judgments["failed"] and not judgments["ok"]:
            # An instrument failure: keep the run's earlier verdicts rather than replace
            # them with nothing, and let the caller exit non-zero.
            _clear_batch(run, batch)
            return JudgeRunResult(
                run_id=run.run_id, run_dir=run.path, judge=cfg.get("judge") or {}, stats=stats, reliability=None,
                metrics=run.read_metrics() or {}, n_judged=len(selected), n_records=len(records), warnings=warnings,
                session_judge=description, context=context, all_failed=True,
                failure=_failure_line(records, selected, stats),
            )

        bias = None
        if bias_probes > 0:
            from evalkit.judges.bias import run_bias_probes

            items = {i: judge_item(records[i], contexts.get(i) or context_from_record(records[i])) for i in selected}
            bias = await run_bias_probes(
                records, selected, items, runner.judge, groundedness_kind=runner.groundedness_kind, n=bias_probes,
                seed=bias_seed, config=cfg, judge_model=resolve_judge(settings).model, judge_heuristic=runner.heuristic,
            )
            # the probes' calls, tokens and cost are this session's too
            stats = {**runner.stats(), **({"batch": batch_summary} if batch_summary is not None else {})}

        reliability = None
        if spot_check is not None and spot_check.n > 0:
            reliability, spot_stats = await _spot_check(records, selected, contexts, runner, spot_check, settings)
            stats["spot_check"] = spot_stats
            description["spot_check"] = {**reliability["second_judge"], "n": spot_check.n, "seed": spot_check.seed}
    finally:
        await runner.aclose()

    summary = summarize_judges(records)
    cfg = run.read_config()
    cfg["judge"], hashed_judge = _run_judge(summary, cfg.get("judge"), description)
    # The judges are part of what made these numbers: a re-judged run gets a new
    # config_hash, so "same config_hash => same metrics" stays true; the gate compares the
    # judge identity config.json hashes (derive).
    if isinstance(cfg.get("hashed"), dict):
        cfg["hashed"]["judge"] = hashed_judge
        cfg["config_hash"] = config_hash(cfg["hashed"])
    # Re-judging does not change how long the run took or anything but the verdicts: the
    # derive starts from what the run's files say, with this session's judge numbers.
    facts = RunFacts.stored(run, cfg, run.read_metrics() or {})
    facts.judge_stats, facts.judge = _metrics_judge(stats, summary, context), hashed_judge
    # Not re-measured this session: the earlier spot check and bias probes stay (an absent
    # check is not a measured "no disagreement", nor "no bias"), marked as measured on the
    # verdicts before this one.
    reliability = _kept(reliability, facts.owned_aggregate.get(Cell.JUDGE_RELIABILITY))
    bias = _kept(bias, facts.owned_aggregate.get(Cell.JUDGE_BIAS))
    facts.owned_aggregate = {**facts.owned_aggregate, Cell.JUDGE_RELIABILITY: reliability, Cell.JUDGE_BIAS: bias}
    # One update: a kill mid-way leaves the old three files or the new three (store.py).
    metrics, _ = rederive(run, facts, records, config=cfg)
    # The batch's verdicts are in the run now; a rerun has nothing to resume.
    _clear_batch(run, batch)
    unstable = disagreement_warning(metrics[Met.AGGREGATE].get(Cell.JUDGE_RELIABILITY))
    if unstable is not None:
        warnings.append(unstable["message"])
    return JudgeRunResult(
        run_id=run.run_id,
        run_dir=run.path,
        judge=cfg["judge"],
        stats=metrics[Met.AGGREGATE]["judge"],
        reliability=reliability,
        metrics=metrics,
        n_judged=len(selected),
        n_records=len(records),
        warnings=warnings,
        session_judge=description,
        context=context,
        bias=bias,
    )


def _clear_batch(run: RunDir, batch: BatchOptions | None) -> None:
    if batch is not None:
        from evalkit.judges.batch import clear_batch_state

        clear_batch_state(run.path)


def judge_run(run: RunDir, settings: JudgeSettings, **kwargs: Any) -> JudgeRunResult:
    """Synchronous door to judge_run_async (one event loop for the whole run)."""
    return asyncio.run(judge_run_async(run, settings, **kwargs))


def _kept(measured: dict[str, Any] | None, earlier: Any) -> dict[str, Any] | None:
    """A judge-check block of metrics.json (`judge_reliability`, `judge_bias`): this session's
    measurement, or, when it made none, the earlier one marked `carried_over: true`."""
    if measured is not None or not isinstance(earlier, dict):
        return measured
    return {**earlier, "carried_over": True}
