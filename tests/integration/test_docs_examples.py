"""Every example output marked in the docs is what its command prints (issue 43 item 6).

docs/tools/examples.py runs each marked command against the reference chatbot over a copy of
sample_vault/ and eval_set.jsonl in a temporary folder, one folder per session (examples that
share runs share it, so each run is made once), and compares after the narrow normalization its
docstring lists. A failure names the page and the block's line, with a diff;
`python docs/tools/examples.py --write` rewrites what it can.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import docs_examples_tool

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


_tool = docs_examples_tool


def _sessions() -> list[str]:
    """The sessions, one test each: xdist spreads them over the cores, and a failure names one."""
    return sorted({ex.session for ex in _tool().collect()[1]})


def test_every_marker_reads() -> None:
    _, examples, problems = _tool().collect()
    assert examples, "no example is marked"
    assert problems == []


@pytest.mark.parametrize("session", _sessions())
def test_every_example_output_is_what_its_command_prints(session: str) -> None:
    tool = _tool()
    sessions, examples, _ = tool.collect()
    outcomes = tool.run_session(session, sessions.get(session), [ex for ex in examples if ex.session == session])
    stale = [why for why in map(tool.stale, outcomes) if why]
    assert stale == [], "\n\n".join(stale)


def test_a_changed_number_in_a_block_is_caught() -> None:
    # the check can fail: each example's own block, as if its command printed one number otherwise
    tool = _tool()
    _, examples, _ = tool.collect()
    for ex in examples:
        text = tool.shown(ex.block)
        assert tool.stale(tool.Outcome(ex, produced=text)) is None, ex.block.where
        lines = text.splitlines(keepends=True)
        at = next(i for i, line in enumerate(lines) if re.search(r"\d", line) and not tool.TIMING.search(line))
        lines[at] = re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), lines[at], count=1)
        changed = "".join(lines)
        why = tool.stale(tool.Outcome(ex, produced=changed))
        assert why is not None and why.startswith(ex.block.where), ex.block.where
