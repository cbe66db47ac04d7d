"""The Target protocol and what every target shares: request shaping and response checking.

A target is the system under test behind the /api/v1/ask contract (DESIGN.md §5).
Its only expected failure is `TargetError`, which the runner records per case;
anything else escaping `ask()` is a bug and should crash loudly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError

from evalkit.errors import TargetError
from evalkit.schema import AskRequest, AskResponse, IndexingCoverage

__all__ = [
    "AskResult",
    "Target",
    "field_path",
    "find_missing_fields",
    "format_validation_error",
    "parse_ask_response",
    "request_body",
    "request_dict",
]

# Every field of the contract a complete implementation returns (DESIGN.md §5),
# including the ones marked optional there: missing_fields reports what a partial
# implementation left out, so the user sees what their metrics are blind to.
_REFERENCE_FIELDS = ("chunk_id", "rel_path", "heading_path", "start_line", "end_line")
_CHUNK_FIELDS = (
    "chunk_id",
    "rel_path",
    "heading_path",
    "start_line",
    "end_line",
    "score_vector",
    "score_lexical",
    "score_final",
    "text",
    "rank",
    "token_count",
)
_VERSION_FIELDS = (
    "index_build_version",
    "retriever_version",
    "answerer_version",
    "llm_model",
    "embedding_model",
    "chunker_version",
)


@dataclass
class AskResult:
    """One validated answer from a target.

    Attributes:
        response: the validated response (unknown fields kept as extras).
        missing_fields: contract fields absent from the raw response, as paths
            like "debug.retrieved_chunks[].score_lexical"; empty for a full implementation.
        server_timings_ms: the server's own folder_selection / retrieval / generation
            timings when it gave them.
        attempts: HTTP tries it took (1 = no retry).
        elapsed_ms: wall time of the successful try alone, without rate-limit or
            backoff waits; None when the target cannot tell.
        logged_total_ms: the latency a replayed log recorded for this answer; the
            runner reports it as the case's total_ms (its own replay time means nothing).
        raw: the decoded response as the target sent it, before validation (for
            --response-schema; not stored). None when a target built the result itself.
    """

    response: AskResponse
    missing_fields: list[str] = field(default_factory=list)
    server_timings_ms: dict[str, float] = field(default_factory=dict)
    attempts: int = 1
    elapsed_ms: float | None = None
    logged_total_ms: float | None = None
    raw: Mapping[str, Any] | None = None


@runtime_checkable
class Target(Protocol):
    """The system under test. Implementations: HttpTarget, CallableTarget, ReplayTarget,
    ReferenceTarget."""

    name: str

    async def ask(self, request: AskRequest, *, case_id: str | None = None) -> AskResult:
        """Answer one question. Raises TargetError only. `case_id` helps replay match."""
        ...

    async def index_stats(self) -> IndexingCoverage | None:
        """The indexing_coverage object, or None when unsupported. Never raises."""
        ...

    def describe(self) -> dict:
        """What config.json records about the target. Never contains a secret."""
        ...

    async def aclose(self) -> None:
        """Release connections and threads the target owns."""
        ...


def request_body(request: AskRequest, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON body of POST /api/v1/ask: the request without `debug` (a query parameter).

    Free `--param key=value` options go into `options`; the request's own options win.
    """
    body = request.model_dump(mode="json", exclude={"debug"})
    body["options"] = {**(params or {}), **body.get("options", {})}
    # A single question's body stays as it was before conversations (DESIGN.md §10).
    for key in ("history", "conversation_id"):
        if body.get(key) is None:
            body.pop(key, None)
    return body


def request_dict(request: AskRequest, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The request as an in-process target receives it: the JSON body plus "debug": True."""
    return {**request_body(request, params), "debug": True}


def field_path(loc: Sequence[Any]) -> str:
    """Pydantic's loc as a path: ("debug", "retrieved_chunks", 0, "rel_path") ->
    "debug.retrieved_chunks[0].rel_path"."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def format_validation_error(exc: ValidationError, limit: int = 5) -> str:
    """'answer: Field required; debug.retrieved_chunks[0].rel_path: ...' from pydantic's locs."""
    parts = []
    for err in exc.errors()[:limit]:
        parts.append(f"{field_path(err.get('loc', ())) or '(root)'}: {err.get('msg', 'invalid')}")
    more = len(exc.errors()) - limit
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def _absent(obj: Mapping[str, Any], key: str) -> bool:
    # A leaf sent as null is implemented but empty (no LLM -> llm_model: null); only
    # a key left out counts. Containers are checked for their type by the callers.
    return key not in obj


def find_missing_fields(raw: Mapping[str, Any], request: AskRequest | None = None) -> list[str]:
    """Contract fields a raw response left out, judged on the raw JSON, not the defaults.

    A leaf counts as missing when its key is absent (null = implemented, no value); a
    section (`debug`, `references`, `retrieved_chunks`, `folder_selection`,
    `timings_ms`, `versions`) when it is absent or null. Parents hide their children:
    without `debug`, the debug sections are listed but not their leaves. Fields that
    only make sense in some modes are expected only then: folder selection when
    folder_mode is not "off", `abstain_reason` when `abstained` is true,
    `fallback_used` under "on_with_fallback". A per-item field
    ("references[].start_line") is listed once if any item lacks it.

    Args:
        raw: the response JSON object as received.
        request: the request it answers (for the folder mode); None = assume "off".

    Returns:
        Field paths, in contract order.
    """
    mode = request.folder_mode if request is not None else "off"
    missing: list[str] = []
    if not isinstance(raw.get("references"), list):
        missing.append("references")
    else:
        missing += _missing_in_items(raw["references"], _REFERENCE_FIELDS, "references[]")
    if _absent(raw, "abstained"):
        missing.append("abstained")
    elif raw.get("abstained") is True and _absent(raw, "abstain_reason"):
        missing.append("abstain_reason")

    sections = ["retrieved_chunks", "timings_ms", "versions"]
    if mode != "off":
        sections.insert(1, "folder_selection")
    debug = raw.get("debug")
    if not isinstance(debug, Mapping):
        return [*missing, "debug", *(f"debug.{s}" for s in sections)]

    if not isinstance(debug.get("retrieved_chunks"), list):
        missing.append("debug.retrieved_chunks")
    else:
        missing += _missing_in_items(debug["retrieved_chunks"], _CHUNK_FIELDS, "debug.retrieved_chunks[]")
    if mode != "off":
        fs = debug.get("folder_selection")
        if not isinstance(fs, Mapping):
            missing.append("debug.folder_selection")
        else:
            wanted = ["mode", "selected_folders"] + (["fallback_used"] if mode == "on_with_fallback" else [])
            missing += [f"debug.folder_selection.{k}" for k in wanted if _absent(fs, k)]
    timings = debug.get("timings_ms")
    if not isinstance(timings, Mapping):
        missing.append("debug.timings_ms")
    else:
        wanted = (["folder_selection"] if mode != "off" else []) + ["retrieval", "generation"]
        missing += [f"debug.timings_ms.{k}" for k in wanted if _absent(timings, k)]
    versions = debug.get("versions")
    if not isinstance(versions, Mapping):
        missing.append("debug.versions")
    else:
        missing += [f"debug.versions.{k}" for k in _VERSION_FIELDS if _absent(versions, k)]
    return missing


def _missing_in_items(items: Any, fields: Sequence[str], prefix: str) -> list[str]:
    if not isinstance(items, list):
        return []
    dicts = [it for it in items if isinstance(it, Mapping)]
    if not dicts:
        return []
    # A field is missing when some item lacks its key: not among the keys all items share.
    shared = set(dicts[0]).intersection(*dicts[1:])
    return [f"{prefix}.{f}" for f in fields if f not in shared]


def parse_ask_response(raw: Any, request: AskRequest | None = None, *, source: str = "response") -> AskResult:
    """Validate a decoded response and note what it left out.

    Args:
        raw: the decoded JSON (or a dict from an in-process target).
        request: the request it answers, for mode-dependent missing fields.
        source: what produced it, for error messages ("response", "callable", "log line").

    Raises:
        TargetError: kind "invalid_response", naming the failing field paths.
    """
    if not isinstance(raw, Mapping):
        raise TargetError("invalid_response", f"{source} is not an object (got {_json_type(raw)})")
    try:
        response = AskResponse.model_validate(raw)
    except ValidationError as e:
        raise TargetError("invalid_response", f"{source} failed validation: {format_validation_error(e)}") from None
    timings: dict[str, float] = {}
    if response.debug is not None and response.debug.timings_ms is not None:
        for key, value in response.debug.timings_ms.model_dump().items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                timings[key] = float(value)
    return AskResult(
        response=response, missing_fields=find_missing_fields(raw, request), server_timings_ms=timings, raw=raw
    )


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__
