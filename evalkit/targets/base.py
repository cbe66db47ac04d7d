"""The Target protocol and what every target shares: request shaping and response checking.

A target is the system under test behind the /api/v1/ask contract (DESIGN.md §5).
Its only expected failure is `TargetError`, which the runner records per case;
anything else escaping `ask()` is a bug and should crash loudly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError

from evalkit.errors import TargetError
from evalkit.schema import AskRequest, AskResponse, IndexingCoverage, RerankWeights
from evalkit.store.runlog import Rec

__all__ = [
    "AskResult",
    "Target",
    "field_path",
    "find_missing_fields",
    "format_validation_error",
    "parse_ask_response",
    "plain_response",
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

# find_missing_fields' fast checks: a dict whose keys hold all of these lacks none of them.
_FIELD_SETS = {f: frozenset(f) for f in (_REFERENCE_FIELDS, _CHUNK_FIELDS, _VERSION_FIELDS)}


class AskResult:
    """One validated answer from a target.

    Attributes:
        response: the validated response (unknown fields kept as extras). When
            `parse_ask_response` proved the answer valid without pydantic (`plain_response`),
            it is built on first use, from `raw`.
        plain: the response as plain JSON data, exactly `response.model_dump(mode="json")`
            (what a record is built from); made without the model when the fast path could.
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
        cached: the answer came from the task cache; `logged_total_ms` is its stored latency.
    """

    # missing_fields is also the record's key (Rec.MISSING_FIELDS), spelled in one place
    __slots__ = ("_response", "_plain", Rec.MISSING_FIELDS, "server_timings_ms", "attempts", "elapsed_ms",
                 "logged_total_ms", "raw", "cached")

    def __init__(
        self,
        response: AskResponse | None = None,
        missing_fields: list[str] | None = None,
        server_timings_ms: dict[str, float] | None = None,
        attempts: int = 1,
        elapsed_ms: float | None = None,
        logged_total_ms: float | None = None,
        raw: Mapping[str, Any] | None = None,
        *,
        plain: dict[str, Any] | None = None,
    ) -> None:
        if response is None and (plain is None or raw is None):
            raise ValueError("an AskResult needs its response, or its plain form and the raw answer it came from")
        self._response = response
        self._plain = plain
        self.missing_fields = missing_fields if missing_fields is not None else []
        self.server_timings_ms = server_timings_ms if server_timings_ms is not None else {}
        self.attempts = attempts
        self.elapsed_ms = elapsed_ms
        self.logged_total_ms = logged_total_ms
        self.raw = raw
        self.cached = False  # answered from the task cache (run/task_cache.py): its latency is the stored one

    @property
    def response(self) -> AskResponse:
        if self._response is None:
            # The fast path checked `raw` field by field, so this validates as it did.
            self._response = AskResponse.model_validate(self.raw)
        return self._response

    @property
    def plain(self) -> dict[str, Any]:
        if self._plain is None:
            self._plain = self.response.model_dump(mode="json")
        return self._plain


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
    body = _plain_body(request)
    if body is None:
        body = request.model_dump(mode="json", exclude={"debug"})
    body["options"] = {**(params or {}), **body.get("options", {})}
    # A single question's body stays as it was before conversations (DESIGN.md §10).
    for key in ("history", "conversation_id"):
        if body.get(key) is None:
            body.pop(key, None)
    return body


def _plain_body(request: AskRequest) -> dict[str, Any] | None:
    """`request.model_dump(mode="json", exclude={"debug"})` built from its fields, for a request
    without history whose every value is one the answer's fast path vouches for (see
    `plain_response`); None for any other (model_dump makes it)."""
    rerank = request.rerank_weights
    if type(request) is not AskRequest or request.history is not None or type(rerank) is not RerankWeights:
        return None
    try:
        if type(request.k) is not int or type(rerank.vector) is not float or type(rerank.lexical) is not float:
            raise _UNSURE
        return {
            "question": _str(request.question),
            "k": request.k,
            "folder_mode": _str(request.folder_mode),
            "vaults": _str_list(request.vaults),
            "folders": _str_list(request.folders),
            "rerank_weights": {"vector": _opt_float(rerank.vector), "lexical": _opt_float(rerank.lexical)},
            "options": _extra(request.options),
            "history": None,
            "conversation_id": _opt_str(request.conversation_id),
        }
    except _Unsure:
        return None


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
    if type(debug) is not dict and not isinstance(debug, Mapping):
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
    if type(timings) is not dict and not isinstance(timings, Mapping):
        missing.append("debug.timings_ms")
    else:
        wanted = (["folder_selection"] if mode != "off" else []) + ["retrieval", "generation"]
        missing += [f"debug.timings_ms.{k}" for k in wanted if _absent(timings, k)]
    versions = debug.get("versions")
    if type(versions) is not dict and not isinstance(versions, Mapping):
        missing.append("debug.versions")
    else:
        if not (type(versions) is dict and versions.keys() >= _FIELD_SETS[_VERSION_FIELDS]):
            missing += [f"debug.versions.{k}" for k in _VERSION_FIELDS if _absent(versions, k)]
    return missing


def _missing_in_items(items: Any, fields: Sequence[str], prefix: str) -> list[str]:
    if not isinstance(items, list):
        return []
    # The usual answer: every item a dict holding every field (a C compare of key views per item).
    need = _FIELD_SETS[fields]
    if all(type(it) is dict and it.keys() >= need for it in items):
        return []
    dicts = [it for it in items if type(it) is dict or isinstance(it, Mapping)]
    if not dicts:
        return []
    # A field is missing when some item lacks its key: not among the keys all items share.
    shared = set(dicts[0]).intersection(*dicts[1:])
    return [f"{prefix}.{f}" for f in fields if f not in shared]


def parse_ask_response(raw: Any, request: AskRequest | None = None, *, source: str = "response") -> AskResult:
    """Validate a decoded response and note what it left out.

    An answer made of plain JSON values whose every contract field has exactly its type
    (`plain_response`) is taken without pydantic; anything else is validated by
    `AskResponse`, with the same result and the same errors.

    Args:
        raw: the decoded JSON (or a dict from an in-process target).
        request: the request it answers, for mode-dependent missing fields.
        source: what produced it, for error messages ("response", "callable", "log line").

    Raises:
        TargetError: kind "invalid_response", naming the failing field paths.
    """
    if type(raw) is not dict and not isinstance(raw, Mapping):
        raise TargetError("invalid_response", f"{source} is not an object (got {_json_type(raw)})")
    plain = plain_response(raw)
    if plain is not None:
        timings: dict[str, float] = {}
        debug = plain["debug"]
        if debug is not None and debug["timings_ms"] is not None:
            for key, value in debug["timings_ms"].items():
                # plain holds finite numbers only: as model_dump() gives them
                if type(value) is float or type(value) is int:
                    timings[key] = float(value)
        return AskResult(missing_fields=find_missing_fields(raw, request), server_timings_ms=timings, raw=raw,
                         plain=plain)
    try:
        response = AskResponse.model_validate(raw)
    except ValidationError as e:
        raise TargetError("invalid_response", f"{source} failed validation: {format_validation_error(e)}") from None
    timings = {}
    if response.debug is not None and response.debug.timings_ms is not None:
        for key, value in response.debug.timings_ms.model_dump().items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                timings[key] = float(value)
    return AskResult(
        response=response, missing_fields=find_missing_fields(raw, request), server_timings_ms=timings, raw=raw
    )


# --------------------------------------------------------------------------- the fast path
#
# `plain_response(raw)` is `AskResponse.model_validate(raw).model_dump(mode="json")` for the
# answers it can vouch for, and None for every other. It vouches only where pydantic would
# keep the value as it is: a declared field of exactly its type (an int in a float field
# becomes that float, as pydantic makes it), extra fields of plain JSON values (dicts with
# string keys, lists, strings, ints, bools, None, finite floats). Anything pydantic would
# coerce, reject or serialize differently (a "3" for an int, a tuple, a set, a NaN, a model
# object, a missing required field) goes to pydantic, which then says the same as before.


class _Unsure(Exception):
    """The fast path cannot vouch for a value: pydantic decides."""


_UNSURE = _Unsure()
_REQUIRED = object()


def _extra(value: Any) -> Any:
    """A copy of a JSON-plain value (what model_dump(mode="json") gives for it); _Unsure otherwise."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        if value - value == 0.0:  # finite: inf - inf and NaN - NaN are NaN
            return value
        raise _UNSURE
    if kind is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise _UNSURE
            out[k] = _extra(v)
        return out
    if kind is list:
        return [_extra(v) for v in value]
    raise _UNSURE


def _str(value: Any) -> Any:
    if type(value) is str:
        return value
    raise _UNSURE


def _opt_str(value: Any) -> Any:
    if value is None or type(value) is str:
        return value
    raise _UNSURE


def _opt_int(value: Any) -> Any:
    if value is None or type(value) is int:
        return value
    raise _UNSURE


def _opt_float(value: Any) -> Any:
    kind = type(value)
    if kind is float:
        if value - value == 0.0:
            return value
    elif value is None:
        return None
    elif kind is int and -(1 << 53) <= value <= 1 << 53:  # exactly that float
        return float(value)
    raise _UNSURE


def _opt_bool(value: Any) -> Any:
    if value is None or type(value) is bool:
        return value
    raise _UNSURE


def _str_list(value: Any) -> Any:
    if type(value) is list and all(type(v) is str for v in value):
        return list(value)
    raise _UNSURE


# A field's annotation -> the check that passes its value through (or _Unsure).
_CHECKS: dict[Any, Any] = {str: _str, str | None: _opt_str, int | None: _opt_int, float | None: _opt_float,
                           bool | None: _opt_bool, list[str]: _str_list}


def _fields(model: Any, nested: Mapping[str, Any] = {}) -> tuple[tuple[str, Any, Any], ...]:  # noqa: B006
    """(name, check, default) per field of a response model, in declaration order (the order
    model_dump gives); `nested` names the checks of fields holding models. Built once from
    schema.py, so a field added there is checked here or refused at import."""
    out = []
    for name, info in model.model_fields.items():
        check = nested.get(name) or _CHECKS.get(info.annotation)
        if check is None or info.alias is not None or info.validation_alias is not None:
            raise TypeError(f"plain_response: no fast check for {model.__name__}.{name} ({info.annotation})")
        if info.is_required():
            default = _REQUIRED
        elif info.default_factory is not None:
            default = info.default_factory
        else:
            default = (lambda v: lambda: v)(info.default)
        out.append((name, check, default))
    return tuple(out)


# The types a field of each kind holds as is (no conversion, no finiteness to check but a float's).
_AS_IS: dict[Any, frozenset[type]] = {str: frozenset({str}), str | None: frozenset({str, type(None)}),
                                      int | None: frozenset({int, type(None)}),
                                      float | None: frozenset({float, type(None)}),
                                      bool | None: frozenset({bool, type(None)})}


def _model_check(fields: tuple[tuple[str, Any, Any], ...], *, optional: bool, model: Any = None) -> Any:
    """The check of one response model's object. With `model` (a model of scalar fields only),
    an object with exactly its fields, in its order, each of a type kept as is (the usual
    answer's chunks and references), is copied in one step: which type tuples pass is
    learnt once per tuple."""
    names = frozenset(name for name, _, _ in fields)
    order = tuple(name for name, _, _ in fields)
    as_is = [_AS_IS.get(info.annotation) for info in model.model_fields.values()] if model is not None else None
    lane = as_is is not None and all(a is not None for a in as_is)
    floats = tuple(i for i, info in enumerate(model.model_fields.values()) if info.annotation == float | None) if lane else ()
    passing: dict[tuple[type, ...], bool] = {}

    def general(value: Any) -> Any:
        out = {}
        for name, field_check, default in fields:
            if name in value:
                out[name] = field_check(value[name])
            elif default is _REQUIRED:
                raise _UNSURE
            else:
                out[name] = default()
        if len(value) > len(out) or not names.issuperset(value):
            for key, v in value.items():
                if key not in names:
                    if type(key) is not str:
                        raise _UNSURE
                    out[key] = _extra(v)
        return out

    def check(value: Any) -> Any:
        if value is None and optional:
            return None
        if type(value) is not dict:
            raise _UNSURE
        if lane and tuple(value) == order:
            values = tuple(value.values())
            kinds = tuple(map(type, values))
            ok = passing.get(kinds)
            if ok is None:
                ok = all(kind in allowed for kind, allowed in zip(kinds, as_is))  # type: ignore[arg-type]
                if len(passing) < 256:
                    passing[kinds] = ok
            if ok:
                for i in floats:
                    v = values[i]
                    if v is not None and v - v != 0.0:  # not finite
                        raise _UNSURE
                return dict(value)
        return general(value)

    return check


def _list_of(check: Any) -> Any:
    def checked(value: Any) -> Any:
        if type(value) is not list:
            raise _UNSURE
        return [check(v) for v in value]

    return checked


def _fast_checks() -> Any:
    from evalkit.schema import (
        DebugInfo,
        FolderSelection,
        Reference,
        RetrievedChunk,
        Timings,
        Versions,
    )

    chunk = _model_check(_fields(RetrievedChunk), optional=False, model=RetrievedChunk)
    debug = _model_check(_fields(DebugInfo, {
        "retrieved_chunks": _list_of(chunk),
        "folder_selection": _model_check(_fields(FolderSelection), optional=True),
        "timings_ms": _model_check(_fields(Timings), optional=True, model=Timings),
        "versions": _model_check(_fields(Versions), optional=True, model=Versions),
    }), optional=True)
    reference = _model_check(_fields(Reference), optional=False, model=Reference)
    return _model_check(_fields(AskResponse, {"references": _list_of(reference), "debug": debug}), optional=False)


_response_check = _fast_checks()


def plain_response(raw: Any) -> dict[str, Any] | None:
    """`AskResponse.model_validate(raw).model_dump(mode="json")`, without pydantic, when every
    value of `raw` is one the fast path vouches for (see above); None otherwise (then
    pydantic validates: it may accept with a coercion, or reject)."""
    try:
        return _response_check(raw)
    except _Unsure:
        return None
    except RecursionError:  # extra values nested deeper than Python recurses: pydantic says
        return None


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
