"""--response-schema / --response-field / --require-fields (issue 13, item 6): seed 002's
"Expansion Schema Valid" scorer (AJV there) with the jsonschema library."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.config import RunSettings
from evalkit.errors import BadConfig
from evalkit.metrics.aggregate import aggregate_records
from evalkit.metrics.validity import MAX_ERRORS, build_response_validator

# Seed 002 validates expandQuery's output (lexicalQueries / vectorQueries, "Has Lexical
# Variants" / "Has Vector Variants") against spec/output-schemas/expansion.schema.json,
# which the seed does not show; this is that shape.
EXPANSION_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["lexicalQueries", "vectorQueries"],
    "properties": {
        "lexicalQueries": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "vectorQueries": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "hyde": {"type": "string"},
    },
    "additionalProperties": False,
}


def write(tmp_path: Path, schema, name: str = "schema.json") -> Path:
    path = tmp_path / name
    path.write_text(schema if isinstance(schema, str) else json.dumps(schema))
    return path


def test_expansion_schema_valid_and_invalid(tmp_path: Path) -> None:
    v = build_response_validator(write(tmp_path, EXPANSION_SCHEMA), field="answer")
    good = {"lexicalQueries": ["termination clause"], "vectorQueries": ["contract termination terms"]}
    assert v.check({"answer": json.dumps(good)}) == {"valid": True, "errors": [], "n_errors": 0}
    bad = {"lexicalQueries": [], "vectorQueries": [3], "extra": 1}
    got = v.check({"answer": json.dumps(bad)})
    assert got["valid"] is False and got["n_errors"] == 3
    # Each message carries its JSON path (relative to the validated value), sorted by path.
    assert got["errors"] == [
        "$: Additional properties are not allowed ('extra' was unexpected)",
        "$.lexicalQueries: [] should be non-empty",
        "$.vectorQueries[0]: 3 is not of type 'string'",
    ]


def test_field_not_json_missing_and_object(tmp_path: Path) -> None:
    v = build_response_validator(write(tmp_path, EXPANSION_SCHEMA), field="answer")
    assert v.check({"answer": "Here you go: {...}"}) == {"valid": False, "errors": ["answer: not JSON"], "n_errors": 1}
    assert v.check({"references": []})["errors"] == ["answer: not in the response"]
    # A nested path; a value that is already an object is validated as it is.
    nested = build_response_validator(write(tmp_path, EXPANSION_SCHEMA), field="debug.expansion")
    good = {"lexicalQueries": ["a"], "vectorQueries": ["b"]}
    assert nested.check({"answer": "x", "debug": {"expansion": good}})["valid"] is True
    assert nested.check({"answer": "x", "debug": {}})["errors"] == ["debug.expansion: not in the response"]


def test_whole_response_and_at_most_five_errors(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {f"f{i}": {"type": "integer"} for i in range(8)}}
    v = build_response_validator(write(tmp_path, schema))
    got = v.check({"answer": "x", **{f"f{i}": "no" for i in range(8)}})
    assert got["valid"] is False and got["n_errors"] == 8 and len(got["errors"]) == MAX_ERRORS == 5
    assert got["errors"][0] == "$.f0: 'no' is not of type 'integer'"


def test_require_fields_is_a_short_schema(tmp_path: Path) -> None:
    v = build_response_validator(None, require_fields=["answer", "references"])
    assert v.schema == {"type": "object", "required": ["answer", "references"]}
    assert v.check({"answer": "x", "references": []})["valid"] is True
    assert v.check({"answer": "x"})["errors"] == ["$: 'references' is a required property"]
    # With a schema too: both must hold (allOf); the settings split "a,b".
    both = build_response_validator(write(tmp_path, {"type": "object"}), require_fields=["answer"])
    assert both.schema == {"allOf": [{"type": "object"}, {"type": "object", "required": ["answer"]}]}
    assert RunSettings(require_fields=["a,b", "c"]).require_fields == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "objekt"}, "not a valid JSON Schema: $.type:"),
        ({"required": "answer"}, "not a valid JSON Schema"),
        ("{not json", "not valid JSON (unexpected character"),  # orjson's words then ", column 2)" (jsonio)
        ("[1, 2]", "a JSON Schema is an object"),
    ],
)
def test_bad_schema_is_refused(tmp_path: Path, schema, message: str) -> None:
    path = write(tmp_path, schema)
    with pytest.raises(BadConfig) as e:
        build_response_validator(path)
    assert message in str(e.value) and str(path) in str(e.value)


def test_other_bad_settings(tmp_path: Path) -> None:
    with pytest.raises(BadConfig, match="cannot read the schema"):
        build_response_validator(tmp_path / "missing.json")
    with pytest.raises(BadConfig, match="goes with --response-schema"):
        build_response_validator(None, field="answer")
    with pytest.raises(BadConfig, match="not a dotted path"):
        build_response_validator(None, field="answer..x", require_fields=["a"])
    assert build_response_validator(None) is None


def test_schema_content_is_hashed_only_when_given(tmp_path: Path) -> None:
    path = write(tmp_path, {"type": "object"})
    a = RunSettings(response_schema=str(path)).hashed()["response_validity"]
    path.write_text(json.dumps({"type": "object", "required": ["answer"]}))
    b = RunSettings(response_schema=str(path)).hashed()["response_validity"]
    assert a["schema_sha256"] != b["schema_sha256"]  # same path, other schema: another config
    assert "response_validity" not in RunSettings().hashed()  # old runs keep their config_hash


def test_valid_rate_excludes_cases_without_a_verdict() -> None:
    def r(validity):
        return {"case": {"answerable": True}, "answer": "x", "response_validity": validity}

    records = [
        r({"valid": True, "errors": []}),
        r({"valid": False, "errors": ["$: x"]}),
        r({"valid": True, "errors": []}),
        r(None),  # target error or no schema: excluded, never 0
        r({"valid": None, "errors": ["schema could not be applied"]}),  # the instrument failed
    ]
    agg = aggregate_records(records, ks=[5])["aggregate_metrics"]
    assert agg["response_valid_rate"] == pytest.approx(2 / 3)
    assert agg["n"]["response_valid_rate"] == 3
    none = aggregate_records([r(None)], ks=[5])["aggregate_metrics"]
    assert none["response_valid_rate"] is None and none["n"]["response_valid_rate"] == 0


def test_cli_bad_schema_exits_2_before_anything_runs(tmp_path: Path) -> None:
    from evalkit.cli.run_eval import app

    es = tmp_path / "es.jsonl"
    es.write_text(json.dumps({"id": "1", "question": "q", "answerable": True}) + "\n")
    schema = write(tmp_path, {"type": 5})
    results = tmp_path / "results"
    out = CliRunner().invoke(app, [
        "--eval-set", str(es), "--target", "python:nowhere.mod:ask", "--retrieval-only", "--no-probe",
        "--results-dir", str(results), "--response-schema", str(schema), "--quiet",
    ])
    assert out.exit_code == 2, out.output
    assert "--response-schema" in out.output and "not a valid JSON Schema" in out.output
    assert not results.exists()


def test_jsonschema_is_not_imported_at_startup() -> None:
    code = "import sys, evalkit.cli.run_eval, evalkit.config, evalkit.metrics.validity; print('jsonschema' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
