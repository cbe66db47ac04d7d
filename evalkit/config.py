"""RunSettings: every parameter of a run_eval run, with its default, in one validated model.

The CLI and `evalkit.run_eval()` both build a RunSettings from the values the user gave;
everything not given takes the default below. config.json stores the resolved settings
(`settings`) and the subset that can change results (`hashed`), whose hash is the
run's config_hash. Resume starts from the stored settings and applies only the values the
user gave again, so `--resume RUN_ID` alone reruns exactly the same configuration.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from evalkit.defaults import (  # noqa: F401  (the names this module has always offered)
    DEFAULT_EVAL_SET,
    DEFAULT_RESULTS_DIR,
    DEFAULT_VAULT,
    FLAG_OF_FIELD,
    TRUNCATE_CHARS,
    default_of,
    flag_of,
)
from evalkit.errors import BadConfig, Problem
from evalkit.gate.thresholds import Thresholds
from evalkit.project import read_project_config
from evalkit.schema import FolderMode
from evalkit.store.runlog import Rec
from evalkit.store.runs import run_id_problem

# What of a case's scope (its `vaults` / `folders`, seed 002's `collection`) goes into the
# request. A case's scope describes the question (for labeling, slicing and scope-miss
# analysis); sending it would hand the chatbot the answer's location, so nothing is sent
# unless asked. Stored as none | vaults | folders | both, "+collection" when the collection
# goes too: the values stored before `collection` existed keep their config_hash.
SCOPE_PARTS = ("vaults", "folders", "collection")

# Seed 000 §10, "Which evaluators to run": retrieval is scored from every answer (it costs
# nothing beyond the ask); the others are judges: groundedness, correctness, the abstention
# classifier (for answers whose target gives no `abstained`), the conflict judge of
# acknowledge_both cases, seed 002's answer quality (opt-in) and the context-relevance judge
# (opt-in: each retrieved chunk against the question, a retrieval number without gold).
EVALUATORS: tuple[str, ...] = (
    "retrieval", Rec.GROUNDEDNESS, Rec.CORRECTNESS, "abstention", "conflict", "answer_quality", "context_relevance",
)
OPT_IN_EVALUATORS: tuple[str, ...] = ("answer_quality", "context_relevance")
DEFAULT_EVALUATORS: tuple[str, ...] = tuple(n for n in EVALUATORS if n not in OPT_IN_EVALUATORS)

# What one results.jsonl record keeps of text a target or judge produced (EVAL.md "The
# runner", record size): beyond these, text is cut or items dropped, and the record says so.
ANSWER_STORE_CHARS = 20_000
CLAIM_STORE_CHARS = 500
LIST_STORE_ITEMS = 100  # claims, citation markers; references: max(this, largest K)

# Settings that can change a record or a metric. Everything else (where files go, how
# fast we ask, how we print, which baseline we gate against) is operational: it is stored
# in config.json but neither hashed nor checked on resume. The API URL is a location, not
# an identity: the same server may move ports between a run and its resume; the target's
# own `versions` identify what was evaluated.
RESULT_AFFECTING: tuple[str, ...] = (
    "target",
    "k",
    "folder_mode",
    "send_scope",
    "rerank_vector_weight",
    "rerank_lexical_weight",
    "params",
    "retrieval_only",
    "judge_provider",
    "judge_model",
    "judge_temperature",
    "require_snippets",
    "limit",
    "ids",
    "tag",
    "category",
    "seed",
)


# The gate's threshold defaults, read from the gate itself (help texts read them there too).
_GATE_DEFAULTS = Thresholds()


class RunSettings(BaseModel):
    """Every run_eval flag, resolved. Field names are the flags with `-` -> `_`.

    The defaults the CLI's help says are read from evalkit.defaults (plain values, so that
    `--help` says them without building this model)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    eval_set: list[str] = Field(default_factory=lambda: default_of("eval_set"), min_length=1)
    api_url: str | None = None
    target: str | None = None
    vault: str = default_of("vault")
    # Issue 26: the vault id the in-process reference chatbot serves (and puts into chunk ids);
    # None: the eval set's one vault under --send-scope vaults/both, else the folder's name.
    vault_id: str | None = None
    k: list[int] = Field(default_factory=lambda: default_of("k"), min_length=1)
    folder_mode: FolderMode = default_of("folder_mode")
    send_scope: str = default_of("send_scope")
    # Issue 40: what a conversation's later turn is sent as its history (DESIGN.md §10):
    # the chatbot's own earlier answers (live), the eval set's reference answers, or none.
    # Hashed only when not live, so runs without it keep their config_hash.
    history: Literal["live", "reference", "none"] = default_of("history")
    rerank_vector_weight: float = Field(default_of("rerank_vector_weight"), ge=0)
    rerank_lexical_weight: float = Field(default_of("rerank_lexical_weight"), ge=0)
    retrieval_only: bool = False
    # Issue 30: `--evaluators a,b,...`, a subset of EVALUATORS (retrieval is always scored);
    # None = DEFAULT_EVALUATORS. `--evaluators retrieval` is stored as retrieval_only. Hashed
    # only when set, so runs without it keep their config_hash.
    evaluators: list[str] | None = None
    judge_model: str | None = None
    judge_provider: str | None = None
    judge_base_url: str | None = None
    judge_temperature: float = Field(default_of("judge_temperature"), ge=0)
    allow_unpinned: bool = default_of("allow_unpinned")
    # Issue 13: seed 002's answer-quality judge; in the judge's identity (its prompt version), so hashed.
    answer_quality: bool = default_of("answer_quality")
    # Issue 42: `--judge-samples N`, the judge asked N times per answer (each sample cached apart), as
    # judge_answers does; config.json's `judge.trials` says it. And the project's own metrics scored
    # as the run ends (`--rubric FILE`, `--scorer python:...`): their definitions (with each one's
    # version) go into config.json's `custom_metrics` and its hash, so no field is hashed here.
    judge_trials: int = Field(default_of("judge_trials"), ge=1)
    rubric: list[str] = Field(default_factory=list)
    scorer: list[str] = Field(default_factory=list)
    no_cache: bool = default_of("no_cache")
    results_dir: str = default_of("results_dir")
    store_full_text: bool = False
    # Issue 43: seed 002's task cache, the target's answers in SQLite at this path (run/task_cache.py);
    # how answers are got, not what they are: not hashed.
    task_cache: str | None = default_of("task_cache")
    concurrency: int = Field(default_of("concurrency"), ge=1)
    # Issue 27: a sync python: target's calls in N worker processes (CPU-bound functions);
    # how calls are made, not what is asked: not hashed.
    target_processes: int | None = Field(default_of("target_processes"), ge=1)
    timeout: float = Field(default_of("timeout"), gt=0)
    retries: int = Field(default_of("retries"), ge=0)
    rps: float | None = Field(default_of("rps"), gt=0)
    params: dict[str, Any] = Field(default_factory=dict)
    limit: int | None = Field(None, ge=1)
    ids: list[str] | None = None
    tag: list[str] = Field(default_factory=list)
    category: list[str] = Field(default_factory=list)
    # Issue 30: categories the eval set may use beyond the built-in ones and evalkit.toml's
    # (`--categories installation,usage`); they decide what is valid, not a number: not hashed.
    categories: list[str] = Field(default_factory=list)
    run_id: str | None = None
    resume: str | None = None
    retry_errors: bool = False
    baseline: str | None = None
    regression_threshold_recall: float = Field(_GATE_DEFAULTS.recall, ge=0)
    regression_threshold_mrr: float = Field(_GATE_DEFAULTS.mrr, ge=0)
    regression_threshold_scope_miss: float = Field(_GATE_DEFAULTS.scope_miss, ge=0)
    regression_threshold_groundedness: float = Field(_GATE_DEFAULTS.groundedness, ge=0)
    regression_threshold_correctness: float = Field(_GATE_DEFAULTS.correctness, ge=0)
    regression_threshold_attribution: float = Field(_GATE_DEFAULTS.attribution, ge=0)
    regression_threshold_abstention: float = Field(_GATE_DEFAULTS.abstention, ge=0)
    regression_threshold_hallucination: float = Field(_GATE_DEFAULTS.hallucination, ge=0)
    regression_threshold_false_abstention: float = Field(_GATE_DEFAULTS.false_abstention, ge=0)
    # Issue 30: any other metric's threshold, `--regression-threshold NAME=VALUE` ({gate name:
    # largest worsening}; a gated metric's name sets its built-in one); the gate also within
    # each slice of `--gate-by` groupings whose n reaches --gate-min-n. Not hashed.
    regression_threshold: dict[str, float] = Field(default_factory=dict)
    gate_by: list[str] = Field(default_factory=list)
    gate_min_n: int = Field(_GATE_DEFAULTS.min_slice_n, ge=1)
    # Issue 13: absolute floors on this run's metrics ({"*": bare value, name: value});
    # like the regression thresholds they judge the numbers, never change them: not hashed.
    thresholds: dict[str, float] = Field(default_factory=dict)
    # Issue 13: latency budget per case (a case's constraints.latency_budget_ms wins); hashed
    # only when set, so runs without one keep their config_hash.
    latency_budget_ms: float | None = Field(None, gt=0)
    # Issue 30: budgets on the target's own phases (`debug.timings_ms`, e.g. rerank), from
    # `--latency-budget PHASE=MS`; hashed only when set.
    phase_budgets_ms: dict[str, float] = Field(default_factory=dict)
    # Issue 13: ask every case N times (Evalite's trialCount); each answer is a record with
    # its `trial`. Hashed only when > 1, so single-trial runs keep their config_hash.
    trials: int = Field(default_of("trials"), ge=1, le=100)
    # Issue 14: scenario suite file (evalkit/metrics/suite.py); it weighs metrics, never changes them: not hashed.
    suite: str | None = None
    max_error_rate: float = Field(default_of("max_error_rate"), ge=0, le=1)
    max_retry_wait: float = Field(default_of("max_retry_wait"), ge=0)
    max_response_bytes: int = Field(default_of("max_response_bytes"), ge=1024)
    no_probe: bool = default_of("no_probe")
    allow_regressions: bool = False
    # Issue 36: what decides the --baseline gate: the verdict (None: the verdict, or the
    # threshold gate when a threshold flag is set or the baseline has no per-case records),
    # and what not enough evidence exits with. They judge the numbers: not hashed.
    gate: Literal["verdict", "threshold"] | None = default_of("gate")
    on_inconclusive: Literal["exit-4", "pass", "fail"] = default_of("on_inconclusive")
    ignore_invariants: bool = False
    # Issue 25: a --baseline gate that could not compare Recall@K or MRR@K fails unless this.
    allow_missing_metrics: bool = False
    # Issue 30: the --baseline gate refuses a baseline whose notes or index differ (index stats).
    same_corpus: bool = False
    # Issue 36: the --baseline gate accepts a baseline holding the same cases with other gold labels.
    allow_label_change: bool = False
    # Issue 26: a run in which no retrieved chunk matched any gold support exits 2 unless this.
    allow_format_mismatch: bool = default_of("allow_format_mismatch")
    require_snippets: bool = False
    quiet: bool = default_of("quiet")
    json_output: bool = default_of("json_output")
    seed: int | None = None
    # Issue 13: structured-output validity (evalkit/metrics/validity.py). Hashed only when set, the
    # schema by its content (sha256), so runs without one keep their config_hash.
    response_schema: str | None = None
    response_field: str | None = None
    require_fields: list[str] = Field(default_factory=list)
    # Issue 15: run only shard I/N of the selected cases (evalkit/evalset/shard.py); I counts from 1
    # (issue 28; runs stored before hold a 0-based "I/N" here, so readers use config.json's `shard`).
    # Not hashed: every shard of one run shares its config_hash, which `evalkit merge` checks.
    shard: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _evaluator_flags(cls, data: Any) -> Any:
        # `--evaluators retrieval` is `--retrieval-only` (one stored form, one config_hash);
        # answer_quality listed is `--answer-quality`.
        if not isinstance(data, dict) or data.get("evaluators") is None:
            return data
        try:
            names = parse_evaluators(data["evaluators"])
        except ValueError:
            return data  # the field validator says what is wrong, naming --evaluators
        data = dict(data)
        judges = [n for n in names if n != "retrieval"]
        if not judges:
            data["retrieval_only"], data["evaluators"] = True, None
        elif data.get("retrieval_only"):
            raise ValueError(
                f"--retrieval-only runs no judge but --evaluators names {', '.join(judges)}; give one of them"
            )
        elif "answer_quality" in judges:
            data["answer_quality"] = True
        return data

    @field_validator("send_scope", mode="before")
    @classmethod
    def _send_scope(cls, v: Any) -> Any:
        # "folders,collection", "both+collection", ["vaults", "collection"] -> one stored form.
        if v is None:
            return v
        words = _comma_items(v, r"[,+]")
        if words is None:
            return v
        parts: set[str] = set()
        for word in (w.lower() for w in words):
            if word == "both":
                parts |= {"vaults", "folders"}
            elif word in SCOPE_PARTS:
                parts.add(word)
            elif word != "none":
                raise ValueError(
                    f"unknown scope {word!r}; expected none, vaults, folders, both, collection, or parts joined "
                    "by commas (folders,collection)"
                )
        if not parts:
            return "none"
        head = "both" if {"vaults", "folders"} <= parts else next((p for p in ("vaults", "folders") if p in parts), "")
        return "+".join(x for x in (head, "collection" if "collection" in parts else "") if x)

    @property
    def scope_sent(self) -> frozenset[str]:
        """What `send_scope` sends of a case: a subset of SCOPE_PARTS."""
        parts = set(self.send_scope.split("+")) - {"none"}
        if "both" in parts:
            parts = (parts - {"both"}) | {"vaults", "folders"}
        return frozenset(parts)

    @field_validator("phase_budgets_ms", mode="before")
    @classmethod
    def _phase_budgets(cls, v: Any) -> Any:
        # `--latency-budget rerank=200` (repeatable) or a dict from Python.
        from evalkit.metrics.latency import phase_budget_problem

        if v is None:
            return {}
        items = [v] if isinstance(v, str) else v
        pairs: list[tuple[Any, Any]] = []
        if isinstance(items, Mapping):
            pairs = list(items.items())
        elif isinstance(items, list | tuple):
            for item in items:
                phase, sep, ms = str(item).partition("=")
                if not sep:
                    raise ValueError(f"expected PHASE=MS, e.g. rerank=200, got {item!r}")
                pairs.append((phase, ms))
        else:
            return v
        out: dict[str, float] = {}
        for phase, ms in pairs:
            phase = str(phase).strip().lower()
            problem = phase_budget_problem(phase)
            if problem is not None:
                raise ValueError(f"{phase}: {problem}")
            try:
                value = float(str(ms).strip().removesuffix("ms")) if isinstance(ms, str) else float(ms)
            except (TypeError, ValueError):
                raise ValueError(f"{phase}: expected a number of ms, got {ms!r}") from None
            if not value > 0 or value == float("inf"):
                raise ValueError(f"{phase}: a budget must be a positive number of ms, got {ms!r}")
            out[phase] = value
        return out

    @field_validator("evaluators", mode="before")
    @classmethod
    def _evaluators(cls, v: Any) -> Any:
        return None if v is None else parse_evaluators(v)

    @property
    def judge_evaluators(self) -> tuple[str, ...]:
        """The judge evaluators this run runs, in EVALUATORS order; () when retrieval-only."""
        if self.retrieval_only:
            return ()
        on = set(DEFAULT_EVALUATORS if self.evaluators is None else self.evaluators)
        if self.answer_quality:
            on.add("answer_quality")
        return tuple(n for n in EVALUATORS[1:] if n in on)

    @field_validator("require_fields", mode="before")
    @classmethod
    def _field_list(cls, v: Any) -> Any:
        # `--require-fields a,b` (repeatable) or a list from Python.
        parts = _comma_items(v)
        return v if parts is None else parts

    @field_validator("shard", mode="before")
    @classmethod
    def _shard(cls, v: Any) -> Any:
        # "i/n" (1-based i) or a Shard; stored as "i/n". A BadConfig names the flag itself.
        if v is None:
            return v
        from evalkit.evalset.shard import parse_shard

        try:
            return str(parse_shard(v))
        except BadConfig as e:
            raise ValueError("; ".join(p.message for p in e.problems)) from None

    @field_validator("k")
    @classmethod
    def _ks(cls, v: list[int]) -> list[int]:
        bad = [k for k in v if k < 1]
        if bad:
            raise ValueError(f"K must be >= 1, got {bad[0]}")
        # Keep the first occurrence: the first --k is the primary K.
        return list(dict.fromkeys(v))

    @field_validator("eval_set", mode="before")
    @classmethod
    def _paths(cls, v: Any) -> Any:
        if isinstance(v, str | bytes) or hasattr(v, "__fspath__"):
            v = [v]
        return [str(p) for p in v] if isinstance(v, list | tuple) else v

    @field_validator("tag", "category", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("run_id", "resume", "baseline")
    @classmethod
    def _run_ids(cls, v: str | None, info: ValidationInfo) -> str | None:
        # Checked with the other flags, before anything is asked or written (store.RUN_ID_RULE);
        # `latest` may name the run to resume or gate against, never a new run.
        problem = None if v is None else run_id_problem(v, new=info.field_name == "run_id")
        if problem is not None:
            raise ValueError(problem)
        return v

    @field_validator("regression_threshold", mode="before")
    @classmethod
    def _regression_threshold(cls, v: Any) -> Any:
        # `--regression-threshold recall_frac=0.05` (repeatable), or a dict from Python.
        from evalkit.gate.thresholds import parse_regression_thresholds

        return parse_regression_thresholds(v)

    @field_validator("gate_by", mode="before")
    @classmethod
    def _gate_by(cls, v: Any) -> Any:
        from evalkit.gate.thresholds import parse_gate_by

        return parse_gate_by(v)

    @field_validator("categories", mode="before")
    @classmethod
    def _categories(cls, v: Any) -> Any:
        # `--categories installation,usage` (repeatable) or a list from Python.
        parts = _comma_items(v)
        return v if parts is None else list(dict.fromkeys(parts))

    @field_validator("thresholds", mode="before")
    @classmethod
    def _thresholds(cls, v: Any, info: ValidationInfo) -> Any:
        # `--threshold 0.7`, `--threshold name=0.8` (repeatable), a number or a dict from Python.
        from evalkit.gate.floors import parse_thresholds

        return parse_thresholds(v, info.data.get("k"))

    @field_validator("ids", mode="before")
    @classmethod
    def _ids(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [part.strip() for part in v.split(",")]
        if isinstance(v, list | tuple):
            return [str(x) for x in v if str(x).strip()] or None
        return v

    @property
    def primary_k(self) -> int:
        return self.k[0]

    @property
    def request_k(self) -> int:
        """K sent to the target: the largest K any metric needs."""
        return max(self.k)

    @property
    def in_process(self) -> bool:
        """True when neither --api-url nor --target is given: the reference chatbot runs here."""
        return not self.api_url and not self.target

    def hashed(self) -> dict[str, Any]:
        """The result-affecting settings (RESULT_AFFECTING), plus the vault for in-process runs."""
        out = {key: getattr(self, key) for key in RESULT_AFFECTING}
        out["target_kind"] = _target_kind(self)
        if self.in_process:
            out["vault"] = self.vault
            if self.vault_id is not None:  # it goes into every chunk id
                out["vault_id"] = self.vault_id
        if self.latency_budget_ms is not None:  # changes each record's latency_budget score
            out["latency_budget_ms"] = self.latency_budget_ms
        if self.phase_budgets_ms:  # each record's phase_budgets
            out["phase_budgets_ms"] = dict(self.phase_budgets_ms)
        if self.evaluators is not None:  # which verdicts each record holds
            out["evaluators"] = list(self.evaluators)
        if self.trials > 1:  # N answers per case: another run
            out["trials"] = self.trials
        if self.history != "live":  # what a conversation's later turns are sent
            out["history"] = self.history
        validity = response_validity_identity(self)
        if validity is not None:  # changes what response_validity measures
            out["response_validity"] = validity
        # Round-trip through JSON so a stored copy compares equal to a fresh one.
        return orjson.loads(orjson.dumps(out))

    def public_dump(self) -> dict[str, Any]:
        """Settings for config.json: every field, with credentials stripped from URLs."""
        out = self.model_dump(mode="json")
        for key in ("api_url", "judge_base_url"):
            if out.get(key):
                out[key] = redact_url(out[key])
        return out


def _comma_items(value: Any, sep: str = ",") -> list[str] | None:
    """A list flag's words: "a,b" (the flag given once, or repeated: a list of such) or a
    list from Python, split on `sep` (a regular expression), stripped, empty ones dropped;
    None when `value` is neither a string nor a list."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        return None
    return [part.strip() for item in items for part in re.split(sep, str(item)) if part.strip()]


def parse_evaluators(value: Any, allowed: Sequence[str] = EVALUATORS) -> list[str]:
    """`--evaluators` as a list: "retrieval,groundedness" (repeatable) or a list from Python;
    names are case-insensitive, returned once each in EVALUATORS order, with retrieval
    always in (it is scored from every answer).

    Raises:
        ValueError: an unknown name (the message lists the allowed ones), or none at all.
    """
    parts = _comma_items(value)
    if parts is None:
        raise ValueError(f"expected names separated by commas, got {value!r}")
    names = [part.lower().replace("-", "_") for part in parts]
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise ValueError(f"unknown evaluator {unknown[0]!r}; expected some of {', '.join(allowed)}")
    if not names:
        raise ValueError(f"names no evaluator; expected some of {', '.join(allowed)}")
    chosen = set(names) | ({"retrieval"} if "retrieval" in allowed else set())
    return [n for n in allowed if n in chosen]


def response_validity_identity(s: RunSettings) -> dict[str, Any] | None:
    """The hashed part of --response-schema / --response-field / --require-fields: the
    schema file's sha256 (None when unreadable: the run then stops on it), the fields and
    the path; None when no schema is asked for."""
    if s.response_schema is None and not s.require_fields:
        return None
    sha = None
    if s.response_schema is not None:
        import hashlib

        try:
            with open(s.response_schema, "rb") as f:
                sha = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            sha = None
    return {"schema_sha256": sha, "require_fields": list(s.require_fields), "field": s.response_field}


def _target_kind(s: RunSettings) -> str:
    if s.target:
        return s.target.split(":", 1)[0]
    return "http" if s.api_url else "reference"


def judge_identity(judge_desc: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The part of a judge's description that changes verdicts (goes into config_hash).

    Cache paths and endpoints do not: the same pinned model behind another URL judges alike.
    """
    if not judge_desc or judge_desc.get("provider") is None:
        return None
    keys = ("provider", "model", "prompt_version", "prompt_versions", "temperature", "heuristic", "version")
    return {k: judge_desc.get(k) for k in keys if k in judge_desc}


def redact_url(url: str) -> str:
    """Drop user:password@ from a URL; everything else is kept."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


# Run settings evalkit.toml's [run] may not set: they name one run (its id, the run to
# resume, its shard), or a folder the other commands would not see (results_dir: compare,
# judge and report take --results-dir and read no [run] table).
NOT_PROJECT_SETTINGS = frozenset({"run_id", "resume", "retry_errors", "shard", "results_dir"})


def project_run_defaults(start: Path | None = None) -> dict[str, Any]:
    """The `[run]` table of evalkit.toml: run_eval defaults for this project, checked.

    A flag given on the command line (or a keyword to `evalkit.run_eval`) wins over the
    table, and the table over the built-in default. Keys are RunSettings field names (a
    flag's name with `-` -> `_`). Not applied on --resume: a resumed run keeps its stored
    settings.

    Raises:
        BadConfig: an unknown or per-run key, or a value RunSettings refuses, each naming
            the file and `run.<key>`.
    """
    found = read_project_config(start)
    if found is None:
        return {}
    path, doc = found
    table = doc.get("run", {})
    if not isinstance(table, dict):
        raise BadConfig(Problem("expected a table ([run])", path=str(path), field="run"))
    problems = []
    for key in table:
        if key in NOT_PROJECT_SETTINGS:
            problems.append(Problem("names one run; give it as a flag instead", path=str(path), field=f"run.{key}"))
        elif key not in RunSettings.model_fields:
            close = difflib.get_close_matches(key, list(RunSettings.model_fields), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append(Problem(f"unknown setting{hint}", path=str(path), field=f"run.{key}"))
    try:
        RunSettings.model_validate({k: v for k, v in table.items() if k in RunSettings.model_fields})
    except ValidationError as e:
        problems += [
            Problem(err["msg"].removeprefix("Value error, "), path=str(path),
                    field="run." + ".".join(str(part) for part in err["loc"]))
            for err in e.errors()
        ]
    if problems:
        raise BadConfig(problems)
    return dict(table)


def build_settings(
    values: Mapping[str, Any], base: Mapping[str, Any] | None = None, *, base_path: str | None = None
) -> RunSettings:
    """Validate user-given values on top of `base` (stored settings on resume, else defaults).

    Args:
        base_path: the file `base` was read from (a run's config.json): a bad value that
            came from it, not from a flag, is said at that file's `settings.<name>`, since
            naming a flag the user never passed sends them to the wrong place.

    Raises:
        BadConfig: one problem per bad value, naming the flag (or the file and key).
    """
    given = {k for k, v in values.items() if v is not None}
    merged = {**(base or {}), **{k: v for k, v in values.items() if v is not None}}
    try:
        return RunSettings.model_validate(merged)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            name = str(err["loc"][0]) if err["loc"] else ""
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown setting"
            elif "input" in err and err["type"] != "value_error":
                # a value_error message already says what it got
                msg += f", got {err['input']!r}"
            if base_path is not None and name and name not in given and name in (base or {}):
                problems.append(Problem(f"{msg} (stored by the run: the file is damaged or was written by "
                                        "another evalkit)", path=base_path, field=f"settings.{name}"))
            else:
                problems.append(Problem(msg, field=flag_of(name) if name else None))
        raise BadConfig(problems) from None


def diff_hashed(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Keys whose values differ between two `hashed()` dicts, as readable lines."""
    lines = []
    defaults = {name: f.get_default(call_default_factory=True) for name, f in RunSettings.model_fields.items()}
    for key in sorted(set(stored) | set(current)):
        a, b = stored.get(key), current.get(key)
        if key not in stored and key in defaults and b == defaults[key]:
            continue  # a setting added after the run was made, at its default: nothing changed
        if a != b:
            lines.append(f"{key}: the run used {a!r}, now {b!r}")
    return lines


def stored_answer(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record's `answer`, `answer_truncated` and `answer_chars` as stored.

    The answer is cut to ANSWER_STORE_CHARS characters; `answer_chars` is the length of the
    answer the target returned. A record cut before (a stored run being re-judged) keeps
    its marker and length.
    """
    answer = record.get("answer")
    if not isinstance(answer, str):
        return {"answer": answer, Rec.ANSWER_TRUNCATED: False, "answer_chars": None}
    if record.get(Rec.ANSWER_TRUNCATED):
        truncated, chars = True, record.get("answer_chars")
    else:
        truncated, chars = len(answer) > ANSWER_STORE_CHARS, len(answer)
    return {"answer": answer[:ANSWER_STORE_CHARS], Rec.ANSWER_TRUNCATED: truncated, "answer_chars": chars}
