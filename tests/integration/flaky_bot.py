"""`--target python:tests.integration.flaky_bot:...` targets for the reproducibility check.

`ask`: the reference chatbot over sample_vault/, except that each retrieved chunk's
score_final is lowered by 0.001 x (how many times this question was asked before), a
process-wide count: the ranking and every metric stay the same, the scores do not, so a
second run differs from the first on every case (by at most a few thousandths).
`broken`: fails every request (an incomplete run).

Import it by module name (not by file path, which loads a fresh copy per run and so
would reset the count).
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

from evalkit.reference.chatbot import ReferenceChatbot, ReferenceConfig

VAULT = Path(__file__).resolve().parents[2] / "sample_vault"
_ASKED: Counter[str] = Counter()
_LOCK = threading.Lock()
_BOT: list[ReferenceChatbot] = []


def _bot() -> ReferenceChatbot:
    with _LOCK:
        if not _BOT:
            _BOT.append(ReferenceChatbot(VAULT, config=ReferenceConfig()))
        return _BOT[0]


def ask(request: dict[str, Any]) -> dict[str, Any]:
    response = _bot().ask(request)
    with _LOCK:
        n = _ASKED[request["question"]]
        _ASKED[request["question"]] += 1
    for chunk in (response.get("debug") or {}).get("retrieved_chunks") or []:
        chunk["score_final"] = round(chunk["score_final"] - 0.001 * n, 6)
    return response


def broken(request: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("the index is down")
