"""ReferenceTarget: the built-in reference chatbot, in process (the default target)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from evalkit.errors import InputError, Problem, TargetError, did_you_mean
from evalkit.schema import AskRequest, IndexingCoverage
from evalkit.targets.base import AskResult, parse_ask_response, request_dict


class ReferenceTarget:
    """Asks `evalkit.reference.chatbot.ReferenceChatbot` directly, without HTTP.

    The chatbot indexes `vault` when the target is built. Each `ask` runs in a worker
    thread so concurrent cases overlap. The chatbot is our own code: an exception from
    it is a bug and propagates, with two exceptions recorded exactly as over HTTP: a
    configured embeddings/answer endpoint that fails (the server's 502) becomes
    TargetError("http_error", status=502), and a reply that breaks the contract becomes
    TargetError("invalid_response").

    Args:
        vault: folder of markdown notes to index.
        vault_id: the vault id that goes into chunk ids (default: the folder's name).
        params: free `--param key=value` options, put into the request's `options`.
        chatbot: an already-built chatbot (anything with `ask(dict) -> dict` and
            `index_stats() -> dict`); skips building one.

    Raises:
        InputError: the vault folder does not exist.
    """

    name = "reference"

    def __init__(
        self,
        vault: str | Path,
        vault_id: str | None = None,
        *,
        params: dict[str, Any] | None = None,
        chatbot: Any = None,
    ):
        self.vault = Path(vault)
        self.params = dict(params or {})
        if chatbot is None:
            if not self.vault.is_dir():
                raise InputError(Problem("vault folder not found" + did_you_mean(self.vault, folders=True), path=str(self.vault), field="--vault"))
            # Imported here: the reference chatbot (and its index) is only loaded when used.
            from evalkit.reference.chatbot import ReferenceChatbot

            chatbot = ReferenceChatbot(self.vault, vault_id=vault_id)
        self.chatbot = chatbot
        self.vault_id = getattr(chatbot, "vault_id", vault_id)

    async def ask(self, request: AskRequest, *, case_id: str | None = None) -> AskResult:
        """Ask the in-process chatbot.

        Raises:
            TargetError: "http_error" (502) if a configured model endpoint failed,
                "invalid_response" if the reply breaks the contract.
        """
        from evalkit.reference.openai_compat import BackendError

        try:
            raw = await asyncio.to_thread(self.chatbot.ask, request_dict(request, self.params))
        except BackendError as e:
            # A dead model endpoint is the system under test failing this case, not our bug.
            raise TargetError("http_error", str(e), status=e.status) from e
        except InputError as e:
            # What the server answers 400 (an unknown vault): recorded exactly as over HTTP.
            raise TargetError("http_error", "; ".join(str(p) for p in e.problems), status=400) from e
        return parse_ask_response(raw, request, source="reference chatbot")

    async def index_stats(self) -> IndexingCoverage | None:
        """The in-process index's coverage; None if the chatbot cannot tell."""
        stats = getattr(self.chatbot, "index_stats", None)
        if stats is None:
            return None
        raw = await asyncio.to_thread(stats)
        return None if raw is None else IndexingCoverage.model_validate(raw)

    def describe(self) -> dict:
        """Target settings for config.json (versions come with each response).

        Our own ReferenceChatbot also declares its reproducibility knobs (config.json's
        `reproducibility`): `tie_break`, the order of equal fused scores (index.fuse), and
        `deterministic`, True when it is lexical-only and extractive (no embeddings or chat
        endpoint, whose answers may vary), else None (unknown). An injected chatbot of the
        same shape declares neither.
        """
        desc = {"kind": "reference", "vault": str(self.vault), "vault_id": self.vault_id, "params": dict(self.params)}
        # Only loaded if a ReferenceChatbot was ever built: otherwise this one is not one.
        module = sys.modules.get("evalkit.reference.chatbot")
        if module is not None and isinstance(self.chatbot, module.ReferenceChatbot):
            from evalkit.reference.index import TIE_BREAK

            cfg = self.chatbot.config
            offline = not cfg.embeddings_base_url and not cfg.generative
            # How it searches a conversation's turn (ReferenceConfig.history_questions).
            desc.update(tie_break=TIE_BREAK, deterministic=True if offline else None,
                        history_questions=cfg.history_questions)
        return desc

    async def aclose(self) -> None:
        close = getattr(self.chatbot, "close", None)
        if callable(close):
            await asyncio.to_thread(close)
