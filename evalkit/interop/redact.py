"""A shareable copy of a run folder, with every piece of note text replaced by a salted hash.

`redact_run` copies `results/<run_id>/` to `results/<run_id>-redacted/` (or `output`).
Questions, answers, chunk texts, judge reasons and inputs, expected answers, key facts,
gold snippets, error details and any other free text become `redacted:<16 hex>`, the
HMAC-SHA256 of the text (whitespace runs collapsed) under a salt. What is kept: the
structure, ids, anchors (rel_path, heading_path, chunk ids, line spans), tags, categories,
model and version names, scores and metrics.

Deny by default: every string in a record is redacted unless its path is on an allow-list
(`RECORD_KEEP`, `METRICS_KEEP`, ...), so a free-text field added later, or an unknown one a
target sent, cannot leak. Numbers, booleans, nulls and mapping keys are kept (they are
structure: tag names are keys of `by_tag`). Strings that are names of known free-text
fields (`ALWAYS_REDACT`: text, question, answer, detail, message, ...) are redacted even
inside an allowed section. config.json is kept as it is (settings, paths, versions: no note
text), apart from a probe's error detail. Other files in the folder are left out.

The salt: with none given, 32 random bytes, used once and never written anywhere, so the
hashes cannot be checked against guessed texts. With the same `salt` for two runs, equal
texts get equal hashes in both copies, so compare_runs on the two copies still finds the
answers that changed (drift) and the ones that did not. Empty answers stay empty: an empty
answer is a result (`empty_response_rate`), not text.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import orjson

from evalkit.errors import BadConfig, InputError, Problem
from evalkit.jsonio import MAX_WRITTEN_DEPTH, loads
from evalkit.store.atomic import staged_dir
from evalkit.store.runlog import Met, Rec
from evalkit.store.runs import (
    CONFIG_FILE,
    METRICS_FILE,
    RESULTS_FILE,
    RESULTS_JSON,
    SUMMARY_FILE,
    RunDir,
    RunFolderError,
    dumps_metrics,
)

__all__ = ["REDACTED_PREFIX", "REDACTION_FILE", "Redactor", "redact_run"]

REDACTED_PREFIX = "redacted:"
REDACTION_FILE = "redaction.json"
GRADES_FILE = "human_grades.jsonl"
_HEX_CHARS = 16  # 64 bits: no collision among a run's texts in practice, short enough to read

# Paths are dotted keys, `[]` for a list's items; patterns are fnmatch patterns.
RECORD_KEEP = (
    Rec.CASE_ID, "case.id", "case.category", "case.difficulty", "case.domain", "case.language",
    "case.doc_language",
    "case.tags[]", "case.vaults[]", "case.folders[]", "case.recency_conflict_rule",
    "case.gold_supports[].rel_path", "case.gold_supports[].heading_path", "case.gold_supports[].chunk_id",
    "case.gold_supports[].date",
    "references[].chunk_id", "references[].rel_path", "references[].heading_path", "references[].date",
    "retrieved_chunks[].chunk_id", "retrieved_chunks[].rel_path", "retrieved_chunks[].heading_path",
    "retrieved_chunks[].date",
    "folder_selection.mode", "folder_selection.selected_folders[]",
    "config.*", "indexing_coverage.*", "retrieval_metrics.*", "missing_fields[]",
    "groundedness.judge", "groundedness.method", "groundedness.model", "groundedness.answered_model_id",
    "groundedness.system_fingerprint", "groundedness.prompt_version", "groundedness.prompt_hash",
    "groundedness.judge_identity.*",
    "correctness.judge", "correctness.method", "correctness.model", "correctness.answered_model_id",
    "correctness.system_fingerprint", "correctness.prompt_version", "correctness.prompt_hash", "correctness.basis",
    "correctness.judge_identity.*",
    "abstention.method",
    "judge_input.context_chunk_ids[]",
    "error.kind", "judge_errors[].judge", "judge_errors[].reason",
    "latency_budget.*", "case.constraints.*",
)
METRICS_KEEP = (
    "run_id", "timestamp", "config_hash", "dataset_version", Met.EVAL_SET_COMMIT_HASH,
    "aggregate_metrics.*", "by_*", "invariants.*", "gate.*", "*_scoring.*",
    "thresholds.*",
    "warnings[].kind", "warnings[].severity", "warnings[].ids[]",
)
GRADES_KEEP = (Rec.CASE_ID, "graded_at")
CONFIG_KEEP = ("*",)
# Free text by name, redacted even inside an allowed section.
ALWAYS_REDACT = (
    "*.text", "*.question", "*.answer", "*.detail", "*.message", "*.reasoning", "*.raw", "*.reason",
    "*snippet*", "*.problems[]", "*.warnings[]", "*.failures[]",
)
# The one free text config.json holds: the probe's error detail (a target's reply).
_CONFIG_REDACT = ("*sessions[].probe.error.detail",)
# Inside these sections `reason` is a kind, not text (gate.skipped[].reason, judge_errors).
_REASON_IS_KIND = ("judge_errors[].reason", "gate.skipped[].reason")


class Redactor:
    """Replaces strings not on an allow-list with `redacted:<hmac>`; pure, no I/O.

    Args:
        key: the HMAC key (the salt's bytes).
        keep: fnmatch patterns of paths whose strings are kept.
        redact: patterns redacted even when `keep` matches (default ALWAYS_REDACT).
    """

    def __init__(self, key: bytes, keep: Iterable[str], redact: Iterable[str] = ALWAYS_REDACT):
        self._key = key
        # fnmatch reads `[]` as a character class: match on `#` for list items instead.
        self._keep = tuple(p.replace("[]", "#") for p in keep)
        self._redact = tuple(p.replace("[]", "#") for p in redact)
        self._reason_is_kind = tuple(p.replace("[]", "#") for p in _REASON_IS_KIND)
        self._decisions: dict[str, bool] = {}

    def text(self, value: str) -> str:
        """`value`'s redacted form. Blank text stays as it is: emptiness is a result."""
        if not value.strip():
            return value
        normalized = " ".join(value.split()).encode("utf-8")
        return REDACTED_PREFIX + hmac.new(self._key, normalized, hashlib.sha256).hexdigest()[:_HEX_CHARS]

    def kept(self, path: str) -> bool:
        """Whether strings at `path` (dotted keys, `#` for list items) are kept."""
        decided = self._decisions.get(path)
        if decided is None:
            dotted = "." + path
            denied = path not in self._reason_is_kind and any(fnmatchcase(dotted, p) for p in self._redact)
            decided = not denied and any(fnmatchcase(path, p) for p in self._keep)
            self._decisions[path] = decided
        return decided

    def walk(self, obj: Any, path: str = "") -> Any:
        """A copy of `obj` with the strings at paths not kept redacted (inputs are not changed)."""
        if isinstance(obj, Mapping):
            return {k: self.walk(v, f"{path}.{k}" if path else str(k)) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [self.walk(v, f"{path}#") for v in obj]
        if isinstance(obj, str):
            return obj if self.kept(path) else self.text(obj)
        return obj


def _salt_bytes(salt: str | bytes | None) -> tuple[bytes, bool]:
    if salt is None:
        return secrets.token_bytes(32), False
    raw = salt.encode("utf-8") if isinstance(salt, str) else bytes(salt)
    if not raw:
        raise BadConfig(Problem("the salt is empty; give a secret text, or leave --salt out for a random one", field="--salt"))
    return raw, True


def salt_id(key: bytes) -> str:
    """A fingerprint of the salt (not the salt): equal in two copies made with the same salt."""
    return hmac.new(key, b"evalkit redact salt id", hashlib.sha256).hexdigest()[:12]


def redact_run(
    run_id: str,
    *,
    results_dir: str | Path = "results",
    output: str | Path | None = None,
    salt: str | bytes | None = None,
) -> Path:
    """Write a redacted, shareable copy of a run folder (see the module docstring).

    Args:
        run_id: the run (`latest` for the newest).
        results_dir: the folder holding run folders.
        output: the copy's folder (default `<results_dir>/<run_id>-redacted`); must not exist.
        salt: the HMAC key; None means a random one that is not kept (copies cannot be
            compared by hash with other copies). The same salt makes two copies comparable.

    Returns:
        The copy's folder. It holds results.jsonl, metrics.json, config.json, summary.md
        and results.json (rendered from the redacted files), human_grades.jsonl when the run has one, and
        redaction.json (source run id, method, salt fingerprint, files left out).

    Raises:
        RunNotFound: no such run.
        BadConfig: `output` exists, or the salt is empty.
        RunFolderError: the OS refused to write the copy (nothing is left half-written).
    """
    from evalkit.derive import open_run

    run = open_run(Path(results_dir), run_id)  # its derived files in step before they are copied
    out = Path(output) if output is not None else Path(results_dir) / f"{run.run_id}-redacted"
    if out.exists() or out.is_symlink():
        raise BadConfig(Problem(f"{out} already exists; remove it or pass another --output", field="--output"))
    key, given = _salt_bytes(salt)
    try:
        # Built out of sight, renamed when whole: no half copy under the real name.
        with staged_dir(out) as tmp:
            written, left_out = _write_copy(run, RunDir(tmp), key)
            manifest = {
                "redacted_from": run.run_id,
                "redacted_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "method": f"hmac-sha256, first {_HEX_CHARS} hex, whitespace collapsed; prefix {REDACTED_PREFIX!r}",
                "salt": "given (--salt)" if given else "random, not kept",
                "salt_id": salt_id(key),
                "files": sorted([*written, REDACTION_FILE]),
                "left_out": left_out,
            }
            (tmp / REDACTION_FILE).write_bytes(orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    except OSError as e:
        raise RunFolderError(Problem(f"cannot write the redacted copy: {e.strerror or e}", path=str(out))) from None
    from evalkit.store.resultsdb import keep_in_step

    keep_in_step(RunDir(out))  # a run folder beside the others: in the results database when there is one
    return out


def _write_copy(run: RunDir, copy: RunDir, key: bytes) -> tuple[list[str], list[str]]:
    """Redact each known file of `run` into `copy`. Returns (files written, names left out)."""
    written: list[str] = []
    records = Redactor(key, RECORD_KEEP)
    if run.results_path.exists():
        with open(copy.results_path, "wb") as f:
            for record in run.iter_results():
                f.write(orjson.dumps(records.walk(record), option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
        written.append(RESULTS_FILE)
    metrics = run.read_metrics()
    if metrics is not None:
        copy.metrics_path.write_bytes(dumps_metrics(Redactor(key, METRICS_KEEP).walk(metrics)) + b"\n")
        written.append(METRICS_FILE)
    if run.config_path.exists():
        config = Redactor(key, CONFIG_KEEP, _CONFIG_REDACT).walk(run.read_config())
        copy.config_path.write_bytes(orjson.dumps(config, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
        written.append(CONFIG_FILE)
    grades = run.path / GRADES_FILE
    if grades.exists():
        redactor = Redactor(key, GRADES_KEEP)
        with open(grades, "rb") as src, open(copy.path / GRADES_FILE, "wb") as dst:
            for line in src:
                if line.strip():
                    try:
                        grade = loads(line, max_depth=MAX_WRITTEN_DEPTH)  # bounded: the walk below recurses
                    except InputError:
                        continue  # a torn line: the reader skips it too
                    dst.write(orjson.dumps(redactor.walk(grade)) + b"\n")
        written.append(GRADES_FILE)
    if metrics is not None:
        from evalkit.derive.summary import render_run_summary

        # Rendered from the redacted files: the questions in "worst cases" are hashes too.
        text = render_run_summary(copy)
        if text is not None:
            (copy.path / SUMMARY_FILE).write_text(text, encoding="utf-8")
            written.append(SUMMARY_FILE)
        from evalkit.derive.summary import write_results_json

        # From the redacted files too (the case rows hold ids and tags, hashed in the copy).
        copied = copy.read_metrics()
        write_results_json(copy, copied, copy.read_config() if copy.config_path.exists() else None)
        written.append(RESULTS_JSON)
    known = {RESULTS_FILE, METRICS_FILE, CONFIG_FILE, SUMMARY_FILE, GRADES_FILE, RESULTS_JSON}
    left_out = sorted(p.name for p in run.path.iterdir() if p.name not in known and not p.name.startswith("."))
    return written, left_out

