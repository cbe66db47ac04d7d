"""Asking the chatbot live from a case page: the terminal labeler's own ask (`labeler.retrieve`).

The target is the one `evalkit label` asks (`--api-url`, `--target`, or the in-process
reference chatbot over the notes), built on the first ask inside the server's event loop and
kept. Each case is asked once (its question and history as on disk, with `k` and debug on, as
the labeler asks); the chunks, or the error, are kept for the session of the server, so a
reload or an edit does not ask again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["LIVE", "LiveTarget"]

LIVE = "live"  # the run selector's value for "ask the chatbot now"


class LiveTarget:
    """A target built on first use, and the chunks it returned per (eval set, case).

    Args:
        make: builds the Target (targets.build_target with the command's flags).
        k: chunks to ask for (the labeler's `--k`).
        name: how the page names it ("the reference chatbot over sample_vault", a URL...).
    """

    def __init__(self, make: Callable[[], Any], k: int, name: str):
        self.make = make
        self.k = k
        self.name = name
        self._target: Any = None
        self._asked: dict[tuple[str, str], tuple[list[dict[str, Any]], str | None]] = {}
        self._gate: asyncio.Lock | None = None

    async def chunks(self, path: Path, case_id: str) -> tuple[list[dict[str, Any]], str | None]:
        """(the chunks in rank order, the target's error or None) for the case, asked once."""
        from evalkit.authoring.labeler import LabelSession, retrieve
        from evalkit.authoring.labeling import EvalSetFile

        key = (str(path.resolve()), case_id)
        if key in self._asked:
            return self._asked[key]
        if self._gate is None:
            self._gate = asyncio.Lock()
        async with self._gate:  # one target, built once; asks one at a time (a person reads one case)
            if key not in self._asked:
                if self._target is None:
                    self._target = self.make()
                session = LabelSession(EvalSetFile(path), [case_id])
                await retrieve(session, self._target, self.k)
                self._asked[key] = (list(session.case.chunks or []), session.case.error)
        return self._asked[key]

    async def target(self) -> Any:
        """The target, built on first use."""
        if self._gate is None:
            self._gate = asyncio.Lock()
        async with self._gate:
            if self._target is None:
                self._target = self.make()
        return self._target

    async def aclose(self) -> None:
        if self._target is not None:
            await self._target.aclose()
