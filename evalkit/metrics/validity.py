"""Structured-output validity: each response (or one field of it) checked against a JSON Schema.

`--response-schema schema.json` and/or `--require-fields a,b` (issue 13, item 6; seed 002's
"Expansion Schema Valid" scorer, AJV there, the `jsonschema` library here). The schema is
read and checked against its own meta-schema once, before anything runs (a bad schema is
a BadConfig: exit 2). Per case, `ResponseValidator.check` gives the record's
`response_validity`: `{"valid": bool, "errors": [up to 5 "<JSON path>: <message>"],
"n_errors": int}`. `jsonschema` is imported only when a schema is given.

What is validated: the target's decoded JSON response as it arrived (every target keeps
it: HTTP body, callable return value, replayed log line), or, with `--response-field
a.b`, the value at that dotted path of it (a list index is a number: `items.0`). A string
found there is parsed as JSON first: an answer that is JSON text is validated as the
object it spells, and a string that is not JSON is invalid ("not JSON"). Formats
(`"format": "date"`) are annotations, as the JSON Schema spec makes them by default.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as _field
from pathlib import Path
from typing import Any

from evalkit.errors import BadConfig, Problem
from evalkit.jsonio import loads, read_bytes

__all__ = ["MAX_ERRORS", "ResponseValidator", "build_response_validator", "require_fields_schema"]

MAX_ERRORS = 5  # error messages kept per case; n_errors counts them all
_MESSAGE_CHARS = 200


def require_fields_schema(fields: Sequence[str]) -> dict[str, Any]:
    """`--require-fields a,b` as a schema: an object holding those top-level keys."""
    return {"type": "object", "required": list(fields)}


@dataclass
class ResponseValidator:
    """A checked JSON Schema and where in a response to apply it.

    Attributes:
        schema: the schema (the file's, the require-fields one, or both under allOf).
        field: dotted path of the validated value in the response; None: the whole response.
        schema_sha256: sha256 of the schema file's bytes (None without a file).
        require_fields: the --require-fields names.
    """

    schema: Any
    field: str | None = None
    schema_sha256: str | None = None
    require_fields: list[str] = _field(default_factory=list)
    _validator: Any = _field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        from jsonschema.validators import validator_for  # lazily: only when a schema is given

        cls = validator_for(self.schema)
        self._validator = cls(self.schema)

    def identity(self) -> dict[str, Any]:
        """What changes the measurement (goes into config_hash): schema content, fields, path."""
        return {"schema_sha256": self.schema_sha256, "require_fields": list(self.require_fields), "field": self.field}

    def check(self, response: Any) -> dict[str, Any]:
        """`response_validity` of one decoded response (a dict)."""
        value, problem = _select(response, self.field)
        if problem is not None:
            return {"valid": False, "errors": [problem], "n_errors": 1}
        try:
            errors = sorted(self._validator.iter_errors(value), key=lambda e: (e.json_path, e.message))
        except Exception as e:  # noqa: BLE001 - an unresolvable $ref: the instrument failed, not the target
            return {"valid": None, "errors": [_cut(f"schema could not be applied: {type(e).__name__}: {e}")], "n_errors": 0}
        return {
            "valid": not errors,
            "errors": [_cut(f"{e.json_path}: {e.message}") for e in errors[:MAX_ERRORS]],
            "n_errors": len(errors),
        }


def _cut(message: str) -> str:
    message = " ".join(message.split())
    return message if len(message) <= _MESSAGE_CHARS else message[: _MESSAGE_CHARS - 1] + "…"


def _select(response: Any, path: str | None) -> tuple[Any, str | None]:
    """The value to validate, or a problem ("<path>: ...") making the case invalid."""
    value = response
    if path:
        walked: list[str] = []
        for part in path.split("."):
            walked.append(part)
            if isinstance(value, Mapping) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                return None, f"{'.'.join(walked)}: not in the response"
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except (ValueError, RecursionError):
                return None, f"{path}: not JSON"
    return value, None


def build_response_validator(
    schema_path: str | Path | None, *, field: str | None = None, require_fields: Sequence[str] = ()
) -> ResponseValidator | None:
    """The validator the settings ask for, or None (no --response-schema, no --require-fields).

    Raises:
        BadConfig: the schema file is missing, not JSON, or not a valid JSON Schema (checked
            against its meta-schema); a blank --require-fields name; a malformed --response-field.
    """
    fields = [f.strip() for f in require_fields]
    if field is not None and (not field.strip() or any(not p for p in field.split("."))):
        raise BadConfig(Problem(f"not a dotted path: {field!r} (e.g. answer or debug.expansion)", field="--response-field"))
    if any(not f for f in fields):
        raise BadConfig(Problem("a blank field name (give a,b)", field="--require-fields"))
    if schema_path is None and not fields:
        if field is not None:
            raise BadConfig(Problem("goes with --response-schema or --require-fields", field="--response-field"))
        return None
    schemas: list[Any] = []
    sha = None
    if schema_path is not None:
        path = Path(schema_path)
        raw = read_bytes(path, what="the schema", field="--response-schema", error=BadConfig)
        sha = hashlib.sha256(raw).hexdigest()
        # bounded: a schema nested too deeply, or not UTF-8, is bad input said at its line
        schema = loads(raw, path=str(path), field="--response-schema", error=BadConfig)
        if not isinstance(schema, dict | bool):
            raise BadConfig(Problem("a JSON Schema is an object (or true/false)", path=str(path), field="--response-schema"))
        _check_schema(schema, str(path))
        schemas.append(schema)
    if fields:
        schemas.append(require_fields_schema(fields))
    combined = schemas[0] if len(schemas) == 1 else {"allOf": schemas}
    return ResponseValidator(schema=combined, field=field, schema_sha256=sha, require_fields=fields)


def _check_schema(schema: Any, path: str) -> None:
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as e:
        where = e.json_path if hasattr(e, "json_path") else "$"
        raise BadConfig(
            Problem(f"not a valid JSON Schema: {where}: {_cut(e.message)}", path=path, field="--response-schema")
        ) from None
