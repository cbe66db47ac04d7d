"""What a run uses for the settings the user did not give, as plain values (no pydantic).

The one home of the defaults run_eval's `--help` says: RunSettings (evalkit.config) reads
its fields' defaults from RUN_DEFAULTS, and the CLI's help texts read them here, so that
`--help` of every script says them without building the pydantic models (issue 39 item 5:
building them was most of a --help's CPU). Importing this module imports nothing.
"""

from __future__ import annotations

import copy
from typing import Any

DEFAULT_EVAL_SET = "eval_set.jsonl"
DEFAULT_VAULT = "sample_vault"
DEFAULT_RESULTS_DIR = "results"
TRUNCATE_CHARS = 200

# RunSettings' field -> its default, for every field a CLI help text speaks of (a field the
# CLI marks as a run setting must be here: cli.common.run_setting looks it up).
RUN_DEFAULTS: dict[str, Any] = {
    "eval_set": [DEFAULT_EVAL_SET],
    "vault": DEFAULT_VAULT,
    "k": [5],
    "folder_mode": "off",
    "history": "live",
    "send_scope": "none",
    "rerank_vector_weight": 0.7,
    "rerank_lexical_weight": 0.3,
    "judge_temperature": 0.0,
    "judge_trials": 1,
    "allow_unpinned": False,
    "answer_quality": False,
    "no_cache": False,
    "results_dir": DEFAULT_RESULTS_DIR,
    "concurrency": 4,
    "target_processes": None,
    "task_cache": None,
    "timeout": 60.0,
    "retries": 3,
    "rps": None,
    "trials": 1,
    "max_error_rate": 0.0,
    "max_retry_wait": 60.0,
    "max_response_bytes": 32 * 1024 * 1024,
    "no_probe": False,
    "gate": None,
    "on_inconclusive": "exit-4",
    "allow_format_mismatch": False,
    "quiet": False,
    "json_output": False,
}


def default_of(field: str) -> Any:
    """RUN_DEFAULTS[field], a fresh copy of a list (RunSettings' default_factory and the CLI
    both take theirs from here)."""
    return copy.copy(RUN_DEFAULTS[field])


# The run_eval flags not named after their field (`--` + the field, `_` -> `-`): the one
# list of them, for messages in evalkit.config and for the CLI's parameter -> field mapping.
FLAG_OF_FIELD = {"json_output": "--json", "thresholds": "--threshold", "params": "--param",
                 "phase_budgets_ms": "--latency-budget"}


def flag_of(field: str) -> str:
    """The run_eval flag that sets RunSettings' `field`: `json_output` -> `--json`."""
    return FLAG_OF_FIELD.get(field, "--" + field.replace("_", "-"))
