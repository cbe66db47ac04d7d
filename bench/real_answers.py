"""Contract answers made of real text, for the benches that time the runner (issue 39).

`answers(corpus, pool, k)` gives `pool` /api/v1/ask response bodies, each with K retrieved
chunks cut from real documents: SciFact abstracts (/work/shared/corpora/scifact, one note
per abstract, its title as the heading) or the obsidian-tasks vault's sections (one note per
file, its headings). Chunks are about 300-600 characters, cut at sentence ends. A question
names its answer: `question_for(i)` ends in `#i`, and `answer_index(question, pool)` is
i % pool, so the stub server, the Python callable and the bare references all give case i the
same body. `gold_for(i, answers)` is a gold support for case i: the third chunk of its
answer, except for every fifth case, whose gold note is never retrieved (a realistic miss).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

CORPORA = Path("/work/shared/corpora")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _pieces(text: str, size: int = 450) -> list[str]:
    """`text` in pieces of about `size` characters, cut after a sentence."""
    out, cur = [], ""
    for sentence in _SENTENCE.split(text.strip()):
        cur = f"{cur} {sentence}".strip()
        if len(cur) >= size:
            out.append(cur)
            cur = ""
    if cur:
        out.append(cur)
    return out


def _scifact_sections(limit: int) -> list[tuple[str, str, str]]:
    """(rel_path, heading_path, text) per abstract piece."""
    out = []
    with open(CORPORA / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            for piece in _pieces(doc["text"]):
                out.append((f"scifact/{doc['_id']}.md", f"# {doc['title'].strip()}", piece))
            if len(out) >= limit:
                break
    return out


def _obsidian_sections(limit: int) -> list[tuple[str, str, str]]:
    """(rel_path, heading_path, text) per section of the obsidian-tasks vault's notes."""
    root = CORPORA / "obsidian-tasks" / "vault"
    out = []
    for path in sorted(root.rglob("*.md")):
        heading, body = f"# {path.stem}", []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines() + ["# end"]:
            if line.startswith("#"):
                text = " ".join(" ".join(body).split())
                for piece in _pieces(text) if len(text) > 80 else []:
                    out.append((path.relative_to(root).as_posix(), heading, piece))
                heading, body = line.strip(), []
            else:
                body.append(line)
        if len(out) >= limit:
            break
    return out


def answers(corpus: str = "scifact", pool: int = 256, k: int = 5) -> list[dict[str, Any]]:
    """`pool` contract response bodies of K real-text chunks each (see the module doc)."""
    sections = (_scifact_sections if corpus == "scifact" else _obsidian_sections)(pool * k + k)
    out = []
    for a in range(pool):
        chunks = []
        for r in range(k):
            rel_path, heading, text = sections[(a * k + r) % len(sections)]
            chunks.append({
                "chunk_id": f"{a:016x}{r:016x}", "rel_path": rel_path, "heading_path": heading,
                "start_line": 1 + 10 * r, "end_line": 9 + 10 * r, "score_vector": round(0.9 - 0.1 * r, 3),
                "score_lexical": round(0.5 - 0.05 * r, 3), "score_final": round(0.78 - 0.085 * r, 3),
                "text": text, "rank": r + 1, "token_count": len(text.split()),
            })
        first = chunks[0]
        out.append({
            "answer": f"{first['text'][:300]} [1]",
            "references": [{key: first[key] for key in ("chunk_id", "rel_path", "heading_path", "start_line", "end_line")}],
            "abstained": False,
            "debug": {
                "retrieved_chunks": chunks,
                "folder_selection": {"mode": "off", "selected_folders": [], "reasoning": "stub", "fallback_used": False},
                "timings_ms": {"folder_selection": 0.0, "retrieval": 0.0, "generation": 0.0},
                "versions": {"index_build_version": "stub", "retriever_version": "stub", "answerer_version": "stub",
                             "llm_model": "stub", "embedding_model": "stub", "chunker_version": "stub"},
            },
        })
    return out


def question_for(i: int) -> str:
    return f"benchmark question #{i}"


def answer_index(question: str, pool: int) -> int:
    return int(question.rsplit("#", 1)[1]) % pool


def gold_for(i: int, pool_answers: list[dict[str, Any]]) -> dict[str, str]:
    """Case i's gold support: in its answer (3rd chunk), or, every fifth case, a note never retrieved."""
    if i % 5 == 4:
        return {"rel_path": f"missing/never-{i}.md", "heading_path": "# Never retrieved"}
    chunk = pool_answers[i % len(pool_answers)]["debug"]["retrieved_chunks"][2]
    return {"rel_path": chunk["rel_path"], "heading_path": chunk["heading_path"]}


def eval_set(path: Path, n: int, pool_answers: list[dict[str, Any]]) -> None:
    """An eval set of n cases whose questions name their answers (question_for)."""
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            case = {"id": f"b{i:06d}", "question": question_for(i), "answerable": True,
                    "gold_supports": [gold_for(i, pool_answers)], "tags": ["bench"]}
            f.write(json.dumps(case) + "\n")
