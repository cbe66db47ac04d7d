"""Canned provider replies and records for the judge tests (imported by the test modules)."""

from __future__ import annotations

import json
from typing import Any

import httpx

OPENAI_URL = "https://api.openai.com/v1/chat/completions"
ANTHROPIC_URL = "https://api.anthropic.com/v1/messages"
OPENAI_MODEL = "gpt-4o-2024-08-06"
ANTHROPIC_MODEL = "claude-3-5-sonnet-20241022"


# --------------------------------------------------------------------------- canned replies


def openai_reply(content: str, *, prompt_tokens: int = 100, completion_tokens: int = 20, model: str = OPENAI_MODEL,
                 fingerprint: str | None = "fp_test123") -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "system_fingerprint": fingerprint,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop", "logprobs": None}
        ],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens},
    }


def anthropic_tool_reply(data: dict[str, Any] | None, *, name: str = "groundedness_verdict", text: str = "",
                         input_tokens: int = 100, output_tokens: int = 20, model: str = ANTHROPIC_MODEL) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    if data is not None:
        content.append({"type": "tool_use", "id": "toolu_test", "name": name, "input": data})
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if data is not None else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


GROUNDED = {"reasoning": "all claims are in chunk 1 and cited", "score": 5, "unsupported_claims": [], "supported_claims": ["The port is 8080."]}
CORRECT = {"reasoning": "fully correct", "score": 4, "key_facts_covered": ["port 8080"], "key_facts_missing": []}
ABSTAINED = {"abstained": True, "confidence": 0.9}
ANSWERED = {"abstained": False, "confidence": 0.8}


def by_kind(replies: dict[str, Any]):
    """A respx side effect answering OpenAI requests by the schema name in response_format."""
    calls: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append(body)
        rf = body.get("response_format") or {}
        name = (rf.get("json_schema") or {}).get("name", "")
        if not name:  # JSON mode: look at the prompt
            text = body["messages"][-1]["content"]
            name = "abstention_verdict" if "cannot answer the question" in text else (
                "correctness_verdict" if "correctly addresses" in text else "groundedness_verdict")
        kind = name.removesuffix("_verdict")
        reply = replies[kind]
        if isinstance(reply, httpx.Response):
            return reply
        return httpx.Response(200, json=openai_reply(json.dumps(reply)))

    handler.calls = calls  # type: ignore[attr-defined]
    return handler


def make_record(case_id: str = "q1", *, answer: str = "The port is 8080 [1].", answerable: bool = True,
                abstained: bool | None = False, chunks: list[dict[str, Any]] | None = None,
                error: dict[str, Any] | None = None, key_facts: list[str] | None = None, case_index: int = 0) -> dict[str, Any]:
    """A results.jsonl record shaped like the runner writes it."""
    if chunks is None:
        chunks = [
            {"chunk_id": "c1", "rel_path": "ops/server.md", "heading_path": "# Server", "rank": 1,
             "start_line": 1, "end_line": 3, "text": "The server listens on port 8080 by default.", "text_truncated": False},
            {"chunk_id": "c2", "rel_path": "ops/db.md", "heading_path": "# Database", "rank": 2,
             "start_line": 1, "end_line": 2, "text": "The database runs PostgreSQL 16 on a separate host.", "text_truncated": False},
        ]
    return {
        "schema_version": 1,
        "test_case_id": case_id,
        "case_index": case_index,
        "case": {"id": case_id, "question": "Which port does the server listen on?", "answerable": answerable,
                 "expected_key_facts": ["port 8080"] if key_facts is None else key_facts, "tags": ["ops"], "category": "factual", "gold_supports": []},
        "question": "Which port does the server listen on?",
        "answer": answer,
        "references": [{"chunk_id": "c1", "rel_path": "ops/server.md", "heading_path": "# Server"}],
        "retrieved_chunks": chunks,
        "config": {"k": 5},
        "latency": {"total_ms": 10.0},
        "retrieval_metrics": {},
        "groundedness": None,
        "correctness": None,
        "abstention": {"abstained": abstained, "hallucinated": None, "method": "target" if abstained is not None else None},
        "judge_input": None,
        "cost": {"judge_tokens": 0, "judge_cost_usd": 0.0},
        "error": error,
        "judge_errors": [],
        "missing_fields": [],
    }
