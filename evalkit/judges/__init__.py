"""Answer-quality judges: groundedness, correctness, claim-level, abstention fallback.

`build_judge_runner(JudgeSettings(...))` gives a JudgeRunner whose `judge_record(record,
context)` applies EVAL.md's scoring rules to one results.jsonl record. Provider SDKs are
imported only when an LLM judge is built (judges/registry.py).
"""

from evalkit.judges.base import Judge, JudgeBackend, JudgeFailure, JudgeItem, JudgeOutcome
from evalkit.judges.runner import JudgeRunner, build_judge_runner
from evalkit.judges.settings import JudgeSettings, build_judge, resolve_judge, spot_check_settings

__all__ = [
    "Judge",
    "JudgeBackend",
    "JudgeFailure",
    "JudgeItem",
    "JudgeOutcome",
    "JudgeRunner",
    "JudgeSettings",
    "build_judge",
    "build_judge_runner",
    "resolve_judge",
    "spot_check_settings",
]
