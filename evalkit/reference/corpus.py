"""Read a vault folder, chunk every markdown note, and count indexing coverage.

Coverage follows the seed's `indexing_coverage` object (schema.IndexingCoverage):
attempted = indexed + skipped pieces; `chunks_embedded` counts the chunks that went into
the index (embedded when an embedding endpoint is configured, indexed lexically otherwise);
`chunk_token_stats` is over indexed chunks, p95 by the nearest-rank method.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

from evalkit.errors import InputError, Problem, did_you_mean
from evalkit.reference.chunker import CHUNKER_VERSION, Chunk, ChunkerConfig, DocChunks, chunk_markdown

MARKDOWN_SUFFIXES = (".md", ".markdown")
_DOC_TYPES = {
    ".pdf": "pdf",
    ".txt": "text",
    ".canvas": "canvas",
    **{s: "image" for s in (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".bmp")},
    **{s: "code" for s in (".py", ".js", ".ts", ".go", ".rs", ".java", ".c", ".h", ".cpp", ".sh", ".css", ".json", ".yaml", ".yml", ".toml")},
}


def doc_type(rel_path: str) -> str:
    """Coverage bucket of a file, by extension: markdown, pdf, code, image, ... or the bare extension."""
    suffix = os.path.splitext(rel_path)[1].lower()
    if suffix in MARKDOWN_SUFFIXES:
        return "markdown"
    return _DOC_TYPES.get(suffix, suffix.lstrip(".") or "no_extension")


@dataclass
class Corpus:
    """Every indexed chunk of a vault, in (rel_path, file order), and its coverage."""

    chunks: list[Chunk]
    docs: list[DocChunks]
    coverage: dict
    folders: list[str]  # folders (directories) that hold at least one indexed chunk


def walk_vault(vault: Path) -> list[str]:
    """Relative posix paths of every file under `vault`, sorted; hidden files and folders skipped.

    Raises:
        InputError: the vault is not a folder.
    """
    if not vault.is_dir():
        raise InputError(Problem("vault folder not found (pass --vault PATH)" + did_you_mean(vault, folders=True), path=str(vault)))
    found: list[str] = []
    for root, dirs, files in os.walk(vault):
        # .obsidian, .git, .trash: tool state, not notes
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if not name.startswith("."):
                found.append((Path(root) / name).relative_to(vault).as_posix())
    return sorted(found)


def build_corpus(vault: Path, *, vault_id: str = "default", config: ChunkerConfig | None = None) -> Corpus:
    """Chunk every markdown note of `vault`; other files are counted by type and skipped.

    Args:
        vault: the vault folder.
        vault_id: goes into every chunk id.
        config: chunking parameters.

    Returns:
        Corpus with chunks, per-note results and the coverage dict (without index_version,
        which the index adds once it knows its own build).
    """
    cfg = config or ChunkerConfig()
    docs: list[DocChunks] = []
    by_type: dict[str, dict] = {}
    for rel in walk_vault(vault):
        kind = doc_type(rel)
        cell = by_type.setdefault(kind, {"processed": 0, "with_0_chunks": 0, "chunks_skipped": 0})
        if kind != "markdown":
            cell["docs_skipped"] = cell.get("docs_skipped", 0) + 1
            continue
        doc = chunk_markdown((vault / rel).read_bytes(), rel, vault_id=vault_id, config=cfg)
        docs.append(doc)
        cell["processed"] += 1
        cell["with_0_chunks"] += not doc.chunks
        cell["chunks_skipped"] += len(doc.skipped)
    chunks = [c for d in docs for c in d.chunks]
    folders = sorted({c.rel_path.rsplit("/", 1)[0] for c in chunks if "/" in c.rel_path})
    return Corpus(chunks, docs, coverage_of(docs, cfg, by_type), folders)


def coverage_of(docs: list[DocChunks], cfg: ChunkerConfig, by_type: dict[str, dict] | None = None) -> dict:
    """The seed's indexing_coverage dict for chunked notes."""
    reasons: dict[str, int] = {}
    for d in docs:
        for s in d.skipped:
            reasons[s.reason] = reasons.get(s.reason, 0) + 1
    counts = sorted(c.token_count for d in docs for c in d.chunks)
    stats = {"min": None, "max": None, "mean": None, "p95": None}
    if counts:
        stats = {
            "min": counts[0],
            "max": counts[-1],
            "mean": sum(counts) / len(counts),
            "p95": counts[math.ceil(0.95 * len(counts)) - 1],  # nearest rank
        }
    embedded = sum(len(d.chunks) for d in docs)
    skipped = sum(len(d.skipped) for d in docs)
    return {
        "docs_processed": len(docs),
        "docs_with_0_chunks": sum(1 for d in docs if not d.chunks),
        "chunks_attempted": embedded + skipped,
        "chunks_embedded": embedded,
        "chunks_skipped": skipped,
        "chunks_skipped_reasons": dict(sorted(reasons.items())),
        "chunk_token_stats": stats,
        "chunker_version": CHUNKER_VERSION,
        "index_version": None,
        "coverage_by_doc_type": dict(sorted((by_type or {}).items())),
    }


def content_hash(chunks: list[Chunk]) -> str:
    """12 hex chars over every chunk id: changes when any indexed text or boundary changes."""
    h = hashlib.sha256()
    for c in chunks:
        h.update(c.chunk_id.encode())
    return h.hexdigest()[:12]
