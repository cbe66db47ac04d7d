"""SDKs stay out of `import evalkit.judges` and of the CLI's startup (STYLE §6.1, §6.4)."""

from __future__ import annotations

import subprocess
import sys


def test_no_sdk_or_rich_on_import():
    code = (
        "import sys, evalkit.judges, evalkit.rescore.answers, evalkit.judges.heuristic;"
        "bad = [m for m in ('openai', 'anthropic', 'httpx', 'rich') if m in sys.modules];"
        "assert not bad, bad;"
        "import evalkit.cli.judge_answers;"
        "bad = [m for m in ('openai', 'anthropic') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
