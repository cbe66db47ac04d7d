"""Rubric judges defined in a file, and Python scorers: a project's own metrics (issue 42 item 5).

A rubric file is TOML (the format evalkit.toml and matrix files already use):

    name = "helpfulness"              # the metric is rubric/helpfulness
    description = "Does the answer help the user act?"
    scale = 5                         # scores lie on [0, scale]
    direction = "higher"              # or "lower"
    margin = 0.5                      # the verdict's non-inferiority margin, on the scale
    gated = true                      # the merge passes only when it is shown no worse
    criteria = [
      { text = "The answer gives a concrete step the user can take", pattern = "\\b(run|open|click|set)\\b" },
      { text = "The answer cites the note it relies on" , pattern = "\\[\\d+\\]" },
    ]
    [[examples]]
    answer = "Open Settings and set the port to 8080 [1]."
    score = 5
    reasoning = "A concrete step, cited."

Its version is the sha256 of the file's bytes: it is part of the prompt version, so the judge
cache key changes whenever the file does, and it is stored with the metric, so compare does
not pair two runs scored by different rubrics.

How it scores: an LLM judge (any provider `LLMJudge` drives) is sent the criteria, scale and
examples and answers {reasoning, score}, through `LLMJudge.complete_structured`: cached,
retried, repaired and costed as the built-in judges are. The offline heuristic (no judge
given, or `--judge-provider heuristic`) is a deterministic proxy: a criterion is met when its
`pattern` (a case-insensitive regex) is found in the answer, or, without one, when
`SUPPORT_THRESHOLD` of its content words are; score = scale × met / criteria.

A Python scorer is `python:package.module:function` or `python:path/to/file.py:function`,
loaded by the target loader (`targets.python.load_callable`); it is called with the record
(a dict, as results.jsonl holds it) and returns a number on [0, scale], a bool, or None
(not scored). Its version is the sha256 of its function's source.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evalkit.errors import InputError, Problem
from evalkit.judges.base import JudgeOutcome, RenderedPrompt
from evalkit.judges.cache import cache_key, context_hash
from evalkit.judges.heuristic import SUPPORT_THRESHOLD, content_words
from evalkit.judges.prompts import render_context
from evalkit.metrics.custom import (
    CUSTOM_ERRORS,
    CUSTOM_SAMPLES,
    CUSTOM_SCORES,
    CustomMetric,
    check_value,
    metric_name,
    source_version,
)
from evalkit.project import TomlError, parse_toml
from evalkit.store.runlog import Rec

__all__ = [
    "PythonScorer", "Rubric", "RubricOutput", "ascore_records", "judged_by", "load_custom", "load_rubric", "load_scorer",
    "score_records",
]

_MAX_RUBRIC_BYTES = 1 << 20


class RubricOutput(BaseModel):
    """A rubric judge's answer (extra keys from a chatty model are dropped, as the built-in verdicts do)."""

    model_config = ConfigDict(extra="ignore")

    reasoning: str = Field(description="Short justification: which criteria the answer meets and which it misses.")
    score: float = Field(ge=0, description="The score on the rubric's scale, from 0 to its maximum.")


@dataclass(frozen=True)
class Criterion:
    text: str
    pattern: str | None = None


@dataclass(frozen=True)
class Rubric:
    metric: CustomMetric
    description: str
    criteria: tuple[Criterion, ...]
    examples: tuple[dict[str, Any], ...] = ()
    _patterns: tuple[re.Pattern[str] | None, ...] = field(default=(), repr=False, compare=False)

    @property
    def prompt_version(self) -> str:
        return f"rubric-{self.metric.name.split('/', 1)[1]}-{self.metric.version}"

    # ------------------------------------------------------------ offline
    def heuristic_score(self, answer: str) -> tuple[float, str]:
        """(score, reasoning) without a model: the share of criteria met, times the scale."""
        words = content_words(answer)
        met = []
        for criterion, pattern in zip(self.criteria, self._patterns, strict=True):
            if pattern is not None:
                ok = pattern.search(answer) is not None
            else:
                need = content_words(criterion.text)
                ok = bool(need) and len(need & words) / len(need) >= SUPPORT_THRESHOLD
            met.append(ok)
        score = self.metric.scale * sum(met) / len(met)
        return score, f"heuristic: {sum(met)}/{len(met)} criteria met"

    # ------------------------------------------------------------ LLM
    def render(self, record: Mapping[str, Any], temperature: float = 0.0) -> RenderedPrompt:
        """The prompt sent to an LLM judge for one record."""
        top = f"{self.metric.scale:g}"
        criteria = "\n".join(f"{i}. {c.text}" for i, c in enumerate(self.criteria, start=1))
        examples = "\n\n".join(
            f"Example answer: {e.get('answer', '')}\nScore: {e.get('score')}\nWhy: {e.get('reasoning', '')}"
            for e in self.examples
        )
        system = (
            "You grade one answer of a retrieval-augmented chatbot against a rubric. "
            f"Score it from 0 to {top} ({'higher' if self.metric.direction == 'higher' else 'lower'} is better). "
            "Reply with a JSON object {\"reasoning\": string, \"score\": number} and nothing else."
        )
        context = render_context(sorted(
            (dict(c) for c in record.get("retrieved_chunks") or []), key=lambda c: (c.get("rank") is None, c.get("rank") or 0)
        ))
        user = (
            f"Rubric: {self.description}\nCriteria:\n{criteria}\n"
            + (f"\nGraded examples:\n{examples}\n" if examples else "")
            + f"\nQuestion: {record.get('question') or ''}\n\nRetrieved context:\n{context}\n\n"
            f"Answer to grade:\n{record.get('answer') or ''}\n\nScore (0-{top}):"
        )
        prompt_hash = source_version((system + "\n" + user).encode("utf-8"))
        return RenderedPrompt(kind=self.metric.name, prompt_version=self.prompt_version, system=system,
                              messages=[{"role": "user", "content": user}], schema_name="rubric_score",
                              temperature=temperature, prompt_hash=prompt_hash)

    async def judge(self, llm: Any, record: Mapping[str, Any], trial: int = 0) -> tuple[float | None, dict[str, Any]]:
        """One record's score by `llm` (an LLMJudge), cached under a key holding the rubric's
        version (and `trial` > 0: a `--judge-samples` sample of its own); (None, failure) when
        the judge could not give one on the scale."""
        prompt = self.render(record, llm.temperature)
        chunks = sorted((dict(c) for c in record.get("retrieved_chunks") or []),
                        key=lambda c: (c.get("rank") is None, c.get("rank") or 0))
        key = cache_key(kind=self.metric.name, question=str(record.get("question") or ""),
                        answer=str(record.get("answer") or ""), context_sha256=context_hash(chunks),
                        provider=llm.backend.provider, model=llm.backend.model, prompt_version=self.prompt_version,
                        temperature=llm.temperature, trial=trial)
        outcome = await llm.complete_structured(self.metric.name, prompt, RubricOutput, key)
        if not isinstance(outcome, JudgeOutcome):
            return None, outcome.to_record()
        try:
            value = check_value(self.metric, outcome.verdict.get("score"))
        except ValueError as e:
            return None, {"judge": self.metric.name, "reason": "parse_failure", "detail": str(e)}
        return value, {"method": "llm", "cached": outcome.cached, "reasoning": outcome.verdict.get("reasoning")}


def _problem(message: str, path: Path | str) -> InputError:
    return InputError(Problem(message, path=str(path), field="--rubric"))


def load_rubric(path: Path | str) -> Rubric:
    """Read and check a rubric file (module docstring).

    Raises:
        InputError: unreadable, not TOML, or a missing or bad field (the message names it).
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise _problem(f"cannot read the rubric: {e.strerror or e}", path) from None
    if len(data) > _MAX_RUBRIC_BYTES:
        raise _problem(f"a rubric file is at most {_MAX_RUBRIC_BYTES} bytes", path)
    try:
        doc = parse_toml(data.decode("utf-8"))
    except (TomlError, UnicodeDecodeError) as e:
        raise _problem(f"not a TOML rubric: {e}", path) from None
    raw_criteria = doc.get("criteria")
    if not isinstance(raw_criteria, list) or not raw_criteria:
        raise _problem("`criteria` must be a non-empty list (strings or {text, pattern} tables)", path)
    criteria, patterns = [], []
    for i, c in enumerate(raw_criteria, start=1):
        if isinstance(c, str):
            c = {"text": c}
        if not isinstance(c, Mapping) or not isinstance(c.get("text"), str) or not c["text"].strip():
            raise _problem(f"criterion {i}: expected a string or a table with `text`", path)
        pattern = c.get("pattern")
        try:
            patterns.append(re.compile(pattern, re.I) if isinstance(pattern, str) else None)
        except re.error as e:
            raise _problem(f"criterion {i}: bad pattern: {e}", path) from None
        criteria.append(Criterion(c["text"].strip(), pattern if isinstance(pattern, str) else None))
    examples = doc.get("examples") or []
    if not isinstance(examples, list) or not all(isinstance(e, Mapping) for e in examples):
        raise _problem("`examples` must be an array of tables ([[examples]] with answer, score, reasoning)", path)
    try:
        scale = float(doc.get("scale", 5))
        metric = CustomMetric(
            name=metric_name("rubric", str(doc.get("name") or "")),
            kind="rubric",
            direction=doc.get("direction", "higher"),
            scale=scale,
            margin=float(doc.get("margin", scale / 10)),
            gated=bool(doc.get("gated", True)),
            version=source_version(data),
            source=str(path),
        )
    except (TypeError, ValueError) as e:
        raise _problem(str(e), path) from None
    return Rubric(metric, str(doc.get("description") or ""), tuple(criteria), tuple(dict(e) for e in examples),
                  tuple(patterns))


@dataclass(frozen=True)
class PythonScorer:
    metric: CustomMetric
    fn: Callable[[dict[str, Any]], Any]

    def score(self, record: Mapping[str, Any]) -> float | None:
        """The scorer's value for one record.

        Raises:
            InputError: it raised, or returned something that is not a number on its scale.
        """
        try:
            value = self.fn(dict(record))
        except Exception as e:  # noqa: BLE001 - the user's code: say where, as the target loader does
            raise InputError(Problem(f"{self.metric.name} ({self.metric.source}) raised on case "
                                     f"{record.get(Rec.CASE_ID)}: {type(e).__name__}: {e}", field="--scorer")) from None
        try:
            return check_value(self.metric, value)
        except ValueError as e:
            raise InputError(Problem(str(e), field="--scorer")) from None


def load_scorer(spec: str, *, name: str | None = None, direction: str = "higher", scale: float = 1.0,
                margin: float | None = None, gated: bool = True) -> PythonScorer:
    """A Python scorer from `python:module:function` (or `python:file.py:function`); its name
    defaults to the function's.

    Raises:
        InputError: a bad spec, an import failure, a bad name or definition.
    """
    from evalkit.targets.python import load_callable

    body = spec.removeprefix("python:")
    if body == spec:
        raise InputError(Problem(f"expected python:package.module:function, got {spec!r}", field="--scorer"))
    fn, _module = load_callable(body)
    try:
        code = inspect.getsource(fn).encode("utf-8")
    except (OSError, TypeError):
        code = body.encode("utf-8")
    try:
        metric = CustomMetric(name=metric_name("scorer", name or getattr(fn, "__name__", "")), kind="scorer",
                              direction=direction, scale=float(scale),  # type: ignore[arg-type]
                              margin=float(margin if margin is not None else scale * 0.05), gated=gated,
                              version=source_version(code), source=spec)
    except (TypeError, ValueError) as e:
        raise InputError(Problem(str(e), field="--scorer")) from None
    return PythonScorer(metric, fn)


def judged_by(rubrics: Sequence[Rubric], llm: Any = None) -> list[Rubric]:
    """The rubrics with their metric's `judge` named: `llm`'s name, or "heuristic" without one
    (two runs whose rubric different judges scored are not compared on it)."""
    judge = getattr(llm, "name", "llm") if llm is not None else "heuristic"
    return [dataclasses.replace(x, metric=dataclasses.replace(x.metric, judge=judge)) for x in rubrics]


def score_records(
    records: Sequence[dict[str, Any]], rubrics: Sequence[Rubric] = (), scorers: Sequence[PythonScorer] = (),
    *, llm: Any = None, concurrency: int = 4, samples: int = 1,
) -> list[CustomMetric]:
    """Score every record with each rubric and scorer, in place (`record["custom_scores"]`);
    return the metrics scored. A record the target failed on (`error`) is not scored (null).
    `llm`: an LLMJudge for the rubrics, None for the offline heuristic; `samples`
    (`--judge-samples`): an LLM rubric judge asked that many times per record, each sample cached
    apart, the score their mean (the samples in `record["custom_samples"]`). (`ascore_records`
    inside an event loop: run_eval's.)"""
    return asyncio.run(ascore_records(records, rubrics, scorers, llm=llm, concurrency=concurrency, samples=samples))


async def ascore_records(
    records: Sequence[dict[str, Any]], rubrics: Sequence[Rubric] = (), scorers: Sequence[PythonScorer] = (),
    *, llm: Any = None, concurrency: int = 4, samples: int = 1,
) -> list[CustomMetric]:
    """`score_records`, awaited."""
    rubrics = judged_by(rubrics, llm)
    for r in records:
        scores = r.get(CUSTOM_SCORES)
        r[CUSTOM_SCORES] = dict(scores) if isinstance(scores, Mapping) else {}
    live = [r for r in records if not r.get("error")]
    for r in records:
        if r.get("error"):
            for m in [*(x.metric for x in rubrics), *(s.metric for s in scorers)]:
                r[CUSTOM_SCORES][m.name] = None
    for scorer in scorers:
        for r in live:
            r[CUSTOM_SCORES][scorer.metric.name] = scorer.score(r)
    for rubric in rubrics:
        if llm is None:
            for r in live:
                r[CUSTOM_SCORES][rubric.metric.name] = rubric.heuristic_score(str(r.get("answer") or ""))[0]
        else:
            await _judge_all(rubric, llm, live, concurrency, max(1, samples))
    return [*(x.metric for x in rubrics), *(s.metric for s in scorers)]


async def _judge_all(rubric: Rubric, llm: Any, records: Sequence[dict[str, Any]], concurrency: int,
                     samples: int = 1) -> None:
    gate = asyncio.Semaphore(max(1, concurrency))

    async def once(r: dict[str, Any], trial: int) -> tuple[float | None, dict[str, Any]]:
        async with gate:
            return await rubric.judge(llm, r, trial)

    async def one(r: dict[str, Any]) -> None:
        outs = await asyncio.gather(*(once(r, t) for t in range(samples)))
        got = [v for v, _ in outs if v is not None]
        # the mean of the samples the judge scored (a failed sample is left out, never a 0)
        value = math.fsum(got) / len(got) if got else None
        meta = next((m for v, m in outs if v is None), {})
        r[CUSTOM_SCORES][rubric.metric.name] = value
        kept = {k: v for k, v in (r.get(CUSTOM_SAMPLES) or {}).items() if k != rubric.metric.name}
        if samples > 1:
            kept[rubric.metric.name] = [v for v, _ in outs]
        if kept:
            r[CUSTOM_SAMPLES] = kept
        else:
            r.pop(CUSTOM_SAMPLES, None)
        errors = {k: v for k, v in (r.get(CUSTOM_ERRORS) or {}).items() if k != rubric.metric.name}
        if value is None:  # why it has no score, as a built-in judge's failure is kept (never a 0)
            errors[rubric.metric.name] = {k: meta.get(k) for k in ("reason", "detail") if meta.get(k) is not None}
        if errors:
            r[CUSTOM_ERRORS] = errors
        else:
            r.pop(CUSTOM_ERRORS, None)

    await asyncio.gather(*(one(r) for r in records))


def project_custom(start: Path | None = None) -> tuple[list[Rubric], list[PythonScorer]]:
    """The rubrics and scorers evalkit.toml declares:

        [[rubrics]]
        file = "rubrics/helpfulness.toml"     # relative to evalkit.toml

        [[scorers]]
        spec = "python:my_checks:cites_a_note"
        name = "cites"                        # default: the function's name
        direction = "higher"                  # default higher; scale 1; margin 5% of the scale
        scale = 1
        margin = 0.05
        gated = true

    Raises:
        BadConfig / InputError: an unreadable evalkit.toml, a bad entry, a rubric or scorer
            that does not load.
    """
    from evalkit.project import read_project_config

    found = read_project_config(start)
    if found is None:
        return [], []
    path, doc = found
    rubrics, scorers = [], []
    for i, entry in enumerate(doc.get("rubrics") or [], start=1):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("file"), str):
            raise InputError(Problem(f"[[rubrics]] entry {i}: expected file = \"path/to/rubric.toml\"", path=str(path)))
        rubrics.append(load_rubric(path.parent / entry["file"]))
    for i, entry in enumerate(doc.get("scorers") or [], start=1):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("spec"), str):
            raise InputError(Problem(f"[[scorers]] entry {i}: expected spec = \"python:module:function\"", path=str(path)))
        scorers.append(scorer_from_entry(entry))
    return rubrics, scorers


def scorer_from_entry(entry: Mapping[str, Any]) -> PythonScorer:
    """A scorer from an evalkit.toml `[[scorers]]` table (`project_custom`)."""
    scale = entry.get("scale", 1.0)
    return load_scorer(str(entry["spec"]), name=entry.get("name"), direction=str(entry.get("direction", "higher")),
                       scale=scale, margin=entry.get("margin"), gated=bool(entry.get("gated", True)))


def load_custom(rubric_files: Sequence[Path | str] = (), scorer_specs: Sequence[str] = (), *,
                project: bool = False) -> tuple[list[Rubric], list[PythonScorer]]:
    """The rubrics and scorers `--rubric FILE` / `--scorer python:...` name (a scorer's
    direction, scale and margin from evalkit.toml's `[[scorers]]` entry with the same spec),
    plus, with `project` (`--custom`), every one evalkit.toml declares. The one reader behind
    `evalkit score` and `evalkit run`.

    Raises:
        InputError / BadConfig: a rubric or scorer that does not load, a bad evalkit.toml.
    """
    from evalkit.project import read_project_config

    rubrics = [load_rubric(p) for p in rubric_files]
    declared = (read_project_config() or (None, {}))[1].get("scorers") or [] if scorer_specs else []
    by_spec = {e.get("spec"): e for e in declared if isinstance(e, Mapping)}
    scorers = [scorer_from_entry(by_spec.get(spec) or {"spec": spec}) for spec in scorer_specs]
    if project:
        more_rubrics, more_scorers = project_custom()
        rubrics += more_rubrics
        scorers += more_scorers
    return rubrics, scorers


def rubric_llm(settings: Any) -> Any:
    """The LLM judge a rubric is sent to: the judge `settings` (a JudgeSettings) name, or None
    for the offline heuristic (`--judge-provider heuristic`, or no judge configured)."""
    from evalkit.judges.settings import build_judge

    judge = build_judge(settings)
    return None if getattr(judge, "heuristic", False) else judge
