"""Imports run one way between evalkit's top-level modules and packages (issue 25 item 6): no
cycle, counting imports inside functions (they run too, later), not counting imports under
`if TYPE_CHECKING:` (they never run). The cycles it found (report -> matrix -> api -> runner
-> report; judges <-> grades; cli <-> starter) were cut: a type-only import, grades moved into
judges/, the starter's toml writer moved into the CLI it reads."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "evalkit"


def _graph() -> dict[str, dict[str, str]]:
    edges: dict[str, dict[str, str]] = defaultdict(dict)  # unit -> {unit it imports: where}
    for path in sorted((ROOT / "evalkit").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        type_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                     and getattr(block.test, "id", getattr(block.test, "attr", None)) == "TYPE_CHECKING"
                     for stmt in block.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("evalkit"):
                targets = [f"evalkit.{a.name}" for a in node.names] if node.module == "evalkit" else [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("evalkit")]
            else:
                continue
            for target in targets:
                if _unit(target) != _unit(module) and _unit(target) != "evalkit":
                    edges[_unit(module)].setdefault(_unit(target), f"{module}:{node.lineno}")
    return edges


def _cycle(edges: dict[str, dict[str, str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (depth-first search, colours)."""
    colour: dict[str, int] = {}
    stack: list[str] = []

    def visit(u: str) -> list[str] | None:
        colour[u] = 1
        stack.append(u)
        for v in edges.get(u, {}):
            if colour.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in colour and (found := visit(v)) is not None:
                return found
        stack.pop()
        colour[u] = 2
        return None

    for u in sorted(edges):
        if u not in colour and (found := visit(u)) is not None:
            return found
    return None


def test_no_import_cycle_between_top_level_modules_and_packages() -> None:
    edges = _graph()
    cycle = _cycle(edges)
    where = [] if cycle is None else [f"{a} -> {b} ({edges[a][b]})" for a, b in zip(cycle, cycle[1:])]
    assert cycle is None, where


def test_the_cycle_finder_finds_a_cycle() -> None:
    # the check above can fail: a planted cycle is found, with where each edge comes from
    assert _cycle({"a": {"b": "x:1"}, "b": {"c": "y:2"}, "c": {"a": "z:3"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b": "x:1"}, "b": {}}) is None
