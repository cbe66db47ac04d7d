"""evalkit's imports between its top-level modules and packages ("units"), for the layout
tests: imports inside functions count (they run too, later); imports under
`if TYPE_CHECKING:` do not (they never run)."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def unit_of(module: str) -> str:
    """`evalkit.run.runner` -> `run`; `evalkit` itself -> `evalkit`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "evalkit"


def unit_graph() -> dict[str, dict[str, str]]:
    """unit -> {unit it imports: the first `module:line` that does}."""
    edges: dict[str, dict[str, str]] = defaultdict(dict)
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
                # `evalkit` itself is the lazy front door (`__version__`, `run_eval`): not a layer
                if unit_of(target) != unit_of(module) and unit_of(target) != "evalkit":
                    edges[unit_of(module)].setdefault(unit_of(target), f"{module}:{node.lineno}")
    return edges


def find_cycle(edges: dict[str, dict[str, str]]) -> list[str] | None:
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


# A lazy registry's entry, "evalkit.interop.importers.gno:convert": imported by name, later.
_LAZY_TARGET = re.compile(r"evalkit(\.\w+)+:\w+")


def module_graph() -> dict[str, dict[str, str]]:
    """module -> {module it imports: the first line that does}, file by file: `from P import
    m` names module `P.m` when that is a file, else `P`; a "module:name" string (a lazy
    registry such as importers.FORMATS) counts as an import of that module. A package's
    `__init__`, which Python runs before any of its modules, is not an edge of its own, and
    `evalkit` itself (the lazy front door) is left out, as in `unit_graph`."""
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in sorted((ROOT / "evalkit").rglob("*.py"))}
    edges: dict[str, dict[str, str]] = defaultdict(dict)
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        type_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                     and getattr(block.test, "id", getattr(block.test, "attr", None)) == "TYPE_CHECKING"
                     for stmt in block.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("evalkit"):
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("evalkit")]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _LAZY_TARGET.fullmatch(node.value):
                targets = [node.value.partition(":")[0]]
            else:
                continue
            for target in targets:
                if target in files and target not in (module, "evalkit"):
                    edges[module].setdefault(target, f"{module}:{getattr(node, 'lineno', '?')}")
    return edges
