"""No module imports another module's private name (issue 25 item 6; STYLE: make it public or
move it). Imports inside functions count. 38 such names in 13 module pairs were made public.

The other half of that item, no import cycle between packages, waits for the re-layout by
pipeline stage (see the closing note of the session that wrote this test).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_no_module_imports_a_private_name_of_another() -> None:
    found = []
    for path in sorted((ROOT / "evalkit").rglob("*.py")):
        here = _module(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules: dict[str, str] = {}  # local name -> evalkit module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("evalkit"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__") and node.module != here:
                        found.append(f"{here}: from {node.module} import {alias.name} (line {node.lineno})")
                    if _is_module(f"{node.module}.{alias.name}"):
                        modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("evalkit") and alias.asname:
                        modules[alias.asname] = alias.name
        for node in ast.walk(tree):
            # `module._private` through an imported module object
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                    and node.attr.startswith("_") and not node.attr.startswith("__") and modules[node.value.id] != here):
                found.append(f"{here}: {modules[node.value.id]}.{node.attr} (line {node.lineno})")
    assert found == []
