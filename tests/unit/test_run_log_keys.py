"""Issue 37 item 1: the run log's keys are spelled in one module, `evalkit.store.runlog`.

The keys below are the ones only a run folder's files use (a generic word such as
"answer" or "question" is also the HTTP contract's and the eval set's, and stays out of
this check): no other module of evalkit may write one as a string literal; each names it
through `Rec`, `Met`, `Cell`, `Cfg` (or `Rm`, `Verdict`, `RecConfig`)."""

from __future__ import annotations

import ast
from pathlib import Path

from evalkit.store import runlog

ROOT = Path(__file__).resolve().parents[2] / "evalkit"
HOME = ROOT / "store" / "runlog.py"

DISTINCTIVE = {
    runlog.Rec.CASE_ID, runlog.Rec.CASE_INDEX, runlog.Rec.RETRIEVAL_METRICS, runlog.Rec.GROUNDEDNESS,
    runlog.Rec.CORRECTNESS, runlog.Rec.JUDGE_ERRORS, runlog.Rec.MISSING_FIELDS, runlog.Rec.INDEXING_COVERAGE,
    runlog.Rec.REFERENCES_DROPPED, runlog.Rec.RETRIEVED_CHUNKS_DROPPED, runlog.Rec.ANSWER_TRUNCATED,
    runlog.Met.AGGREGATE, runlog.Met.TOTAL_TESTS, runlog.Met.ANSWERABLE_TESTS, runlog.Met.UNANSWERABLE_TESTS,
    runlog.Met.RUN_TIMING, runlog.Met.INVARIANTS, runlog.Met.EVAL_SET_COMMIT_HASH, runlog.Met.RETRIEVAL_SCORING,
    runlog.Met.ABSTENTION_SCORING, *runlog.Met.GROUPINGS,
    runlog.Cell.AT_K, runlog.Cell.OPERATIONAL, runlog.Cell.JUDGE_RELIABILITY, runlog.Cell.JUDGE_AGREEMENT,
}


def _in_literal_type(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside `Literal[...]`: a type names the values it admits, and a type checker reads
    only literals there (the judge kinds' type names "groundedness")."""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.Subscript):
            head = node.value
            if (isinstance(head, ast.Name) and head.id == "Literal") or (
                isinstance(head, ast.Attribute) and head.attr == "Literal"
            ):
                return True
    return False


def _spelled(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in DISTINCTIVE:
            if isinstance(parents.get(node), ast.JoinedStr) or _in_literal_type(node, parents):
                continue
            out.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {node.value!r}")
    return out


def test_the_run_log_keys_are_spelled_only_in_runlog() -> None:
    found = [hit for path in sorted(ROOT.rglob("*.py")) if path != HOME for hit in _spelled(path)]
    assert found == [], "spell these through evalkit.store.runlog:\n" + "\n".join(found)


def test_the_home_spells_each_key_once() -> None:
    values = [v for cls in (runlog.Rec, runlog.Met, runlog.Cell, runlog.Cfg, runlog.Rm, runlog.Verdict, runlog.RecConfig)
              for k, v in vars(cls).items() if k.isupper() and isinstance(v, str)]
    # A key may sit in two files' vocabularies (metrics.json and config.json both have
    # dataset_version), never twice in one class.
    for cls in (runlog.Rec, runlog.Met, runlog.Cell, runlog.Cfg, runlog.Rm, runlog.Verdict, runlog.RecConfig):
        own = [v for k, v in vars(cls).items() if k.isupper() and isinstance(v, str)]
        assert len(own) == len(set(own)), cls.__name__
    assert runlog.Rec.CASE_ID in values
