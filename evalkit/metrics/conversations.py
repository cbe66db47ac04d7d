"""Per-conversation numbers of a run whose eval set holds conversations (DESIGN.md §10).

Each turn is a case, and every per-case metric and slice (`by_turn`, `by_follow_up`) is
computed as for any case. This adds what only a whole conversation has, as metrics.json's
`conversations` block (EVAL.md "Conversations"):

- `n_conversations`, `n_turns`;
- `recall_at_k_avg`: the mean over conversations of each conversation's mean Recall@K
  (hit rate at the primary K) over its answerable, labeled turns, so that a long
  conversation counts as much as a short one (the overall recall_at_k_avg weighs turns);
- `pass_rate`: the share of conversations whose every turn passes (failure stage `pass`,
  metrics/stages.py); a turn nothing could be checked on (`unlabeled`: an answerable turn
  without gold supports, `unknown`) neither passes nor fails, and a conversation of such
  turns only is left out (`n.pass_rate`);
- `first_failure_by_turn`: for each turn position, how many conversations first fail
  there (`"none"`: never), so "retrieval falls apart after turn 1" is one line;
- `first_failure_stage`: at that first failing turn, which stage failed, counted.

A `--trials` run counts each (conversation, trial) as one conversation. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from evalkit.evalset.turns import record_turn
from evalkit.metrics.stages import STAGE_CODE, STAGES, case_stage
from evalkit.store.runlog import Cell

__all__ = ["ConversationStats"]

_PASS = STAGE_CODE["pass"]
_NOT_CHECKED = frozenset({STAGE_CODE["unlabeled"], STAGE_CODE["unknown"]})


class ConversationStats:
    """Fed each record with its reduction (`aggregate.extract_case`), in any order."""

    def __init__(self, k: int) -> None:
        self.k = k
        # (conversation id, trial) -> [(turn, stage code, hit or None)]
        self._turns: dict[tuple[str, int], list[tuple[int, int, float | None]]] = {}

    def add(self, record: Mapping[str, Any], x: Mapping[str, Any]) -> None:
        place = record_turn(record)
        if place is None:
            return
        values, abstention = x["values"], x["abstention"]
        hit = x[Cell.AT_K][str(self.k)]["recall_any"] if x["answerable"] and not x["unlabeled"] else None
        stage = case_stage(
            error=float(x["error_kind"] is not None),
            answerable=x["answerable"],
            labeled=not x["unlabeled"],
            abstained=None if abstention is None or abstention[1] is None else float(abstention[1]),
            recall_hit=hit,
            cited=values.get("attribution_hit_rate"),
            groundedness=values.get("groundedness_avg"),
            correctness=values.get("correctness_avg"),
        )
        hit = None if hit is None or (isinstance(hit, float) and math.isnan(hit)) else float(hit)
        self._turns.setdefault(place[0], []).append((place[1], stage, hit))

    def __bool__(self) -> bool:
        return bool(self._turns)

    def result(self) -> dict[str, Any] | None:
        """metrics.json's `conversations` block, or None when no record is a turn."""
        if not self._turns:
            return None
        means: list[float] = []
        passed = checked = 0
        first: dict[str, int] = {}
        stages: dict[str, int] = {}
        for turns in self._turns.values():
            turns.sort(key=lambda t: t[0])
            hits = [h for _, _, h in turns if h is not None]
            if hits:
                means.append(math.fsum(hits) / len(hits))
            scored = [(turn, stage) for turn, stage, _ in turns if stage not in _NOT_CHECKED]
            if not scored:
                continue
            checked += 1
            failing = next(((turn, stage) for turn, stage in scored if stage != _PASS), None)
            if failing is None:
                passed += 1
                first["none"] = first.get("none", 0) + 1
            else:
                first[str(failing[0])] = first.get(str(failing[0]), 0) + 1
                stages[STAGES[failing[1]]] = stages.get(STAGES[failing[1]], 0) + 1
        return {
            "n_conversations": len(self._turns),
            "n_turns": sum(len(t) for t in self._turns.values()),
            "k": self.k,
            "recall_at_k_avg": math.fsum(means) / len(means) if means else None,
            "n": {"recall_at_k_avg": len(means), "pass_rate": checked},
            "pass_rate": passed / checked if checked else None,
            "first_failure_by_turn": dict(sorted(first.items(), key=lambda kv: (kv[0] == "none", int(kv[0]) if kv[0] != "none" else 0))),
            "first_failure_stage": dict(sorted(stages.items())),
        }
