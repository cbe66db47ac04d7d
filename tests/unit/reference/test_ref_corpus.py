"""Vault walking and indexing coverage, checked by hand on a tiny vault."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.errors import InputError
from evalkit.reference.corpus import build_corpus, doc_type, walk_vault
from evalkit.schema import IndexingCoverage


def _write(root: Path, files: dict[str, bytes | str]) -> Path:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


@pytest.fixture
def tiny_vault(tmp_path: Path) -> Path:
    return _write(
        tmp_path / "vault",
        {
            "a.md": "# A\n\nalpha beta gamma\n",  # 1 chunk: #, A, alpha, beta, gamma = 5 tokens
            "sub/b.md": "# B\n\none two\n\n## Empty\n",  # 1 chunk (#, B, one, two = 4) + 1 empty
            "sub/empty.md": "",  # 0 chunks, nothing attempted
            "c.md": "x\n",  # 1 token: too_small, 0 chunks
            "sub/img.png": b"\x89PNG",
            "paper.pdf": b"%PDF",
            ".obsidian/app.json": "{}",  # hidden: not part of the vault
            "sub/.hidden.md": "# Hidden\n\nnot indexed\n",
        },
    )


def test_coverage_by_hand(tiny_vault: Path) -> None:
    corpus = build_corpus(tiny_vault)
    cov = corpus.coverage
    IndexingCoverage.model_validate(cov)
    assert cov["docs_processed"] == 4
    assert cov["docs_with_0_chunks"] == 2  # empty.md, c.md
    assert cov["chunks_attempted"] == 4  # a:1, b:2, empty:0, c:1
    assert cov["chunks_embedded"] == 2
    assert cov["chunks_skipped"] == 2
    assert cov["chunks_skipped_reasons"] == {"empty": 1, "too_small": 1}
    # by hand: token counts [4, 5]; p95 by nearest rank = ceil(0.95 * 2) = 2nd = 5
    assert cov["chunk_token_stats"] == {"min": 4, "max": 5, "mean": (4 + 5) / 2, "p95": 5}
    assert cov["chunker_version"] == "md-heading-v2"
    assert cov["coverage_by_doc_type"] == {
        "image": {"processed": 0, "with_0_chunks": 0, "chunks_skipped": 0, "docs_skipped": 1},
        "markdown": {"processed": 4, "with_0_chunks": 2, "chunks_skipped": 2},
        "pdf": {"processed": 0, "with_0_chunks": 0, "chunks_skipped": 0, "docs_skipped": 1},
    }
    assert corpus.folders == ["sub"]


def test_empty_vault_has_null_token_stats(tmp_path: Path) -> None:
    (tmp_path / "v").mkdir()
    cov = build_corpus(tmp_path / "v").coverage
    assert cov["docs_processed"] == 0 and cov["chunks_attempted"] == 0
    assert cov["chunk_token_stats"] == {"min": None, "max": None, "mean": None, "p95": None}


def test_walk_is_sorted_posix_and_skips_hidden(tiny_vault: Path) -> None:
    assert walk_vault(tiny_vault) == ["a.md", "c.md", "paper.pdf", "sub/b.md", "sub/empty.md", "sub/img.png"]


def test_missing_vault_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="vault folder not found"):
        build_corpus(tmp_path / "nope")


@pytest.mark.parametrize(
    ("path", "kind"),
    [("a.md", "markdown"), ("A.MARKDOWN", "markdown"), ("x.pdf", "pdf"), ("s.py", "code"),
     ("i.JPG", "image"), ("board.canvas", "canvas"), ("data.xyz", "xyz"), ("Makefile", "no_extension")],
)
def test_doc_type(path: str, kind: str) -> None:
    assert doc_type(path) == kind


def test_names_with_spaces_and_apostrophes(tmp_path: Path) -> None:
    vault = _write(tmp_path / "v", {"Status Collections/SlRvb's Alternate Checkboxes.md": "# SlRvb's\n\nsome text\n"})
    corpus = build_corpus(vault)
    assert [c.rel_path for c in corpus.chunks] == ["Status Collections/SlRvb's Alternate Checkboxes.md"]
    assert corpus.folders == ["Status Collections"]
