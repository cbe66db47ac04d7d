"""(Re)judge a stored run: the library behind `judge_answers.py --run-id ID`.

Reads results.jsonl, judges the selected records (concurrently, bounded), optionally
spot-checks a seeded subset with a second judge, rewrites results.jsonl atomically,
recomputes metrics.json and records the judge in config.json. Never calls the target.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.config import judge_identity
from evalkit.errors import InputError, Problem
from evalkit.judges.base import JudgeItem, JudgeOutcome
from evalkit.judges.reliability import reliability_summary, sample_indices
from evalkit.judges.runner import (
    JudgeRunner,
    JudgeSettings,
    build_judge,
    build_judge_runner,
    context_from_record,
    resolve_judge,
    spot_check_settings,
)
from evalkit.store import RunDir, config_hash, merge_metrics


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
    run_id: str
    run_dir: Path
    judge: dict[str, Any]
    stats: dict[str, Any]
    reliability: dict[str, Any] | None
    metrics: dict[str, Any]
    n_judged: int
    n_records: int
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "judge": self.judge,
            "judge_stats": self.stats,
            "judge_reliability": self.reliability,
            "aggregate_metrics": self.metrics.get("aggregate_metrics"),
            "n_judged": self.n_judged,
            "n_records": self.n_records,
            "warnings": self.warnings,
        }


def ks_from_config(cfg: dict[str, Any]) -> list[int]:
    """The run's cut-offs: settings.k (run_eval), else params.k / k, else [5]."""
    for holder in (cfg.get("settings"), cfg.get("params"), cfg):
        if isinstance(holder, dict) and holder.get("k") is not None:
            k = holder["k"]
            return [int(x) for x in (k if isinstance(k, list) else [k])]
    return [5]


class VaultReader:
    """Full chunk text from the vault by rel_path and start_line..end_line (1-based, inclusive)."""

    def __init__(self, vault: Path):
        self.vault = Path(vault).resolve()
        self._files: dict[str, list[str] | None] = {}

    def _lines(self, rel_path: str) -> list[str] | None:
        if rel_path not in self._files:
            path = (self.vault / rel_path).resolve()
            lines = None
            # Never read outside the vault, whatever a record claims.
            if path.is_relative_to(self.vault) and path.is_file():
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            self._files[rel_path] = lines
        return self._files[rel_path]

    def chunk_text(self, chunk: dict[str, Any]) -> str | None:
        rel, start, end = chunk.get("rel_path"), chunk.get("start_line"), chunk.get("end_line")
        if not rel or not isinstance(start, int) or not isinstance(end, int):
            return None
        lines = self._lines(rel)
        if lines is None or start < 1 or end < start or start > len(lines):
            return None
        return "\n".join(lines[start - 1 : end])


def _full_context(record: dict[str, Any], vault: VaultReader | None) -> tuple[list[dict[str, Any]] | None, bool]:
    """(context with full texts, still_truncated). None context = use the record's own."""
    chunks = context_from_record(record)
    if not any(c.get("text_truncated") for c in chunks):
        return None, False
    if vault is None:
        return None, True
    out, missing = [], False
    for c in chunks:
        if c.get("text_truncated"):
            text = vault.chunk_text(c)
            if text is None:
                missing = True
            else:
                c = {**c, "text": text, "text_truncated": False}
        out.append(c)
    return out, missing


def _select(records: list[dict[str, Any]], ids: Sequence[str] | None, path: Path) -> list[int]:
    if not ids:
        return list(range(len(records)))
    index = {r.get("test_case_id"): i for i, r in enumerate(records)}
    unknown = [i for i in ids if i not in index]
    if unknown:
        raise InputError(
            [Problem(f"no case {i!r} in this run", path=str(path), field="--ids") for i in unknown]
        )
    return sorted(index[i] for i in dict.fromkeys(ids))


def _judged_by_others(records: list[dict[str, Any]], selected: set[int], model: str) -> int:
    """How many unselected records carry a judge-made verdict from a model other than `model`."""
    n = 0
    for i, r in enumerate(records):
        if i in selected:
            continue
        verdicts = [r.get(k) for k in ("groundedness", "correctness")]
        if any(isinstance(v, dict) and v.get("method") in ("llm", "heuristic") and v.get("model") != model for v in verdicts):
            n += 1
    return n


async def _spot_check(
    records: list[dict[str, Any]],
    judged: list[int],
    contexts: dict[int, list[dict[str, Any]] | None],
    main: JudgeRunner,
    spot: SpotCheck,
    settings: JudgeSettings,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Re-judge a seeded subset with the second judge; (judge_reliability, second judge stats)."""
    second_settings = spot_check_settings(settings, model=spot.model, provider=spot.provider, prompt_set=spot.prompt_set)
    second = build_judge(second_settings)
    g_kind = main.groundedness_kind
    eligible = []
    for i in judged:
        r = records[i]
        if any(isinstance(r.get(k), dict) and r[k].get("method") in ("llm", "heuristic") and r[k].get("score") is not None for k in ("groundedness", "correctness")):
            eligible.append(i)
    chosen = [eligible[j] for j in sample_indices(len(eligible), spot.n, spot.seed)]
    pairs: dict[str, list[tuple[float, float]]] = {"groundedness": [], "correctness": []}
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
        )
        for name, kind in (("groundedness", g_kind), ("correctness", "correctness")):
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

    try:
        await asyncio.gather(*(one(i) for i in chosen))
        second_desc = second.describe()
        stats = second.stats().to_dict()
    finally:
        await second.aclose()
    r = resolve_judge(second_settings)
    summary = reliability_summary(pairs)
    reliability = {
        "disagreement_rate": summary["disagreement_rate"],
        "spot_check_n": len(chosen),
        "weighted_kappa": summary["weighted_kappa"],
        "n_pairs": summary["n_pairs"],
        "by_judge": summary["by_judge"],
        "seed": spot.seed,
        "second_judge": {
            "provider": r.provider,
            "model": r.model,
            "prompt_set": None if r.provider == "heuristic" else second_settings.prompt_set,
            "version": second_desc.get("version"),
        },
        "case_ids": [records[i].get("test_case_id") for i in chosen],
    }
    return reliability, stats


async def judge_run_async(
    run: RunDir,
    settings: JudgeSettings,
    *,
    ids: Sequence[str] | None = None,
    vault: Path | None = None,
    spot_check: SpotCheck | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> JudgeRunResult:
    """Judge the answers of a stored run and rewrite its files (see module docstring).

    Args:
        run: the run folder.
        settings: the judge to use.
        ids: judge only these case ids (others are kept as they are).
        vault: re-read full chunk text from here when records hold 200-char texts.
        spot_check: re-judge a seeded subset with a second judge.
        on_progress: called with (done, total) after each record.

    Raises:
        InputError: unknown case ids, missing config.json, corrupt results.
        JudgeConfigError: the judge cannot be built or the provider refused the key/model.
    """
    cfg = run.read_config()
    ks = ks_from_config(cfg)
    runner = build_judge_runner(settings)
    warnings: list[str] = []
    try:
        records = run.read_results()
        if not records:
            raise InputError(Problem("results.jsonl has no records to judge", path=str(run.results_path)))
        selected = _select(records, ids, run.results_path)
        reader = VaultReader(vault) if vault is not None else None
        contexts: dict[int, list[dict[str, Any]] | None] = {}
        n_truncated = 0
        for i in selected:
            ctx, still_truncated = _full_context(records[i], reader)
            contexts[i] = ctx
            n_truncated += still_truncated
        if n_truncated:
            hint = "some chunks could not be re-read from --vault" if reader else "pass --vault PATH to judge on full chunk text"
            warnings.append(
                f"{n_truncated} of {len(selected)} cases are judged on truncated (200-char) context; {hint}"
            )

        if ids:
            mixed = _judged_by_others(records, set(selected), resolve_judge(settings).model)
            if mixed:
                warnings.append(
                    f"{mixed} cases outside --ids keep judgments from another judge; the metrics mix judges "
                    "(re-judge without --ids to make them comparable)"
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
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

        reliability = None
        spot_stats = None
        if spot_check is not None and spot_check.n > 0:
            reliability, spot_stats = await _spot_check(records, selected, contexts, runner, spot_check, settings)

        stats = runner.stats()
        if spot_stats is not None:
            stats["spot_check"] = spot_stats
        description = runner.describe()
        if spot_check is not None and reliability is not None:
            description["spot_check"] = {**reliability["second_judge"], "n": spot_check.n, "seed": spot_check.seed}
    finally:
        await runner.aclose()

    run.rewrite_results(records)
    from evalkit.metrics.aggregate import aggregate_records

    body = aggregate_records(records, ks=ks)
    body.setdefault("run_id", run.run_id)
    # Merge to keep keys other scripts own, but replace ours whole: a stale trials or
    # spot-check block from an earlier judging must not survive.
    metrics = merge_metrics(run.read_metrics() or {}, body)
    metrics["aggregate_metrics"]["judge"] = stats
    metrics["aggregate_metrics"]["judge_reliability"] = reliability
    cfg = run.read_config()
    cfg["judge"] = description
    # The judge is part of what made these numbers: a re-judged run gets a new config_hash,
    # so "same config_hash => same metrics" stays true.
    if isinstance(cfg.get("hashed"), dict):
        cfg["hashed"]["judge"] = judge_identity(description)
        cfg["config_hash"] = metrics["config_hash"] = config_hash(cfg["hashed"])
    run.write_metrics(metrics)
    run.write_config(cfg)
    return JudgeRunResult(
        run_id=run.run_id,
        run_dir=run.path,
        judge=description,
        stats=stats,
        reliability=reliability,
        metrics=metrics,
        n_judged=len(selected),
        n_records=len(records),
        warnings=warnings,
    )


def judge_run(run: RunDir, settings: JudgeSettings, **kwargs: Any) -> JudgeRunResult:
    """Synchronous door to judge_run_async (one event loop for the whole run)."""
    return asyncio.run(judge_run_async(run, settings, **kwargs))
