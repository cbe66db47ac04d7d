"""Imports run one way between evalkit's top-level modules and packages (issue 25 item 6): no
cycle, counting imports inside functions (they run too, later), not counting imports under
`if TYPE_CHECKING:` (they never run). The cycles it found (report -> matrix -> api -> runner
-> report; judges <-> grades; cli <-> starter) were cut: a type-only import, grades moved into
judges/, the starter's toml writer moved into the CLI it reads; the re-layout by stage put the
shard rule in evalset/ (config validates `--shard` with it, and run/ sits above config)."""

from __future__ import annotations

from tests.import_graph import find_cycle, module_graph, unit_graph


def test_no_import_cycle_between_top_level_modules_and_packages() -> None:
    edges = unit_graph()
    cycle = find_cycle(edges)
    where = [] if cycle is None else [f"{a} -> {b} ({edges[a][b]})" for a, b in zip(cycle, cycle[1:])]
    assert cycle is None, where


def test_no_import_cycle_between_files() -> None:
    # issue 37 item 5: two file-level cycles were left inside packages (importers/__init__ <->
    # its format modules through FORMATS; report/html/__init__ <-> report/html/run); the shared
    # pieces moved to importers/base.py, importers/output.py and report/html/page.py
    edges = module_graph()
    cycle = find_cycle(edges)
    where = [] if cycle is None else [f"{a} -> {b} ({edges[a][b]})" for a, b in zip(cycle, cycle[1:])]
    assert cycle is None, where


def test_the_file_graph_sees_lazy_and_registry_imports() -> None:
    # imports inside functions and "module:name" registry strings are edges (they run too, later)
    edges = module_graph()
    assert "evalkit.interop.importers.gno" in edges["evalkit.interop.importers"]  # FORMATS
    assert "evalkit.report.html.page" in edges["evalkit.report.html.run"]  # inside _page()


def test_the_cycle_finder_finds_a_cycle() -> None:
    # the check above can fail: a planted cycle is found, with where each edge comes from
    assert find_cycle({"a": {"b": "x:1"}, "b": {"c": "y:2"}, "c": {"a": "z:3"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": "x:1"}, "b": {}}) is None
