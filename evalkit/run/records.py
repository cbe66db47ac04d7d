"""One results.jsonl record per case: the request, the record, its key and place in the file, the
version tuple, the selection.

Pure functions over plain dicts and the schema models; no I/O. Retrieval metrics are
computed on the full chunk text before it is cut to 200 characters for storage. A record
stays bounded whatever the target returns: chunks up to the largest K (by rank),
references up to max(100, K), and the answer cut for storage once it has been judged
(EVAL.md "The runner", record size).
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from functools import cache
from typing import Any

from evalkit.config import LIST_STORE_ITEMS, TRUNCATE_CHARS, RunSettings, stored_answer
from evalkit.errors import BadConfig, Problem, TargetError, redact_data
from evalkit.evalset.load import CaseKey, EvalSet
from evalkit.schema import SCHEMA_VERSION, AskRequest, EvalCase, Reference, RerankWeights, RetrievedChunk
from evalkit.store.runlog import Rec

__all__ = [
    "Selection",
    "WorkList",
    "build_record",
    "build_request",
    "error_record",
    "record_key",
    "run_order",
    "select_cases",
    "select_indices",
    "versions_tuple",
]


def select_indices(
    keys: Sequence[CaseKey],
    *,
    ids: Sequence[str] | None = None,
    tags: Sequence[str] = (),
    categories: Sequence[str] = (),
    limit: int | None = None,
) -> list[int]:
    """The positions of the cases to run, in eval-set order. `keys` are the cases or only
    what selection reads of them (`EvalSet.keys`: id, tags, category), so a stored set's
    cases are not rebuilt to be selected.

    Filters combine with AND; values inside one filter with OR. `limit` applies last.

    Raises:
        BadConfig: an id in `ids` that is not in the eval set, or nothing left to run.
    """
    chosen: list[int] = list(range(len(keys)))
    if ids:
        known = {keys[i].id for i in chosen}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise BadConfig([Problem(f"no case with id {i!r} in the eval set", field="--ids") for i in unknown])
        wanted = set(ids)
        chosen = [i for i in chosen if keys[i].id in wanted]
    if tags:
        wanted_tags = set(tags)
        chosen = [i for i in chosen if wanted_tags.intersection(keys[i].tags)]
    if categories:
        wanted_cats = set(categories)
        chosen = [i for i in chosen if keys[i].category in wanted_cats]
    if limit is not None:
        chosen = chosen[:limit]
    if not chosen:
        what = ", ".join(
            f"{flag} {', '.join(vals)}" for flag, vals in (("--tag", tags), ("--category", categories)) if vals
        )
        raise BadConfig(Problem(f"no case of the eval set matches {what or 'the selection'}"))
    return chosen


class Selection(Sequence[tuple[int, str]]):
    """The selected cases as (position in the eval set, case id) pairs, in order, held as
    positions beside the set's own id list: 8 bytes a case, not a tuple each."""

    def __init__(self, indices: Iterable[int], ids: Sequence[str]) -> None:
        self.indices = array("q", indices)
        self.ids = ids

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, n: int) -> tuple[int, str]:  # type: ignore[override]
        i = self.indices[n]
        return i, self.ids[i]


class WorkList(Sequence[tuple[int, str, int]]):
    """What a run asks, as (position in the eval set, case id, trial), in results.jsonl
    order: trial-major (every case once, then again), so the N answers to one question are
    spread over the run rather than sent at once, where a chatbot's own cache or a burst of
    load would make them look alike. Held as positions in that order: a range when
    nothing is left out, 8 bytes an item otherwise (a resume)."""

    def __init__(self, selected: Selection, trials: int, done: Container[tuple[str, int]] = ()) -> None:
        self.selected = selected
        everything = range(len(selected) * trials)
        self.positions: Sequence[int] = (
            array("q", (w for w in everything if self._key(w) not in done)) if done else everything
        )

    def _key(self, w: int) -> tuple[str, int]:
        n = len(self.selected)
        return self.selected.ids[self.selected.indices[w % n]], w // n + 1

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, k: int) -> tuple[int, str, int]:  # type: ignore[override]
        w = self.positions[k]
        n = len(self.selected)
        i, case_id = self.selected[w % n]
        return i, case_id, w // n + 1


def record_key(record: Mapping[str, Any]) -> tuple[str, int]:
    """A record's identity in its run: (test_case_id, trial); trial 1 when the run has no trials."""
    trial = record.get("trial")
    return record.get(Rec.CASE_ID), trial if type(trial) is int else 1


def run_order(record: Mapping[str, Any]) -> tuple[int, int]:
    """Where a record belongs in results.jsonl: trial, then eval-set position (see `WorkList`)."""
    return record_key(record)[1], record.get(Rec.CASE_INDEX, 0)


def select_cases(
    cases: Sequence[EvalCase],
    *,
    ids: Sequence[str] | None = None,
    tags: Sequence[str] = (),
    categories: Sequence[str] = (),
    limit: int | None = None,
) -> list[tuple[int, EvalCase]]:
    """`select_indices` as (index in the set, case) pairs.

    Raises:
        BadConfig: as select_indices.
    """
    return [(i, cases[i]) for i in select_indices(cases, ids=ids, tags=tags, categories=categories, limit=limit)]


# --------------------------------------------------------------------------- records


def build_request(case: EvalCase, settings: RunSettings, *, history: list[dict[str, Any]] | None = None) -> AskRequest:
    """The /api/v1/ask request for one case (K = the largest --k).

    The case's `vaults` / `folders` / `collection` are sent only as `--send-scope` says
    (default none): they are written from the gold labels, so a filter built from them
    tells the chatbot where the answer is. The collection (seed 002's, kept by the GNO
    importer) goes as `options.collection`, the contract's free options, as GNO's search
    takes it; a case without one sends none. A conversation's turn sends `history` (the
    turns before it, as --history makes them) and the conversation's id, unless --history
    none (DESIGN.md §10).
    """
    scope = settings.scope_sent
    options = dict(settings.params)
    if "collection" in scope:
        collection = case_collection(case)
        if collection is not None:
            options["collection"] = collection
    return AskRequest(
        question=case.question,
        k=settings.request_k,
        folder_mode=settings.folder_mode,
        vaults=list(case.vaults) if "vaults" in scope else [],
        folders=list(case.folders) if "folders" in scope else [],
        rerank_weights=RerankWeights(vector=settings.rerank_vector_weight, lexical=settings.rerank_lexical_weight),
        options=options,
        debug=True,
        history=history,
        conversation_id=case.conversation.id if case.conversation is not None and history is not None else None,
    )


def case_collection(case: EvalCase) -> str | None:
    """The case's `collection` (an eval-set field kept as given, e.g. by the GNO importer),
    or None when it has none."""
    value = (case.model_extra or {}).get("collection")
    return value.strip() if isinstance(value, str) and value.strip() else None


def dump_model(obj: Any) -> Any:
    if obj is None:
        return None
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    return dict(obj)


def _ranked_chunks(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chunks (plain dicts, the caller's own) in rank order, each with a 1-based `rank` (list
    position when absent).

    A chunk without a rank takes its list position, then all are sorted by rank (stable:
    ties keep list order), so the first K here are the top K the metrics score.
    """
    in_order = True
    last = 0
    for pos, d in enumerate(chunks, start=1):
        rank = d.get("rank")
        if rank is None:
            d["rank"] = rank = pos
        if in_order and rank < last:
            in_order = False
        last = rank
    return list(chunks) if in_order else sorted(chunks, key=lambda d: d["rank"])


# Locations and ids are kept whole: they are what anchors and re-scoring match on.
_KEEP_WHOLE = frozenset({"chunk_id", "rel_path", "heading_path"})
# Values with no string inside (exact types: a subclass goes through _cut_strings).
_SCALARS = frozenset({int, float, bool, type(None)})


def _cut_strings(value: Any) -> tuple[Any, bool]:
    """`value` with every string in it, at any depth, cut to 200 characters; and whether any was."""
    if isinstance(value, str):
        return (value[:TRUNCATE_CHARS], True) if len(value) > TRUNCATE_CHARS else (value, False)
    if isinstance(value, dict):
        pairs = [(k, _cut_strings(v)) for k, v in value.items()]
        return {k: v for k, (v, _) in pairs}, any(c for _, (_, c) in pairs)
    if isinstance(value, list):
        items = [_cut_strings(v) for v in value]
        return [v for v, _ in items], any(c for _, c in items)
    return value, False


def _stored(item: Mapping[str, Any], full_text: bool) -> tuple[dict[str, Any], bool]:
    """A chunk or reference as stored: every other string, nested ones too, cut to 200
    characters unless --store-full-text, so note text never lands in results.jsonl whole by
    a side door (a reference's `text`, an extra `content` or `metadata.body` field).
    Returns it and whether anything was cut."""
    out = dict(item)
    cut = False
    if not full_text:
        for key, value in out.items():
            if key in _KEEP_WHOLE:
                continue
            kind = type(value)
            if kind is str:
                # The common leaves decided here: _cut_strings' answer without its call and
                # tuple (a chunk has a dozen fields; this runs for every chunk of every case).
                if len(value) > TRUNCATE_CHARS:
                    out[key], cut = value[:TRUNCATE_CHARS], True
            elif kind not in _SCALARS:
                out[key], was_cut = _cut_strings(value)
                cut = cut or was_cut
    return out, cut


# A chunk or reference of AskResult.plain holds its model's declared fields (model_dump gives
# them all), of their declared types, then its extra fields.
_CHUNK_FIELDS = frozenset(RetrievedChunk.model_fields)
_REFERENCE_FIELDS = frozenset(Reference.model_fields)


def _stored_chunk(chunk: Mapping[str, Any], full_text: bool) -> dict[str, Any]:
    text = chunk.get("text") or ""
    if chunk.keys() == _CHUNK_FIELDS:
        # No extra field: its only string that is not kept whole is `text` (the others are
        # ids and locations, or numbers), so this is what _stored makes of it.
        out = dict(chunk)
        out["text"] = text[:TRUNCATE_CHARS] if not full_text else text
    else:
        out, _ = _stored({**chunk, "text": text}, full_text)
    out["text_truncated"] = not full_text and len(text) > TRUNCATE_CHARS
    out.setdefault("token_count", None)
    return out


def _stored_reference(reference: Mapping[str, Any], full_text: bool) -> dict[str, Any]:
    if reference.keys() == _REFERENCE_FIELDS:
        return dict(reference)  # ids, locations and line numbers only: nothing to cut
    return _stored(reference, full_text)[0]


# A trace step's fields kept in the record: what the step was, took in and gave back.
_TRACE_FIELDS = ("name", "input", "output")
# A dict key naming a secret: its value is never stored, whatever it looks like.
_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|passwd|authorization|credential)", re.IGNORECASE)


def _no_secrets(value: Any) -> Any:
    """`value` with values under secret-named keys replaced by "***", and every string redacted
    (errors.redact_data: the environment's secrets and key shapes)."""
    if isinstance(value, dict):
        value = {k: "***" if isinstance(k, str) and _SECRET_KEY.search(k) else _no_secrets(v) for k, v in value.items()}
    elif isinstance(value, list):
        value = [_no_secrets(v) for v in value]
    return redact_data(value) if isinstance(value, str) else value


def stored_traces(traces: Any, full_text: bool) -> tuple[list[dict[str, Any]], int]:
    """A target's `debug.traces` as a record keeps them: the first 100 steps, each as
    {name, input, output} (what the step's dict holds of them, null when absent), secrets
    redacted (never stored, --store-full-text or not), then every string in them cut to 200
    characters unless --store-full-text, as chunk text is. Returns them and how many steps
    were dropped (past 100, or not objects)."""
    if not isinstance(traces, list):
        return [], 0
    steps = [t for t in traces if isinstance(t, dict)]
    kept = []
    for step in steps[:LIST_STORE_ITEMS]:
        out = {field: _no_secrets(step.get(field)) for field in _TRACE_FIELDS}
        if not full_text:
            out = _cut_strings(out)[0]
        kept.append(out)
    return kept, len(traces) - len(kept)


def versions_tuple(
    settings: RunSettings,
    eval_set: EvalSet,
    target_versions: Mapping[str, Any] | None,
    judge_desc: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The experiment's version tuple (seed 000 "Versioning Strategy").

    The target's `debug.versions` come first; what it leaves out is built from the flags:
    index build = chunker + embedding model, retriever = target's retriever version +
    K + rerank weights + folder mode (e.g. "k5+rerank_70_30+folder_off"), answerer =
    the LLM model. judge_version is the judge's own version (None when retrieval-only).
    """
    tv = dict(target_versions or {})
    index_build = tv.get("index_build_version")
    if not index_build and (tv.get("chunker_version") or tv.get("embedding_model")):
        index_build = "+".join(
            p
            for p in (
                f"chunker_{tv['chunker_version']}" if tv.get("chunker_version") else None,
                f"embedding_{tv['embedding_model']}" if tv.get("embedding_model") else None,
            )
            if p
        )
    rerank = f"rerank_{round(settings.rerank_vector_weight * 100)}_{round(settings.rerank_lexical_weight * 100)}"
    flags = f"k{settings.request_k}+{rerank}+folder_{settings.folder_mode}"
    retriever = f"{tv['retriever_version']}+{flags}" if tv.get("retriever_version") else flags
    answerer = tv.get("answerer_version") or (f"llm_{tv['llm_model']}" if tv.get("llm_model") else None)
    judge_version = None
    if judge_desc and judge_desc.get("provider") is not None:
        judge_version = judge_desc.get("version") or ":".join(
            str(judge_desc.get(k)) for k in ("provider", "model", "prompt_version") if judge_desc.get(k)
        )
    return {
        "dataset_version": eval_set.version,
        "index_build_version": index_build,
        "retriever_version": retriever,
        "answerer_version": answerer,
        "judge_version": judge_version,
        "llm_model": tv.get("llm_model"),
        "embedding_model": tv.get("embedding_model"),
        "chunker_version": tv.get("chunker_version"),
    }


def record_config(settings: RunSettings, versions: Mapping[str, Any], judge_desc: Mapping[str, Any] | None) -> dict:
    jd = judge_desc or {}
    return {
        "k": settings.request_k,
        "ks": list(settings.k),
        "rerank_weights": {"vector": settings.rerank_vector_weight, "lexical": settings.rerank_lexical_weight},
        "folder_mode": settings.folder_mode,
        "llm_model": versions.get("llm_model"),
        "embedding_model": versions.get("embedding_model"),
        "judge_model": jd.get("model"),
        # describe() may give one version per judge kind; records hold one string.
        "judge_prompt_version": jd.get("prompt_version") if isinstance(jd.get("prompt_version"), str) else None,
        "judge_temperature": jd.get("temperature"),
        "dataset_version": versions.get("dataset_version"),
        "index_build_version": versions.get("index_build_version"),
        "retriever_version": versions.get("retriever_version"),
        "answerer_version": versions.get("answerer_version"),
    }


def _base_record(case_index: int, case: EvalCase, config: dict, coverage: dict | None) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        Rec.CASE_ID: case.id,
        Rec.CASE_INDEX: case_index,
        # A single question's case as before conversations: no `conversation: null`.
        "case": case.model_dump(mode="json", exclude=None if case.conversation is not None else {"conversation"}),
        "question": case.question,
        "answer": None,
        Rec.ANSWER_TRUNCATED: False,
        "answer_chars": None,
        "references": [],
        Rec.REFERENCES_DROPPED: 0,
        "retrieved_chunks": [],
        Rec.RETRIEVED_CHUNKS_DROPPED: 0,
        "folder_selection": None,
        "config": config,
        Rec.INDEXING_COVERAGE: coverage,
        "latency": {
            "total_ms": None,
            "folder_selection_ms": None,
            "retrieval_ms": None,
            "generation_ms": None,
            "judge_ms": None,
        },
        Rec.RETRIEVAL_METRICS: {},
        "expectations": None,  # issue 14: metrics/expectations.py (must_include ...), None without `expected`
        "latency_budget": None,  # issue 13: {budget_ms, source, latency_ms, score, within} or None
        Rec.GROUNDEDNESS: None,
        Rec.CORRECTNESS: None,
        "abstention": {"abstained": None, "hallucinated": None, "method": None, "reason": None, "confidence": None},
        "judge_input": None,
        "cost": {"judge_tokens": 0, "judge_cost_usd": 0.0},
        "error": None,
        Rec.JUDGE_ERRORS: [],
        Rec.MISSING_FIELDS: [],
        "attempts": None,
        "response_validity": None,  # {valid, errors, n_errors} with --response-schema (session.py)
    }


@cache
def _scorers() -> tuple[Callable[..., Any], ...]:
    """(score_case_retrieval, score_expectations, score_case_abstention, case_latency_budget),
    imported on first use (not at import: `--help` stays light) and looked up once, not by an
    import statement per record (about a microsecond each, four per record)."""
    from evalkit.metrics.abstention import score_case_abstention
    from evalkit.metrics.expectations import score_expectations
    from evalkit.metrics.latency import case_latency_budget
    from evalkit.metrics.retrieval import score_case_retrieval

    return score_case_retrieval, score_expectations, score_case_abstention, case_latency_budget


def _latency_budget(record: Mapping[str, Any], settings: RunSettings, *, failed: bool = False) -> dict | None:
    """The record's `latency_budget` (metrics.latency.case_latency_budget): the case's own
    constraints.latency_budget_ms, else --latency-budget-ms, against latency.total_ms."""
    case_latency_budget = _scorers()[3]
    return case_latency_budget(
        record["case"], record["latency"]["total_ms"], settings.latency_budget_ms, failed=failed
    )


def error_record(
    case_index: int,
    case: EvalCase,
    error: TargetError,
    *,
    settings: RunSettings,
    total_ms: float,
    config: dict,
    coverage: dict | None,
) -> dict[str, Any]:
    """The record of a case the target failed: the error, and retrieval scored on nothing.

    A system failure scores 0 on every applicable retrieval metric (and counts in the
    error rates); the case is kept so that n stays the eval set's size.
    """
    score_case_retrieval, score_expectations, _, _ = _scorers()
    record = _base_record(case_index, case, config, coverage)
    record["error"] = error.to_record()
    record["attempts"] = error.attempts
    record["latency"]["total_ms"] = round(total_ms, 3)
    # latency_budget stays None: a failed case has no answer's latency to judge (excluded, in n_errors).
    if settings.phase_budgets_ms:
        record["phase_budgets"] = None
    record[Rec.RETRIEVAL_METRICS] = score_case_retrieval(
        record["case"], [], [], None, settings.folder_mode, settings.k, require_snippets=settings.require_snippets
    )
    record["expectations"] = score_expectations(record["case"], [], None)
    return record


def build_record(
    case_index: int,
    case: EvalCase,
    result: Any,
    *,
    settings: RunSettings,
    total_ms: float,
    run_versions: Mapping[str, Any],
    judge_desc: Mapping[str, Any] | None,
    coverage: dict | None,
    eval_set: EvalSet,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One results.jsonl record from a target's AskResult (before judging).

    Only the top K chunks by rank (K = the largest --k) are scored, stored and given to
    the judges; `retrieved_chunks_dropped` counts the rest. Retrieval metrics are computed
    on their full text, before it is truncated for storage, and so are the case's
    expectations (must_include ..., on the chunks and the whole answer). Every reference counts for
    attribution; the first max(100, K) are stored and `references_dropped` counts the
    rest. The answer is kept whole when a judge follows (the judge runner cuts it once it
    has judged it) and cut for storage here in a retrieval-only run.

    Returns:
        The record and the top-K chunks with full text (the judges' context).
    """
    score_case_retrieval, score_expectations, score_case_abstention, _ = _scorers()
    # The answer as plain JSON data (AskResult.plain: the validated response's model_dump), so
    # every dict below is its own copy.
    response = result.plain
    debug = response["debug"]
    ranked = _ranked_chunks(debug["retrieved_chunks"] if debug is not None else [])
    chunks = ranked[: settings.request_k]
    references = response["references"]
    n_refs_stored = max(LIST_STORE_ITEMS, settings.request_k)
    folder_selection = debug["folder_selection"] if debug is not None else None
    own_versions = debug["versions"] if debug is not None else None
    versions = versions_tuple(settings, eval_set, own_versions, judge_desc) if own_versions else run_versions

    record = _base_record(case_index, case, record_config(settings, versions, judge_desc), coverage)
    answer = response["answer"]
    record["answer"] = answer
    if settings.retrieval_only:
        record.update(stored_answer(record))
    record["references"] = [_stored_reference(r, settings.store_full_text) for r in references[:n_refs_stored]]
    record[Rec.REFERENCES_DROPPED] = max(0, len(references) - n_refs_stored)
    record["retrieved_chunks"] = [_stored_chunk(c, settings.store_full_text) for c in chunks]
    record[Rec.RETRIEVED_CHUNKS_DROPPED] = len(ranked) - len(chunks)
    record["folder_selection"] = folder_selection
    record[Rec.MISSING_FIELDS] = list(result.missing_fields)
    record["attempts"] = getattr(result, "attempts", None)
    if debug is not None and debug.get("traces") is not None:
        # Only when the target sends traces: other records stay as they were.
        record[Rec.TRACES], record[Rec.TRACES_DROPPED] = stored_traces(debug["traces"], settings.store_full_text)
    timings = result.server_timings_ms or {}
    logged = getattr(result, "logged_total_ms", None)
    record["latency"].update(
        total_ms=round(logged if logged is not None else total_ms, 3),
        folder_selection_ms=timings.get("folder_selection"),
        retrieval_ms=timings.get("retrieval"),
        generation_ms=timings.get("generation"),
    )
    if getattr(result, "cached", False):
        record["latency"]["cached"] = True  # total_ms is the stored ask's (--task-cache), not this run's
    if not timings.keys() <= {"folder_selection", "retrieval", "generation"}:
        # the target's other phases (e.g. rerank): kept as `<phase>_ms`, aggregated per phase
        from evalkit.metrics.latency import extra_phases_ms

        record["latency"].update(extra_phases_ms(timings))
    record[Rec.RETRIEVAL_METRICS] = score_case_retrieval(
        record["case"],
        chunks,
        references,
        folder_selection,
        settings.folder_mode,
        settings.k,
        require_snippets=settings.require_snippets,
    )
    # On the full chunk text and the whole answer, before either is cut for storage.
    record["expectations"] = score_expectations(record["case"], chunks, answer)
    abstained = response["abstained"]
    if abstained is not None:
        record["abstention"].update(
            score_case_abstention(case.answerable, abstained),
            method="target",
            reason=response["abstain_reason"],
        )
    if not (answer or "").strip() and not abstained:
        record["error"] = {"kind": "empty_answer", "status": None, "detail": "the target returned an empty answer"}
    # An empty answer is the system's own answer, with a latency: it is judged against its budget.
    record["latency_budget"] = _latency_budget(record, settings)
    if settings.phase_budgets_ms:
        from evalkit.metrics.latency import case_phase_budgets

        record["phase_budgets"] = case_phase_budgets(record["latency"], settings.phase_budgets_ms)
    return record, chunks
