"""The exit codes the docs state are the code's (evalkit/cli/common.py EXIT_*), issue 43: a
newcomer read `--baseline` exits 1 on a regression and met 4 (not enough evidence)."""

from __future__ import annotations

import re
from pathlib import Path

from evalkit.cli import common

ROOT = Path(__file__).resolve().parents[2]
# docs/cli.md is generated from the commands' own help, which states them from the constants.
PAGES = [ROOT / "README.md", ROOT / "EVAL.md", *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "cli.md")]
CODES = {name: getattr(common, name) for name in dir(common) if name.startswith("EXIT_")}


def _exit_list() -> dict[int, str]:
    """docs/running.md's "Exit codes" list: code -> its description."""
    text = (ROOT / "docs" / "running.md").read_text(encoding="utf-8")
    section = text.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    items = re.split(r"\n- (?=`\d+`)", "\n" + section)
    return {int(m.group(1)): m.group(2) for m in (re.match(r"`(\d+)`:(.*)", i, re.S) for i in items) if m}


def test_the_exit_code_list_is_the_codes_constants() -> None:
    listed = _exit_list()
    assert sorted(listed) == sorted(CODES.values())
    # each code says what its constant means
    words = {
        "EXIT_OK": "done", "EXIT_GATE": "gate failed", "EXIT_INPUT": "bad input", "EXIT_INCOMPLETE": "incomplete",
        "EXIT_INCONCLUSIVE": "not enough evidence", "EXIT_INTERNAL": "internal error", "EXIT_INTERRUPTED": "interrupted",
    }
    assert set(words) == set(CODES)
    for name, word in words.items():
        assert word in listed[CODES[name]], (name, listed[CODES[name]][:80])


def test_every_baseline_command_shown_states_the_codes_its_gate_exits_with() -> None:
    # `run_eval.py --baseline` exits with the merge decision: 1 a regression shown, 4 not enough
    # evidence (common.EXIT_GATE, EXIT_INCONCLUSIVE); a comment stating one must state both.
    shown = []
    for page in PAGES:
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if "run_eval.py --baseline" in line and "exit" in line:
                stated = {int(c) for c in re.findall(r"\b(\d+)\b", line.split("exit", 1)[1])}
                shown.append(f"{page.name}:{n}")
                assert stated <= set(CODES.values()), (page.name, n, line)
                assert {common.EXIT_GATE, common.EXIT_INCONCLUSIVE} <= stated, (page.name, n, line)
    assert len(shown) >= 2, shown  # README.md and docs/running.md show one at least
