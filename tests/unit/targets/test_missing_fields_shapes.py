"""find_missing_fields' fast checks (every item a dict with every field; versions complete)
give what its field-by-field reading gives, on answers they take and on those they pass on."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import pytest

from evalkit.schema import AskRequest, Reference, RetrievedChunk, Versions
from evalkit.targets.base import find_missing_fields

# The contract's fields, as schema.py declares them (find_missing_fields checks these).
_CHUNK_FIELDS = tuple(RetrievedChunk.model_fields)
_REFERENCE_FIELDS = tuple(Reference.model_fields)
_VERSION_FIELDS = tuple(Versions.model_fields)


class _View(Mapping):
    """A Mapping that is not a dict."""

    def __init__(self, d: dict) -> None:
        self._d = d

    def __getitem__(self, k: str) -> Any:
        return self._d[k]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)


def _by_field(raw: Mapping, mode: str) -> list[str]:
    """The rule read field by field (the docstring of find_missing_fields), as the reference."""
    out: list[str] = []

    def items(xs: Any, fields: tuple, prefix: str) -> list[str]:
        dicts = [x for x in xs if isinstance(x, Mapping)]
        return [f"{prefix}.{f}" for f in fields if dicts and any(f not in d for d in dicts)]

    if not isinstance(raw.get("references"), list):
        out.append("references")
    else:
        out += items(raw["references"], _REFERENCE_FIELDS, "references[]")
    if "abstained" not in raw:
        out.append("abstained")
    elif raw.get("abstained") is True and "abstain_reason" not in raw:
        out.append("abstain_reason")
    debug = raw.get("debug")
    sections = ["retrieved_chunks", *(["folder_selection"] if mode != "off" else []), "timings_ms", "versions"]
    if not isinstance(debug, Mapping):
        return [*out, "debug", *(f"debug.{s}" for s in sections)]
    if not isinstance(debug.get("retrieved_chunks"), list):
        out.append("debug.retrieved_chunks")
    else:
        out += items(debug["retrieved_chunks"], _CHUNK_FIELDS, "debug.retrieved_chunks[]")
    timings = debug.get("timings_ms")
    if not isinstance(timings, Mapping):
        out.append("debug.timings_ms")
    else:
        out += [f"debug.timings_ms.{k}" for k in ("retrieval", "generation") if k not in timings]
    versions = debug.get("versions")
    if not isinstance(versions, Mapping):
        out.append("debug.versions")
    else:
        out += [f"debug.versions.{k}" for k in _VERSION_FIELDS if k not in versions]
    return out


CHUNK = {f: None for f in _CHUNK_FIELDS} | {"text": "t", "rank": 1, "extra": 1}
REF = dict.fromkeys(_REFERENCE_FIELDS)
VERSIONS = dict.fromkeys(_VERSION_FIELDS, "v")


def _answer(chunks: Any, refs: Any, versions: Any) -> dict:
    return {"answer": "a", "references": refs, "abstained": False,
            "debug": {"retrieved_chunks": chunks, "timings_ms": {"retrieval": 1, "generation": 2}, "versions": versions}}


SHAPES = {
    "complete": _answer([CHUNK, dict(CHUNK)], [REF], VERSIONS),
    "no items": _answer([], [], VERSIONS),
    "a chunk lacks text": _answer([CHUNK, {k: v for k, v in CHUNK.items() if k != "text"}], [REF], VERSIONS),
    "a reference lacks lines": _answer([CHUNK], [REF, {"chunk_id": "c"}], VERSIONS),
    "a chunk is a Mapping, complete": _answer([CHUNK, _View(CHUNK)], [MappingProxyType(REF)], VERSIONS),
    "a Mapping chunk lacks a field": _answer([CHUNK, _View({"text": "t"})], [REF], VERSIONS),
    "items that are not objects": _answer([CHUNK, "x", None], [3, REF], VERSIONS),
    "only items that are not objects": _answer(["x"], [None], VERSIONS),
    "versions partial": _answer([CHUNK], [REF], {"llm_model": "m"}),
    "versions a complete Mapping": _answer([CHUNK], [REF], _View(VERSIONS)),
    "versions a partial Mapping": _answer([CHUNK], [REF], _View({"llm_model": None})),
    "versions null": _answer([CHUNK], [REF], None),
}


@pytest.mark.parametrize("name", SHAPES)
def test_missing_fields_are_the_field_by_field_reading(name: str) -> None:
    raw = SHAPES[name]
    assert find_missing_fields(raw, AskRequest(question="q", k=5)) == _by_field(raw, "off")


def test_the_shapes_reach_both_readings() -> None:
    # Complete answers list nothing; each partial one lists what it lacks.
    assert find_missing_fields(SHAPES["complete"]) == []
    assert find_missing_fields(SHAPES["a chunk lacks text"]) == ["debug.retrieved_chunks[].text"]
    assert find_missing_fields(SHAPES["a Mapping chunk lacks a field"])[0] == "debug.retrieved_chunks[].chunk_id"
    assert find_missing_fields(SHAPES["versions partial"]) == [f"debug.versions.{k}" for k in _VERSION_FIELDS if k != "llm_model"]
